"""Chapter `collapse`'s figures, one function per figure (each returns a matplotlib figure): the curves
r(X_l), the per-layer exponent, the a-priori bound, the phase diagram and the float floors.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...book.panels import grid, grid_rc
from ...core.trajectory import float_floor
from .experiments import DTYPES


def linear_reference(r: list[float], floor_at: int) -> list[float]:
    """The geometric (linear-rate) curve r_0 q^l with q the first layer's ratio r_1/r_0."""
    if floor_at < 2:
        return [r[0]]
    q = r[1] / r[0]
    return [r[0] * q**l for l in range(len(r))]


def fig_curves(rows, floor_mult):
    scales = sorted({r["scale"] for r in rows})
    fig, axes = grid_rc(1, len(scales), 3.6, 3.0, sharey=True)
    configs = sorted({(r["d"], r["H"]) for r in rows})
    floor = float_floor(torch.float64, floor_mult)
    for ax, s in zip(axes[0], scales):
        for k, (d, H) in enumerate(configs):
            for r in (x for x in rows if x["scale"] == s and x["d"] == d and x["H"] == H):
                tr = r["float64"]
                top = tr["floor_at"] if tr["floor_at"] is not None else len(tr["r"])
                ax.plot(
                    range(top),
                    tr["r"][:top],
                    color=f"C{k}",
                    lw=1,
                    marker=".",
                    ms=3,
                    label=f"d={d}, H={H}" if r["seed"] == 0 else None,
                )
                if tr["floor_at"] is not None:
                    ax.plot([top - 1], [tr["r"][top - 1]], "x", color=f"C{k}", ms=6)
                if r["seed"] == 0 and k == 0:
                    ref = linear_reference(
                        tr["r"], tr["floor_at"] if tr["floor_at"] is not None else len(tr["r"])
                    )
                    ax.plot(
                        range(len(ref)), ref, "k--", lw=1, label="geometric (linear) rate, first-layer ratio"
                    )
        ax.axhline(floor, color="grey", ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_ylim(floor / 10, 2)
        ax.set_title(f"weight scale {s:g}", fontsize=9)
        ax.set_xlabel("layer l")
    axes[0][0].set_ylabel("r(X_l)  (float64)")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_exponent(rows):
    import matplotlib.pyplot as plt

    scales = sorted({r["scale"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    ax = axes[0]
    for k, s in enumerate(scales):
        xd, yd, xg, yg = [], [], [], []
        for r in (x for x in rows if x["scale"] == s):
            res, fa = r["float64"]["res"], r["float64"]["floor_at"]
            top = fa if fa is not None else len(res)
            a, b = r["fit_dec"]["segment"]
            for l in range(1, top):
                inside = a < l <= b and b - a >= 2
                (xd if inside else xg).append(math.log10(res[l - 1]))
                (yd if inside else yg).append(math.log10(res[l]))
        ax.scatter(xd, yd, s=10, color=f"C{k}", label=f"scale {s:g}", alpha=0.8)
        ax.scatter(xg, yg, s=10, facecolors="none", edgecolors=f"C{k}", alpha=0.6)
    lo, hi = ax.get_xlim()
    ax.plot([lo, hi], [lo, hi], "k:", lw=1, label="slope 1 (any geometric sequence)")
    ax.set_xlabel("log10 ‖res(X_{l-1})‖₁,∞")
    ax.set_ylabel("log10 ‖res(X_l)‖₁,∞")
    ax.legend(fontsize=6)
    ax = axes[1]
    for k, s in enumerate(scales):
        e = [r["fit_dec"]["slope"] for r in rows if r["scale"] == s and r["fit_dec"]["slope"] is not None]
        ax.scatter([s] * len(e), e, color=f"C{k}", s=14)
        g = [
            r["fit"]["slope"]
            for r in rows
            if r["scale"] == s and r["fit_dec"]["slope"] is None and r["fit"]["slope"] is not None
        ]
        ax.scatter([s] * len(g), g, facecolors="none", edgecolors=f"C{k}", s=14, marker="s")
    ax.axhline(3, color="k", ls="--", lw=1, label="theory: 3")
    ax.axhline(1, color="grey", ls=":", lw=1, label="slope 1: geometric, growing or decaying")
    ax.set_xscale("log")
    ax.set_xlabel("weight scale")
    ax.set_ylabel("slope of log res_l on log res_{l-1}")
    ax.minorticks_off()
    ax.set_xticks(scales)
    ax.set_xticklabels([f"{s:g}" for s in scales])
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_bound(b, rows):
    fig, axes = grid(3, 4.4, 3.5)
    ls = [row["layer"] for row in b["layers"]]
    ax = axes[0]
    ax.semilogy(ls, [row["gamma"] for row in b["layers"]], "o-", label="γ a priori (attention, input)")
    ax.axhline(b["gamma_star"], color="C0", ls="--", lw=1, label="γ* (calibration inputs)")
    ax.semilogy(
        ls,
        [row["gamma_min"] for row in b["layers"]],
        "x:",
        color="grey",
        label="fitted γ_min (circular, old)",
    )
    ax.semilogy(ls, [row["beta"] for row in b["layers"]], "s-", color="C1", label="β from the weights")
    ax.set_xlabel("layer")
    ax.legend(fontsize=6)
    ax.set_xticks(ls)
    ax.set_title(f"d={b['d']}, H={b['H']}, d_qk={b['dqk']}, scale {b['scale']:g}", fontsize=9)
    ax = axes[1]
    L = range(len(b["res"]))
    ax.plot(L, np.log10(b["res"]), "ko-", label="actual ‖res(X_l)‖₁,∞")
    ax.plot(
        list(L)[1:], b["log10_onestep"], "bs:", label="one-layer bound, a priori, from actual res(X_{l-1})"
    )
    ax.plot(L, b["log10_bound"], "r^--", label="depth bound with γ*, β_max")
    ax.set_xlabel("layer l")
    ax.set_ylabel("log10")
    ax.legend(fontsize=6)
    lo = min(min(np.log10(b["res"])), min(b["log10_onestep"] or [0]))
    ax.set_ylim(lo - 3, max(max(np.log10(b["res"])) + 5, 5))
    ax = axes[2]
    scales = sorted({r["scale"] for r in rows})
    for k, s in enumerate(scales):
        xs, ys = [], []
        for r in (x for x in rows if x["scale"] == s):
            for res_in, g in r["gamma_points"]:
                if g > 0:
                    xs.append(math.log10(res_in))
                    ys.append(math.log10(g / r["gamma_star"]))
        ax.scatter(xs, ys, s=9, color=f"C{k}", label=f"scale {s:g}", alpha=0.7)
    ax.axhline(0, color="k", ls="--", lw=1, label="γ = γ* (above: the fit fails)")
    ax.set_xlabel("log10 ‖res(X_{l-1})‖₁,∞")
    ax.set_ylabel("log10 γ_l / γ*")
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_floor(rows, floor_mult):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    s = sorted({r["scale"] for r in rows})
    pick = [r for r in rows if r["seed"] == 0 and r["scale"] == min(s, key=lambda x: abs(x - 1.0))]
    for k, r in enumerate(pick):
        ax.semilogy(r["float64"]["r"], "-o", ms=3, color=f"C{k}", label=f"d={r['d']}, H={r['H']} float64")
        ax.semilogy(
            r["float32"]["r"], "--s", ms=3, color=f"C{k}", alpha=0.6, label=f"d={r['d']}, H={r['H']} float32"
        )
    for dname, dt in DTYPES.items():
        ax.axhline(float_floor(dt, floor_mult), color="grey", ls=":" if dname == "float64" else "-.", lw=1)
        ax.axhline(float(torch.finfo(dt).eps), color="r", ls=":" if dname == "float64" else "-.", lw=0.8)
    ax.set_xlabel("layer l")
    ax.set_ylabel("r(X_l)")
    ax.set_title(f"float floors: grey = {floor_mult:g}·eps (curves stop there), red = eps", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return fig


def fig_phase(ph, L, d, H):
    import matplotlib.pyplot as plt

    cells = ph["cells"]
    scales = sorted({c["scale"] for c in cells})
    dqks = sorted({c["dqk"] for c in cells})
    Z = np.array(
        [
            [math.log10(next(c for c in cells if c["scale"] == s and c["dqk"] == q)["r_L"]) for s in scales]
            for q in dqks
        ]
    )
    fig, ax = plt.subplots(figsize=(7, 3.8))
    im = ax.imshow(Z, origin="lower", aspect="auto", cmap="viridis")
    fig.colorbar(im, ax=ax, label=f"log10 r(X_L), L={L}")
    for c in cells:
        i, j = dqks.index(c["dqk"]), scales.index(c["scale"])
        ax.text(
            j,
            i,
            ("C" if c["collapsed"] else "·") + ("*" if c["certified"] else ""),
            ha="center",
            va="center",
            color="w" if Z[i, j] < Z.max() - 0.3 * (Z.max() - Z.min() + 1e-9) else "k",
            fontsize=8,
        )
    ax.set_xticks(range(len(scales)))
    ax.set_xticklabels([f"{s:g}" for s in scales])
    ax.set_yticks(range(len(dqks)))
    ax.set_yticklabels([str(q) for q in dqks])
    ax.set_xlabel("weight scale")
    ax.set_ylabel("d_qk")
    for q, v in ph["per_dqk"].items():
        if v["scale_certified"] is not None:
            x = float(np.interp(math.log10(v["scale_certified"]), np.log10(scales), range(len(scales))))
            ax.plot([x], [dqks.index(int(q)) - 0.32], "r^", ms=6)
    ax.set_title(
        f"d={d}, H={H}: C = collapsed, * = certified by Thm 2.2 (γ* from calibration inputs); "
        "red: largest certified scale",
        fontsize=8,
    )
    return fig
