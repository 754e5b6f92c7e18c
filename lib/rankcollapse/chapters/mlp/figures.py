"""Chapter `mlp`, figures: one function per figure of the page (``fig_*``), each returning a matplotlib
figure drawn from the experiments' plain data.
"""

from __future__ import annotations

import math

import numpy as np

from ...book.panels import grid, grid_rc


def fig_curves(summary: list[dict], tol: float):
    import matplotlib.pyplot as plt

    wss = sorted({r["weight_scale"] for r in summary})
    fig, axes = grid_rc(1, len(wss), 4.4, 3.4)
    cmap = plt.get_cmap("viridis")
    for ax, ws in zip(axes[0], wss):
        g = sorted((r for r in summary if r["weight_scale"] == ws), key=lambda r: r["mlp_scale"])
        mlps = [r for r in g if r["mlp_scale"] > 0]
        for i, r in enumerate(mlps):
            ax.plot(
                r["curve_log10"],
                color=cmap(i / max(1, len(mlps) - 1)),
                marker="o",
                ms=2.5,
                lw=1.2,
                label=f"×{r['mlp_scale']:g} (λ≈{r['lambda']:.3g})",
            )
        base = next(r for r in g if r["mlp_scale"] == 0)
        ax.plot(base["curve_log10"], "k--", lw=1.5, label="SAN, no MLP")
        ax.axhline(math.log10(tol), color="grey", ls=":", lw=1)
        ax.set_xlabel("layer l")
        ax.set_ylabel("mean log10 r(X_l)")
        ax.set_title(f"attention weight scale {ws:g}", fontsize=9)
    axes[0][-1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def fig_rate(summary: list[dict]):
    wss = sorted({r["weight_scale"] for r in summary})
    fig, axes = grid(3, 4.2, 3.4)
    for j, ws in enumerate(wss):
        g = sorted(
            (r for r in summary if r["weight_scale"] == ws and r["mlp_scale"] > 0), key=lambda r: r["lambda"]
        )
        base = next(r for r in summary if r["weight_scale"] == ws and r["mlp_scale"] == 0)
        lam = [r["lambda"] for r in g]
        axes[0].plot(lam, [r["A"] for r in g], marker="o", color=f"C{j}", label=f"weight scale {ws:g}")
        axes[0].axhline(base["A"], color=f"C{j}", ls="--", lw=1)
        axes[1].plot(lam, [r["depth"] for r in g], marker="o", color=f"C{j}", label=f"weight scale {ws:g}")
        axes[1].axhline(base["depth"], color=f"C{j}", ls="--", lw=1)
        axes[2].plot(
            lam,
            [10 ** r["cert1"] if r["cert1"] is not None else np.nan for r in g],
            marker="o",
            color=f"C{j}",
            label=f"weight scale {ws:g}",
        )
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("MLP Lipschitz constant λ (product of spectral norms)")
    axes[0].set_ylabel("rank preservation: mean log10 r(X_l)")
    axes[1].set_ylabel("layers to collapse (median)")
    axes[2].set_yscale("log")
    axes[2].axhline(1.0, color="grey", ls=":", lw=1)
    axes[2].set_ylabel("√f · ‖res X_0‖ (f: layer 1's factor; median)")
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=6.5)
    fig.suptitle(
        "dashed: the same SANs without MLP; right: collapse is certified below the dotted line", fontsize=9
    )
    fig.tight_layout()
    return fig


def fig_q3(qsum: dict):
    """Q3: per family, the rank kept ``G`` (left) and the residual sensitivity (right) against lambda, with
    the identity-attention controls (dashed) and the whole-output sensitivity (dotted)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for j, (fam, pts) in enumerate(qsum.items()):
        lam = [q["lambda"] for q in pts]
        c = f"C{j}"
        axes[0].plot(lam, [q["G"] for q in pts], "o-", color=c, label=f"{fam}")
        axes[0].plot(lam, [q["G_ctl"] for q in pts], "--", color=c, lw=1, label=f"{fam}, control")
        axes[1].plot(lam, [q["S"] for q in pts], "o-", color=c, label=f"{fam}: residual")
        axes[1].plot(lam, [q["S_ctl"] for q in pts], "--", color=c, lw=1, label=f"{fam}, control: residual")
        axes[1].plot(lam, [q["S_out"] for q in pts], ":", color=c, lw=1, label=f"{fam}: whole output")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("λ (product of spectral norms, mean over layers)")
    axes[0].set_ylabel("rank kept: log10 r(X_L)/r(X_0)")
    axes[1].set_ylabel("log10 relative sensitivity (RMS over directions)")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
