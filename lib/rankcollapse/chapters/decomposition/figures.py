"""Chapter `decomposition`'s figures, one function per figure (each returns a matplotlib figure): the
reconstruction error, the path-length distributions, the residual's shares by path length and C5's regime.
"""

from __future__ import annotations

import numpy as np
import torch

from ...core.paths import path_length_distribution
from .experiments import DTYPES
from .verdicts import EXPLODE, c5_evidence, c5_regime


def fig_reconstruction(rows):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for dname, colour in (("float32", "C0"), ("float64", "C1")):
        for skip, marker in ((False, "o"), (True, "s")):
            r = [x for x in rows if x["dtype"] == dname and x["skip"] == skip]
            ax.scatter(
                [x["paths"] for x in r],
                [max(x["err_paths"], 1e-18) for x in r],
                c=colour,
                marker=marker,
                label=f"{dname}, {'with' if skip else 'no'} skip",
                alpha=0.8,
            )
        ax.axhline(torch.finfo(DTYPES[dname]).eps, color=colour, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of paths summed")
    ax.set_ylabel("relative error vs forward pass")
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("explicit path sum against the forward pass (dotted: machine epsilon)", fontsize=9)
    return fig


def fig_path_lengths(archs):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for i, a in enumerate(archs):
        L = a["L"]
        x = np.arange(L + 1) / L
        ax.plot(
            x,
            np.array(a["dist"]) * L,
            marker="." if L <= 24 else None,
            lw=1.2,
            label=f"{a['name']} (H={a['H']}, L={L})",
            color=f"C{i % 10}",
        )
    ax.set_yscale("log")
    ax.set_ylim(1e-12, 3e2)
    ax.set_xlabel("path length / depth  (l / L)")
    ax.set_ylabel("share of paths × L (density)")
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def fig_length_shares(rows, L, H):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    k = np.arange(L + 1)
    count = np.array(path_length_distribution(L, H))
    for i, r in enumerate(rows):
        axes[0].plot(k, r["res_share"], marker="o", ms=3, color=f"C{i}", label=f"scale {r['scale']:g}")
        axes[1].plot(k, r["trunc_err"], marker="o", ms=3, color=f"C{i}", label=f"scale {r['scale']:g}")
    axes[0].plot(k, count, "k--", lw=1, label="share of path count")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("path length k")
    axes[0].set_ylabel("‖res(S⁽ᵏ⁾)‖ / ‖res(Y)‖")
    axes[1].axhline(0.1, color="grey", ls=":", lw=1)
    axes[1].set_yscale("log")
    axes[1].set_xlabel("keep paths of length ≤ k")
    axes[1].set_ylabel("relative residual error of truncation")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"where the residual lives: SAN with skips, L={L}, H={H}, random init", fontsize=9)
    fig.tight_layout()
    return fig


def fig_regime(shares: list[dict], L: int):
    """k90 and the output's growth against weight scale, the meaningful regime shaded."""
    import matplotlib.pyplot as plt

    ev = c5_evidence(shares, L)["scales"]
    reg = c5_regime(ev)
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    x = [r["scale"] for r in ev]
    ax.plot(x, [r["k90"] for r in ev], "o-", color="C0", label="k90 (left)")
    ax.axhline(L // 2, color="C0", ls=":", lw=1, label="L/2")
    ax.set_xscale("log")
    ax.set_xlabel("weight scale s")
    ax.set_ylabel("k90: shortest lengths reproducing res(Y) to 10%")
    ax.set_ylim(-0.5, L + 0.5)
    ax2 = ax.twinx()
    ax2.plot(x, [r["growth"] for r in ev], "s--", color="C3", label="‖Y‖/‖X‖ (right)")
    ax2.axhline(EXPLODE, color="C3", ls=":", lw=1)
    ax2.set_yscale("log")
    ax2.set_ylabel("output growth ‖Y‖_F/‖X‖_F")
    if reg:
        ax.axvspan(reg[0]["scale"] / 1.08, reg[-1]["scale"] * 1.08, color="grey", alpha=0.15)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    ax.set_title(
        "shaded: the regime where C5 is decided (scales whose growth passes the dotted line exploded: "
        "counted as not holding)",
        fontsize=8,
    )
    fig.tight_layout()
    return fig
