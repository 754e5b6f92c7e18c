"""Figures a reader can read at the page's width (#42, item 6).

At a 1280 px window the book's article column is about 672 px wide (pydata theme: 256 px of navigation, 272
px of "on this page", 32 px of padding either side), and every figure is scaled down to it. A panel drawn
narrower than :data:`MIN_PANEL_PX` on the page has unreadable ticks and legends, so no figure carries more
than :data:`MAX_COLS` panels in a row: :func:`grid` lays out ``n`` panels that way.

How the browser test knows a figure's panels: :meth:`rankcollapse.book.notebook.Chapter.figure` counts them
from the saved figure itself (:func:`panels_per_row`: the visible axes grouped by the row they sit in,
colorbars left out) and writes the count into the PNG as the text chunk :data:`PNG_KEY`. The image reaches
the built page byte for byte (myst-nb copies it to ``_images/``), so ``tests/test_html.py`` reads the count
from the very file the page shows (:func:`png_panels_per_row`), divides the image's rendered width by it
(:func:`px_per_panel`) and fails below :data:`MIN_PANEL_PX`. No ``fig_*`` has to declare anything: a figure
drawn with eight panels in a row says 8 because it has them.
"""

from __future__ import annotations

import struct
from pathlib import Path

PAGE_PX = 672  # the article column at a 1280 px window (measured in Chromium on the smoke book)
MIN_PANEL_PX = 250  # narrower than this on the page, a panel's ticks and legend are not readable
MAX_COLS = PAGE_PX // MIN_PANEL_PX  # 2: panels per row that stay readable at the page's width
PNG_KEY = "rcbook:panels_per_row"


def grid(n: int, panel_w: float = 4.2, panel_h: float = 3.2, ncols: int | None = None, **kw):
    """A figure of ``n`` panels, at most :data:`MAX_COLS` (or ``ncols``) to a row, and its axes as a flat
    list of ``n`` (the unused cells of the last row are switched off). ``kw`` goes to
    ``plt.subplots`` (``sharey``, ``sharex``...)."""
    import matplotlib.pyplot as plt

    ncols = max(1, min(n, ncols or MAX_COLS, MAX_COLS))
    nrows = -(-n // ncols)
    fig, axs = plt.subplots(nrows, ncols, figsize=(panel_w * ncols, panel_h * nrows), squeeze=False, **kw)
    flat = list(axs.flat)
    for ax in flat[n:]:
        ax.axis("off")
    return fig, flat[:n]


def grid_rc(nrows: int, ncols: int, panel_w: float = 4.2, panel_h: float = 3.2, **kw):
    """A figure whose panels form a table of ``nrows`` x ``ncols`` (row: one architecture, column: one
    task...), laid out :data:`MAX_COLS` to a row, read row by row; returns the figure and the axes as an
    ``nrows`` x ``ncols`` array, so ``axes[i, j]`` keeps its meaning. Each panel's title must then say its
    row and column, since the page no longer shows the table's rows side by side."""
    import numpy as np

    fig, flat = grid(nrows * ncols, panel_w, panel_h, **kw)
    axes = np.empty((nrows, ncols), dtype=object)
    for k, ax in enumerate(flat):
        axes[k // ncols, k % ncols] = ax
    return fig, axes


def panels_per_row(fig) -> int:
    """The most panels side by side in any row of ``fig``: visible axes (axis lines on, not a colorbar, not
    an inset) grouped by the vertical band they occupy; two axes share a row when their vertical extents
    overlap by more than half of the shorter one."""
    boxes = []
    for ax in fig.get_axes():
        if not ax.get_visible() or not ax.axison or ax.get_label() == "<colorbar>":
            continue
        if getattr(ax, "_colorbar", None) is not None or ax.get_axes_locator() is not None:
            continue
        pos = ax.get_position()
        boxes.append((pos.x0, pos.x1, pos.y0, pos.y1))

    def overlap(a0, a1, b0, b1):
        return min(a1, b1) - max(a0, b0) > 0.5 * min(a1 - a0, b1 - b0)

    best = 1
    for _, _, y0, y1 in boxes:
        row = [b for b in boxes if overlap(y0, y1, b[2], b[3])]
        columns: list[tuple[float, float]] = []  # twin axes (twinx) stack on one column: counted once
        for x0, x1, _, _ in row:
            if not any(overlap(x0, x1, c0, c1) for c0, c1 in columns):
                columns.append((x0, x1))
        best = max(best, len(columns))
    return best


def px_per_panel(rendered_px: float, panels: int) -> float:
    """Width on the page of one panel of an image rendered ``rendered_px`` wide with ``panels`` in a row."""
    return rendered_px / max(1, int(panels))


def png_text(path: str | Path) -> dict[str, str]:
    """The PNG's uncompressed text chunks (``tEXt``), as matplotlib's ``savefig(metadata=...)`` writes
    them."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return {}
    out, i = {}, 8
    while i + 8 <= len(data):
        (length,) = struct.unpack(">I", data[i : i + 4])
        kind = data[i + 4 : i + 8]
        body = data[i + 8 : i + 8 + length]
        if kind == b"tEXt" and b"\0" in body:
            k, v = body.split(b"\0", 1)
            out[k.decode("latin-1")] = v.decode("latin-1")
        if kind == b"IEND":
            break
        i += 12 + length
    return out


def png_panels_per_row(path: str | Path) -> int | None:
    """The panel count :meth:`Chapter.figure` wrote into the PNG, or None for an image without one."""
    v = png_text(path).get(PNG_KEY)
    return int(v) if v is not None and v.isdigit() else None
