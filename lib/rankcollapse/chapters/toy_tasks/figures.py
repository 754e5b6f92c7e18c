"""Chapter `toy-tasks`, figures: one function per figure of the page (each returns a matplotlib figure):
the circle trajectories (Figure 3), the path effectiveness (Figure 4) and the training losses.
"""

from __future__ import annotations

import numpy as np

from ...book.panels import grid_rc
from .experiments import CLASSES, RADIUS, TASK_NAMES, TASKS, VARIANTS
from .report import ARCH_NAMES, VARIANT_NAMES


def fig_circle(rows, hidden, arch: str):
    """Trajectories of the first seed of each variant (rows) and hidden size (columns); each panel's title
    gives the classes over all seeds."""

    fig, axes = grid_rc(len(VARIANTS), len(hidden), 3.0, 3.0)
    th = np.linspace(0, 2 * np.pi, 200)
    for i, v in enumerate(VARIANTS):
        for j, h in enumerate(hidden):
            ax = axes[i, j]
            rs = [x for x in rows if x["h"] == h and x["variant"] == v and x["arch"] == arch]
            r = rs[0]
            ax.plot(RADIUS * np.cos(th), RADIUS * np.sin(th), color="0.8", lw=1)
            tr = r["traj"]
            for k, c in ((0, "C0"), (1, "C3")):
                ax.plot(
                    tr[:, k, 0],
                    tr[:, k, 1],
                    ".-",
                    ms=2,
                    lw=0.5,
                    color=c,
                    label="from (0.3, 0)" if k == 0 else "from (-0.3, 0)",
                )
                ax.plot(tr[0, k, 0], tr[0, k, 1], "k*", ms=7)
            ax.set_xlim(-0.56, 0.56)
            ax.set_ylim(-0.56, 0.56)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            tally = ", ".join(
                f"{sum(x['cls'] == k for x in rs)} {k}" for k in CLASSES if any(x["cls"] == k for x in rs)
            )
            ax.set_title(
                f"{VARIANT_NAMES[v]}, h={h}\nseed {r['seed']}: {r['cls']}\nall: {tally}", fontsize=7
            )
    axes[0, 0].legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    return fig


def fig_path_effectiveness(sums: list[dict]):
    """Rows: architectures; columns: tasks. Token accuracy against the maximal path length, mean over seeds
    (the exact curve's band: min to max over seeds)."""

    archs = list(dict.fromkeys(s["arch"] for s in sums))
    fig, axes = grid_rc(len(archs), len(TASKS), 3.8, 3.1)
    for i, arch in enumerate(archs):
        for j, task in enumerate(TASKS):
            ax = axes[i, j]
            s = next(x for x in sums if x["arch"] == arch and x["task"] == task)
            l = np.arange(s["L"] + 1)
            ax.fill_between(l, s["upto_min"], s["upto_max"], color="C0", alpha=0.2)
            ax.plot(l, s["upto_mean"], "o-", color="C0", label="exact, paths of length ≤ l")
            ax.plot(l, s["only_mean"], "s--", color="C2", ms=4, label="exact, length = l only")
            ax.errorbar(
                l,
                s["sampled_mean"],
                yerr=s["sampled_std"],
                fmt="^:",
                color="C3",
                ms=4,
                capsize=2,
                label="authors' method (sampled, length = l)",
            )
            ax.axhline(s["full_mean"], color="k", lw=1, label="full network (mean)")
            ax.axhline(s["baseline"], color="0.5", ls=":", lw=1, label="best input-blind predictor")
            ax.axhline(s["paper_full"], color="C1", ls="-.", lw=1, label="paper's full network")
            ax.set_ylim(0, 1.02)
            ax.set_title(f"{TASK_NAMES[task]} — {ARCH_NAMES[arch]}, {len(s['seeds'])} seeds", fontsize=8)
            if i == len(archs) - 1:
                ax.set_xlabel("maximal path length l")
        axes[i, 0].set_ylabel("token accuracy")
    axes[0, -1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    return fig


def fig_training(rows: list[dict]):
    """Training loss of every path-effectiveness SAN (smoothed), one colour per task, dashed for the
    LN-free architecture."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 1, figsize=(6.4, 3.4))
    seen = set()
    for r in rows:
        loss = np.array(r["losses"])
        w = max(1, len(loss) // 50)
        sm = np.convolve(loss, np.ones(w) / w, mode="valid")
        lab = f"{TASK_NAMES[r['task']]}, {ARCH_NAMES[r['arch']]}"
        ax.plot(
            np.arange(len(sm)) + w,
            sm,
            color=f"C{TASKS.index(r['task'])}",
            ls="-" if r["arch"] == "bert" else "--",
            lw=1,
            label=None if lab in seen else lab,
        )
        seen.add(lab)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross-entropy, smoothed)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
