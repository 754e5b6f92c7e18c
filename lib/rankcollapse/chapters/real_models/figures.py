"""`real-models`, the figures: Figure 2 (r(X_l) per variant; random init | trained here | pretrained, with
the authors' approximate values) and the Q2 figure (4 gamma beta / sqrt(d_qk), beta per layer, the
scale-aware factor).
"""

from __future__ import annotations

import numpy as np

from ...book.panels import grid, grid_rc
from ...hf import surgery as sg
from .experiments import ARCH_NAMES
from .verdicts import _unlearned

VARIANT_COLOURS = {"SAN": "C3", "SAN+MLP": "C1", "SAN+skip": "C2", "transformer": "C0"}

# Approximate values read off the authors' committed figures (COMPANION.md): (arch, state, variant or
# None = all variants, layer, value, what the figure shows)
PAPER_APPROX = [
    ("bert", "init", None, 0, 0.60, "all start near 0.60"),
    ("bert", "init", "SAN", 2, 0.0, "≈0 by layer 1–2"),
    ("bert", "init", "SAN+MLP", 2, 0.0, "≈0 by layer 1–2"),
    ("bert", "init", "SAN+skip", 12, 0.45, "ends ≈0.45"),
    ("bert", "init", "transformer", 12, 0.35, "ends ≈0.35"),
    ("bert", "pretrained", None, 0, 0.69, "all start ≈0.69"),
    ("bert", "pretrained", "SAN+MLP", 4, 0.0, "≈0 by ~layer 4"),
    ("bert", "pretrained", "SAN", 5, 0.0, "≈0 by ~layer 5"),
    ("bert", "pretrained", "SAN+skip", 12, 0.07, "ends ≈0.07"),
    ("bert", "pretrained", "transformer", 12, 0.3, "ends ≈0.3"),
    ("xlnet", "init", None, 0, 1.0, "all start at 1.0"),
]


# -- figures ------------------------------------------------------------------------------------------------
def _keys(summ: dict, arch: str, state: str) -> list[str]:
    return [k for k, s in summ.items() if s["_arch"] == arch and s["_state"] == state]


COLUMNS = (("init", "random init"), ("trained", "trained here"), ("pretrained", "pretrained checkpoint"))


