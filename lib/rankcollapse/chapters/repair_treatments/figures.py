"""Chapter `repair-treatments`, figures: one function per figure of the page (``fig_*``: the srank after
the switch per treatment, Table 2's rho beside the paper's, the synthetic force), each returning a
matplotlib figure drawn from the experiments' plain data.
"""

from __future__ import annotations

import math

import numpy as np

from ...book.panels import MAX_COLS
from ...lm import training as tr
from ...repair.recovery import last_srank
from ...repair.treatments import LOSS_TERMS
from .report import PAPER_TABLE2


def _plain_log(ax) -> None:
    """Log y-axis with plain tick labels (srank lives between 1 and a few)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ax.yaxis.set_major_locator(FixedLocator([1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32]))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def fig_after_switch(p, events, branches):
    """Figure 1: 50-step median srank of the last block after the switch, one panel per treatment; dotted
    the book's stricter recovery threshold of each event, dashed the paper's literal one."""
    import matplotlib.pyplot as plt

    T = list(p.treatments)
    cols = min(MAX_COLS, len(T))
    rows = math.ceil(len(T) / cols)
    fig, axs = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.7 * rows), sharey=True, squeeze=False)
    for ax, tname in zip(axs.flat, T):
        for i, e in enumerate(events):
            h = branches[e["seed"]][tname]["hist"]
            x = np.array(h["m_step"]) - e["start"]
            ax.plot(
                x,
                tr.rolling_median(last_srank(h), p.recover_window),
                lw=1,
                color=f"C{i}",
                label=f"seed {e['seed']}",
            )
            ax.axhline(e["rec_threshold"], color=f"C{i}", ls=":", lw=0.8)
            ax.axhline(e["rec_threshold_literal"], color=f"C{i}", ls="--", lw=0.5, alpha=0.6)
        ax.axhline(p.threshold, color="gray", lw=0.6)
        ax.set_title(tname, fontsize=9)
        ax.set_yscale("log")
        _plain_log(ax)
        ax.set_xlabel("steps after switch", fontsize=8)
    for ax in axs.flat[len(T) :]:
        ax.axis("off")
    axs[0, 0].set_ylabel("srank, last block (median)")
    axs[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_rho(p, summary):
    """Table 2 as a figure: rho per treatment (events as points, median as a bar) beside the paper's
    medians."""
    import matplotlib.pyplot as plt

    T = [t for t in LOSS_TERMS if t in summary]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for i, t in enumerate(T):
        r = [x["rho"] for x in summary[t]["rows"]]
        ax.scatter([i] * len(r), r, color="C0", s=14, zorder=3)
        ax.hlines(
            summary[t]["rho_median"], i - 0.3, i + 0.3, color="C0", label="this book" if i == 0 else None
        )
        ax.hlines(
            PAPER_TABLE2[t][0],
            i - 0.3,
            i + 0.3,
            color="C3",
            ls="--",
            label="paper median" if i == 0 else None,
        )
    ax.set_xticks(range(len(T)))
    ax.set_xticklabels(T, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("rho = |grad added| / |grad task|")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_synthetic(force: dict):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for kind in tr.TERMS:
        ax.loglog(force["delta"], force[kind], "o-", label=kind)
    ax.set_xlabel("delta (distance from rank one)")
    ax.set_ylabel("|d term / dX| (beta = 1)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_line(line: dict, summary: dict):
    """Figure 6 middle: rho of each 1x term (one panel each, at most two to a row) against t, from the saved
    collapse (t = 0) towards the healthy network of the same seed (t = 1), and the same distance along a
    random direction; lines the median over events, bands their range."""
    from ...book.panels import grid

    terms = line["terms"]
    fig, axs = grid(len(terms), panel_w=3.6, panel_h=2.9)
    t = line["t"]
    for ax, term in zip(axs, terms):
        for label, color, ls, name in (
            ("line", "C0", "-", "towards healthy"),
            ("random", "C3", "--", "random direction"),
        ):
            s = summary[label][term]
            ax.plot(t, s["median"], ls, color=color, marker="o", ms=3, lw=1.2, label=name)
            ax.fill_between(t, s["low"], s["high"], color=color, alpha=0.18, lw=0)
        ax.set_yscale("log")
        ax.set_title(term, fontsize=9)
        ax.set_xlabel("t (fraction of |θ_h − θ_c|)", fontsize=8)
        ax.tick_params(labelsize=8)
    for ax in axs[:: min(2, len(axs))]:
        ax.set_ylabel("ρ = |∇ added| / |∇ task|", fontsize=8)
    axs[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
