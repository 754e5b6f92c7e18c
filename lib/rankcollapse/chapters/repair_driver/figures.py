"""Chapter `repair-driver`, figures: one function per figure of the page (``fig_*``: the drivers against
their healthy networks, and the knife-edge), each returning a matplotlib figure drawn from the runs.
"""

from __future__ import annotations

import numpy as np

from ...book.panels import grid
from ...lm import model as lm
from ...repair import drivers
from ...repair.recovery import last_srank
from ...repair.spec import StudySpec
from .experiments import final_srank


def _plain_log(ax) -> None:
    """Log y-axis with plain tick labels (srank lives between 1 and a few)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ax.yaxis.set_major_locator(FixedLocator([1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32]))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def fig_drivers(p, study: StudySpec, runs: dict):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    for s in p.seeds:
        h = runs["main"][s]["hist"]
        ax[0].plot(h["m_step"], last_srank(h), lw=1, label=f"driver seed {s}")
        hh = runs["healthy"][s]["hist"]
        ax[0].plot(
            hh["m_step"],
            last_srank(hh),
            lw=1,
            ls="--",
            color="k",
            alpha=0.5,
            label="healthy (alpha = 1)" if s == p.seeds[0] else None,
        )
        det = runs["main"][s]["det"]
        if det.get("settled") is not None:
            ax[0].axvline(det["settled"], color="r", lw=0.6, ls=":")
        ax[1].plot(h["m_step"], h["probe_loss"], lw=1, label=f"driver seed {s}")
        ax[1].plot(hh["m_step"], hh["probe_loss"], lw=1, ls="--", color="k", alpha=0.5)
    ax[0].axhline(p.threshold, color="gray", ls=":", lw=1)
    ax[0].set_yscale("log")
    _plain_log(ax[0])
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("srank of the last block (probe)")
    ax2 = ax[0].twinx()
    t = np.arange(0, drivers.driver_steps(study) + 1, 10)
    ax2.plot(t, [drivers.run_spec(study, 0).alpha(int(x)) for x in t], color="C7", lw=0.8, alpha=0.6)
    ax2.set_ylabel("skip scale alpha (grey)")
    ax[0].legend(fontsize=7, loc="upper right")
    ax[1].axhline(lm.corpus().unigram_loss(), color="gray", ls=":", lw=1, label="unigram (frequency table)")
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("probe loss (nats)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_knife_edge(p, runs: dict):
    fig, ax = grid(3, 4.4, 3.4)
    for a in sorted(runs["alpha"]):
        h = runs["alpha"][a]["hist"]
        ax[0].plot(h["m_step"], last_srank(h), lw=1, label=f"alpha_min {a:g}")
    ax[0].axhline(p.threshold, color="gray", ls=":")
    ax[0].set_yscale("log")
    _plain_log(ax[0])
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("srank, last block")
    ax[0].legend(fontsize=7)
    al = sorted(runs["alpha"])
    ax[1].plot(al, [final_srank(runs["alpha"][a]) for a in al], "o-")
    ax[1].axhline(p.threshold, color="gray", ls=":")
    ax[1].set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ax[1].xaxis.set_major_locator(FixedLocator(al))
    ax[1].xaxis.set_major_formatter(ScalarFormatter())
    ax[1].xaxis.set_minor_formatter(NullFormatter())
    ax[1].set_xlabel("alpha_min")
    ax[1].set_ylabel("final srank (median of last 10)")
    dp = sorted(runs["depth"])
    ax[2].plot(dp, [final_srank(runs["depth"][d]) for d in dp], "s-")
    ax[2].axhline(p.threshold, color="gray", ls=":")
    ax[2].set_xlabel(f"depth (alpha_min = {p.alpha_min:g})")
    ax[2].set_ylabel("final srank")
    fig.tight_layout()
    return fig
