"""Chapter `layernorm`, figures: one function per figure of the page (``fig_*``), each returning a
matplotlib figure drawn from the experiments' plain data.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...book.panels import grid, grid_rc
from .experiments import attack_extremes


def fig_curves(rows: list[dict], tol: float):
    wss = sorted({r["weight_scale"] for r in rows})
    fig, axes = grid_rc(1, len(wss), 3.6, 3.0, sharey=True)
    styles = {
        "none": ("k", "-", "SAN"),
        "post": ("C0", "--", "SAN + post-LN"),
        "pre": ("C3", ":", "SAN + pre-LN"),
    }
    for ax, ws in zip(axes[0], wss):
        for r in rows:
            if r["weight_scale"] != ws:
                continue
            c, ls, lab = styles[r["layernorm"]]
            ax.plot(r["curve_log10"], color=c, ls=ls, marker="o", ms=2.5, label=lab)
        ax.axhline(math.log10(tol), color="grey", ls=":", lw=0.8)
        ax.set_title(f"weight scale {ws:g}", fontsize=9)
        ax.set_xlabel("layer l")
    axes[0][0].set_ylabel("mean log10 r(X_l)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_counterexample(ce: dict):
    """The affine-rank counterexample: tokens before and after LN, in the plane of the centred tokens."""
    import matplotlib.pyplot as plt

    X = torch.tensor(ce["X"], dtype=torch.float64)
    Y = torch.tensor(ce["LN"], dtype=torch.float64)
    d = X.shape[1]
    C = torch.eye(d, dtype=torch.float64) - 1.0 / d
    XC = X @ C
    # an orthonormal basis of the centred-feature plane (1-perp), first two directions
    U = torch.linalg.svd(C)[0][:, : d - 1]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, M, title in ((axes[0], XC, "tokens after centring (X C)"), (axes[1], Y, "tokens after LN")):
        Z = (M @ U)[:, :2].numpy()
        if Z.shape[1] < 2:
            Z = np.concatenate([Z, np.zeros_like(Z)], axis=1)
        ax.scatter(Z[:, 0], Z[:, 1], c=[f"C{i}" for i in range(len(Z))], s=40, zorder=3)
        for i, z in enumerate(Z):
            ax.annotate(f"x{i + 1}", z, textcoords="offset points", xytext=(4, 4), fontsize=8)
        if d - 1 == 2:
            t = np.linspace(0, 2 * np.pi, 200)
            rad = math.sqrt(d)
            axes[1].plot(rad * np.cos(t), rad * np.sin(t), color="grey", lw=0.6, ls=":")
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=9)
        ax.axhline(0, color="grey", lw=0.4)
        ax.axvline(0, color="grey", lw=0.4)
    if d > 2:
        axes[0].plot(*(XC @ U)[:, :2].numpy().T, color="grey", lw=0.8)
    fig.suptitle("collinear tokens (affine rank 1) are bent onto a circle (affine rank 2)", fontsize=9)
    fig.tight_layout()
    return fig


def fig_attack(at: dict, tol: float):
    """Left: ``r(X_l)`` through the two extreme settings of the adversary, with LN (after and before the
    normalisation) and the same weights without LN. Right: the construction's depth of collapse against its
    value scale ``c``, with and without LN, at the fixed budget."""

    L = at["horizon"]
    up, down = attack_extremes(at)
    fig, axes = grid(3, 4.0, 3.2)
    lg = lambda v: [math.log10(max(x, 1e-17)) for x in v]  # noqa: E731
    layers = list(range(1, L + 1))
    for ax, r, title in ((axes[0], up, "LN delays most"), (axes[1], down, "LN hastens most")):
        ax.plot(layers, lg(r["r_ln"]), "C0-", marker="o", ms=2.5, label="with post-LN (after LN)")
        ax.plot(layers, lg(r["r_ln_before"]), "C0:", label="with post-LN (before LN)")
        ax.plot(layers, lg(r["r_plain"]), "k--", marker="s", ms=2.5, label="same weights, no LN")
        ax.axhline(math.log10(tol), color="grey", ls=":", lw=0.8)
        ax.set_title(f"{title}: {r['label']}", fontsize=8)
        ax.set_xlabel("layer l")
    axes[0].set_ylabel("log10 r(X_l)")
    axes[0].legend(fontsize=7)
    cons = [r for r in at["settings"] if r["kind"] == "constructed"]
    c = [r["c"] for r in cons]
    axes[2].plot(c, [r["depth_ln"] for r in cons], "C0-o", label="with post-LN")
    axes[2].plot(c, [r["depth_plain"] for r in cons], "k--s", label="no LN")
    axes[2].axhline(L + 1, color="grey", ls=":", lw=0.8)
    axes[2].set_xscale("log", base=2)
    axes[2].set_xlabel("value scale c (W_QK = beta/c per block)")
    axes[2].set_ylabel(f"layers to collapse ({L + 1} = none)")
    axes[2].set_title(f"construction at beta_h = {at['beta']:g}", fontsize=8)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    return fig