def fig_residuals(summ: dict, archs: list[str], log_scale: bool = False):
    """Figure 2: one row per architecture; panels random init | trained here | pretrained checkpoint (the
    last column only where some architecture has one; an architecture without one has no panel there). Init
    and pretrained: mean over sequences ± one std (log axis: the 10–90 % band); trained here: the mean over
    training seeds of each seed's mean curve, the band from the lowest to the highest seed, over every seed
    (the title says how many learned, as marked by :func:`mark_learned`). The
    authors' approximate values as black-edged markers (their pretrained values on both trained columns)."""

    cols = [c for c in COLUMNS if c[0] != "pretrained" or any(_keys(summ, a, "pretrained") for a in archs)]
    fig, axes = grid_rc(len(archs), len(cols), 4.4, 2.9, sharey=not log_scale)
    floor = 1e-9 if log_scale else -np.inf
    unlearned = _unlearned(summ)
    for i, arch in enumerate(archs):
        for j, (state, title) in enumerate(cols):
            ax = axes[i, j]
            keys = _keys(summ, arch, state)
            n_all = len(keys)
            if not keys:
                if state == "pretrained":  # no checkpoint for this architecture: no panel (see the caption)
                    ax.set_visible(False)
                    continue
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes, color="grey")
            xmax = 12
            for v in sg.VARIANTS:
                if not keys:
                    break
                if state == "trained":
                    curves = np.array([summ[k][v]["mean"] for k in keys])
                    m, lo, hi = curves.mean(axis=0), curves.min(axis=0), curves.max(axis=0)
                else:
                    m = np.array(summ[keys[0]][v]["mean"])
                    if log_scale:  # mean ± std is not positive: the 10-90 % range over sequences
                        lo, hi = np.array(summ[keys[0]][v]["q10"]), np.array(summ[keys[0]][v]["q90"])
                    else:
                        sd = np.array(summ[keys[0]][v]["std"])
                        lo, hi = m - sd, m + sd
                x = np.arange(len(m))
                xmax = max(xmax, len(m) - 1)
                ax.plot(x, np.maximum(m, floor), color=VARIANT_COLOURS[v], marker=".", label=v)
                ax.fill_between(
                    x, np.maximum(lo, floor), np.maximum(hi, floor), color=VARIANT_COLOURS[v], alpha=0.2
                )
            if keys:
                lab = {
                    "trained": f"{sum(k not in unlearned for k in keys)} of {n_all} seeds learned "
                    "(all shown)",
                    "pretrained": summ[keys[0]]["_label"],
                }.get(state)
                ax.set_title(f"{ARCH_NAMES[arch]} {title}" + (f": {lab}" if lab else ""), fontsize=9)
            else:
                ax.set_title(f"{ARCH_NAMES[arch]} {title}", fontsize=9)
            paper_state = "init" if state == "init" else "pretrained"
            for a, st, v, layer, val, _ in PAPER_APPROX:
                if a == arch and st == paper_state:
                    c = "k" if v is None else VARIANT_COLOURS[v]
                    y = max(val, 1e-9) if log_scale else val
                    ax.scatter(
                        [layer], [y], s=60, facecolor=c, edgecolor="k", marker="D", zorder=5, alpha=0.8
                    )
            ax.set_xlim(-0.3, xmax + 0.3)
            if log_scale:
                ax.set_yscale("log")
                ax.set_ylim(1e-9, 2)
            else:
                ax.set_ylim(-0.05, 1.1)
            ax.set_xlabel("layer")
            ax.set_ylabel("r(X) = ‖res‖₁,∞ / ‖X‖₁,∞")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    from matplotlib.lines import Line2D

    handles.append(Line2D([], [], marker="D", ls="", markerfacecolor="w", markeredgecolor="k"))
    labels.append("paper (approx., colour = variant)")
    fig.legend(handles, labels, loc="upper center", ncol=5, fontsize=8, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def fig_q2(qs: dict):
    """Q2: distribution of 4γβ/√d_qk per head (all layers and sequences), beta per layer, and the scale-aware
    factor."""

    fig, axes = grid(3, 4.2, 3.4)
    for i, (k, q) in enumerate(qs.items()):
        c = f"C{i}"
        lab = f"{q['label']} [{q['state']}]"
        v = np.log10(q["cond_head"].ravel())
        axes[0].hist(v, bins=40, histtype="step", color=c, label=lab, density=True)
        L = q["L"]
        axes[1].plot(np.arange(1, L + 1), np.log10(q["beta"]).mean(axis=1), color=c, marker=".", label=lab)
        axes[1].fill_between(
            np.arange(1, L + 1),
            np.log10(q["beta"]).min(axis=1),
            np.log10(q["beta"]).max(axis=1),
            color=c,
            alpha=0.15,
        )
        axes[2].plot(
            np.arange(1, L + 1),
            np.median(np.log10(q["stated"]), axis=1),
            color=c,
            marker=".",
            ls="-",
            label=f"{lab}: 4γβ/√d",
        )
        axes[2].plot(
            np.arange(1, L + 1),
            np.median(np.log10(q["scaled"]), axis=1),
            color=c,
            marker="x",
            ls="--",
            label=f"{lab}: ×‖res X‖²",
        )
    axes[0].axvline(0, color="k", ls=":")
    axes[2].axhline(0, color="k", ls=":")
    axes[0].set_xlabel("log10 4γ_h β_h / √d_qk  (per head, layer, sequence)")
    axes[0].set_ylabel("density")
    axes[1].set_xlabel("layer")
    axes[1].set_ylabel("log10 β_h (mean, min–max over heads)")
    axes[2].set_xlabel("layer")
    axes[2].set_ylabel("log10 (median over sequences)")
    axes[0].legend(fontsize=6)
    axes[2].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    return fig
