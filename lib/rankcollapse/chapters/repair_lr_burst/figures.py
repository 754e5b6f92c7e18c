"""Chapter `repair-lr-burst`, figures: one function per figure of the page (each returns a matplotlib
figure): the rolling-median srank after each burst beside its control (Figure 4 right) and the query-key
gradients at the skip collapses, after the bursts and at the healthy parents (Figure 4 left).
"""

from __future__ import annotations

import numpy as np

from ...book.panels import MAX_COLS
from ...lm import training as tr
from ...repair.recovery import last_srank
from .experiments import joined


def fig_burst_srank(p, runs: dict, summary: dict):
    """Figure 4 right: rolling-median last-block srank from the burst's start, one panel per multiplier;
    dashed: the paired control; dotted: recovery threshold; grey: collapse threshold; shaded: the burst."""
    import matplotlib.pyplot as plt

    M = list(p.multipliers)
    cols = min(MAX_COLS, len(M))
    rows_ = (len(M) + cols - 1) // cols
    fig, axs = plt.subplots(rows_, cols, figsize=(3.3 * cols, 2.8 * rows_), sharey=True, squeeze=False)
    for ax, m in zip(axs.flat, M):
        for i, s in enumerate(p.seeds):
            r = runs[s]
            h = joined(r["burst"][m]["hist"], r["after"][m]["hist"])
            ax.plot(
                np.array(h["m_step"]) - r["start"],
                tr.rolling_median(last_srank(h), p.recover_window),
                color=f"C{i}",
                lw=1,
                label=f"seed {s}",
            )
            c = r["control"]["hist"]
            ax.plot(
                np.array(c["m_step"]) - r["start"],
                tr.rolling_median(last_srank(c), p.recover_window),
                color=f"C{i}",
                lw=0.8,
                ls="--",
                alpha=0.7,
                label="control (dashed)" if i == 0 else None,
            )
            ax.axhline(summary[m]["rows"][i]["rec_threshold"], color=f"C{i}", ls=":", lw=0.8)
        ax.axvspan(0, p.burst_steps, color="orange", alpha=0.15, lw=0)
        ax.axhline(p.threshold, color="gray", lw=0.6)
        ax.set_title(f"learning rate x{m:g}", fontsize=9)
        ax.set_xlabel("steps after burst start", fontsize=8)
    for ax in axs.flat[len(M) :]:
        ax.axis("off")
    axs[0, 0].set_ylabel("srank, last block (median)")
    axs[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_burst_qk(p, qk: dict, summary: dict):
    """Figure 4 left: median Q/K gradient (over blocks) at the skip collapses, right after each burst
    (filled: collapsed and recovered; open: collapsed, not recovered; grey x: did not collapse), and at the
    healthy parents."""
    import matplotlib.pyplot as plt

    M = list(p.multipliers)
    labels = ["skip-collapsed"] + [f"burst x{m:g}" for m in M] + ["healthy"]
    fig, ax = plt.subplots(figsize=(1.3 * len(labels) + 1.5, 3.5))
    sk = list(qk["skip"].values())
    ax.scatter([0] * len(sk), sk, color="k", s=22, zorder=3)
    used = set()
    for j, m in enumerate(M, start=1):
        for i, s in enumerate(p.seeds):
            row = summary[m]["rows"][i]
            v = qk["burst"][s][m]
            if not row["collapsed"]:
                kw, lab = {"marker": "x", "color": "gray"}, "did not collapse"
            elif row["recovered_after"] is not None:
                kw, lab = {"marker": "o", "color": "C0"}, "collapsed, recovered"
            else:
                kw, lab = (
                    {"marker": "o", "facecolors": "none", "edgecolors": "C0"},
                    "collapsed, not recovered",
                )
            ax.scatter(
                [j + 0.08 * (i - (len(p.seeds) - 1) / 2)],
                [v],
                s=26,
                zorder=3,
                label=None if lab in used else lab,
                **kw,
            )
            used.add(lab)
    hv = list(qk["healthy"].values())
    ax.scatter([len(M) + 1] * len(hv), hv, color="C2", marker="s", s=22, zorder=3)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel("Q/K task gradient (median over blocks)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
