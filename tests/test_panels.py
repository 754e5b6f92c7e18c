"""Figures a reader can read at the page's width (#42, item 6): the panel count each figure carries into its
PNG, and the arithmetic the browser test (tests/test_html.py) applies to it. These run without a browser,
and show the width check fails on the figure it was written for: Figure 2's per-block gradients drawn as
eight panels in one row."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rankcollapse.book.panels import (  # noqa: E402
    MAX_COLS,
    MIN_PANEL_PX,
    PAGE_PX,
    PNG_KEY,
    grid,
    grid_rc,
    panels_per_row,
    png_panels_per_row,
    px_per_panel,
)
from rankcollapse.chapters import repair_path as rpa  # noqa: E402


def _grads(n_seeds: int, blocks: int = 12) -> dict:
    rng = np.random.default_rng(0)
    keys = ("task_attn", "task_qk", "term_attn")

    def state():
        out = {k: list(10.0 ** rng.uniform(-12, -1, blocks)) for k in keys}
        out.update({f"{k}_zero": [bool(x) for x in rng.integers(0, 2, blocks)] for k in keys})
        return out

    return {s: {"collapsed": state(), "healthy": state()} for s in range(n_seeds)}


def test_the_old_eight_in_a_row_fails_the_width_check():
    fig, _ = plt.subplots(1, 8, figsize=(5.2 * 8, 3.6), squeeze=False)  # Figure 2 before #42
    n = panels_per_row(fig)
    plt.close(fig)
    assert n == 8
    assert px_per_panel(PAGE_PX, n) < MIN_PANEL_PX  # 84 px a panel: the browser test fails it


def test_grid_keeps_every_panel_readable():
    assert MAX_COLS * MIN_PANEL_PX <= PAGE_PX
    for n in (1, 2, 3, 5, 8, 10):
        fig, axs = grid(n)
        assert len(axs) == n
        k = panels_per_row(fig)
        plt.close(fig)
        assert k == min(n, MAX_COLS) and px_per_panel(PAGE_PX, k) >= MIN_PANEL_PX
    fig, axes = grid_rc(3, 3)
    assert axes.shape == (3, 3) and panels_per_row(fig) == MAX_COLS
    plt.close(fig)


def test_twin_axes_and_switched_off_cells_are_not_panels():
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.twinx()
    assert panels_per_row(fig) == 1
    plt.close(fig)
    fig, axs = plt.subplots(1, 3)
    axs[2].axis("off")
    assert panels_per_row(fig) == 2
    plt.close(fig)


def test_repair_path_figure_2_is_readable_with_eight_events():
    g = _grads(8)
    for f in (rpa.fig_block_grads(None, g), rpa.fig_block_grads_seeds(None, g)):
        n = panels_per_row(f)
        plt.close(f)
        assert px_per_panel(PAGE_PX, n) >= MIN_PANEL_PX, n


def test_the_count_travels_in_the_png(tmp_path):
    fig, _ = plt.subplots(1, 8)
    path = tmp_path / "f.png"
    fig.savefig(path, dpi=30, metadata={"Software": None, PNG_KEY: str(panels_per_row(fig))})
    plt.close(fig)
    assert png_panels_per_row(path) == 8
    fig, _ = plt.subplots()
    fig.savefig(tmp_path / "g.png", dpi=30)
    plt.close(fig)
    assert png_panels_per_row(tmp_path / "g.png") is None
