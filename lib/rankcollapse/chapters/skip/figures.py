"""Chapter `skip`, figures: one function per figure of the page (each returns a matplotlib figure): the
constructions' deviation from 1, the SAN and SAN+skip curves, the frontier and the search effort.
"""

from __future__ import annotations

import torch

from ...book.panels import grid_rc
from ...core.trajectory import float_floor
from .experiments import EPS64


def fig_constructions(rows):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    fams = list(dict.fromkeys(r["family"] for r in rows))
    for k, fam in enumerate(fams):
        sel = [r for r in rows if r["family"] == fam]
        if fam == "residual-orthogonal values":
            for j, b in enumerate(sorted({r["beta_target"] for r in sel})):
                ss = [r for r in sel if r["beta_target"] == b]
                ss = [r for r in ss if r["checkable"]]
                ax.plot(
                    [r["L"] for r in ss],
                    [abs(r["ratio"] - 1) + 1e-17 for r in ss],
                    "o-",
                    color=f"C{k + j}",
                    label=f"{fam}, β={b:g}",
                )
                ax.plot(
                    [r["L"] for r in ss],
                    [100 * (EPS64 + r["roundoff"]) for r in ss],
                    ":",
                    color=f"C{k + j}",
                    lw=0.8,
                )
        else:
            sel = [r for r in sel if r["checkable"]]
            ax.plot(
                [r["L"] for r in sel],
                [abs(r["ratio"] - 1) + 1e-17 for r in sel],
                "s--",
                color=f"C{k + 6}",
                label=fam,
            )
    ax.axhline(EPS64, color="grey", ls="-", lw=0.8)
    ax.set_title("dotted: round-off scale 100·(eps + eps·‖X_L‖/‖res(X)‖); grey: eps", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("depth L")
    ax.set_ylabel("| ‖res(X_L)‖ / ‖res(X)‖ − 1 |")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def fig_skip_curves(rows, floor_mult):
    scales = sorted({r["scale"] for r in rows})
    fig, axes = grid_rc(2, len(scales), 3.6, 3.0)
    for row in axes:  # each kind of panel shares its y axis
        for ax in row[1:]:
            ax.sharey(row[0])
    floor = float_floor(torch.float64, floor_mult)
    for j, s in enumerate(scales):
        ax, ax2 = axes[0][j], axes[1][j]
        for r in (x for x in rows if x["scale"] == s):
            top = r["floor_at"] if r["floor_at"] is not None else len(r["r"])
            c = "C1" if r["skip"] else "C0"
            lab = ("SAN+skip" if r["skip"] else "SAN") if r["seed"] == 0 else None
            ax.plot(range(top), r["r"][:top], color=c, lw=1, marker=".", ms=3, label=lab)
            if r["floor_at"] is not None:
                ax.plot([top - 1], [r["r"][top - 1]], "x", color=c)
            ax2.plot(
                range(top),
                [v / r["res"][0] for v in r["res"][:top]],
                color=c,
                lw=1,
                marker=".",
                ms=3,
                label=lab,
            )
        ax.axhline(floor, color="grey", ls=":", lw=1)
        ax2.axhline(1, color="grey", ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_title(f"relative, weight scale {s:g}", fontsize=9)
        ax2.set_title(f"absolute, weight scale {s:g}", fontsize=9)
        ax2.set_yscale("log")
        ax2.set_xlabel("layer l")
    for ax in axes[0][:: min(2, len(scales))]:
        ax.set_ylabel("relative r(X_l)")
    axes[0][0].legend(fontsize=7)
    for ax in axes[1][:: min(2, len(scales))]:
        ax.set_ylabel("absolute ‖res(X_l)‖ / ‖res(X)‖")
    fig.tight_layout()
    return fig


def fig_frontier(rows):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    betas = sorted({r["beta"] for r in rows})
    depths = sorted({r["L"] for r in rows})
    for k, b in enumerate(betas):
        sel = [r for r in rows if r["beta"] == b]
        axes[0].plot([r["L"] for r in sel], [r["best"] for r in sel], "-", color=f"C{k}", label=f"β ≤ {b:g}")
        for r in sel:
            axes[0].plot([r["L"]], [r["best"]], "o" if r["converged"] else "x", color=f"C{k}")
        base = min(sel, key=lambda r: r["L"])
        axes[0].plot(
            [r["L"] for r in sel],
            [base["best"] ** (r["L"] / base["L"]) for r in sel],
            ":",
            color=f"C{k}",
            lw=1,
        )
    axes[0].set_xscale("log", base=2)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("depth L")
    axes[0].set_ylabel("smallest ‖res(X_L)‖/‖res(X)‖ found")
    axes[0].axhline(1, color="grey", lw=0.8)
    axes[0].legend(fontsize=7)
    axes[0].set_title("o converged, x not; dotted: shallowest compounded", fontsize=8)
    for k, L in enumerate(depths):
        sel = [r for r in rows if r["L"] == L]
        axes[1].plot(
            [r["beta"] for r in sel], [r["best"] for r in sel], "o-", color=f"C{k}", label=f"L = {L}"
        )
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].axhline(1, color="grey", lw=0.8)
    axes[1].set_xlabel("β constraint")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_effort(rows):
    """Best found by the random restarts against effort (steps x restarts), one line per cell."""

    betas = sorted({r["beta"] for r in rows})
    depths = sorted({r["L"] for r in rows})
    fig, axes = grid_rc(1, len(betas), 3.6, 3.0, sharey=True)
    for j, b in enumerate(betas):
        ax = axes[0][j]
        for k, L in enumerate(depths):
            r = next(x for x in rows if x["L"] == L and x["beta"] == b)
            e = [lv["effort"] for lv in r["levels"]]
            v = [lv["best"] for lv in r["levels"]]
            ax.plot(e, v, "-", color=f"C{k}", marker=".", label=f"L = {L}")
            ax.plot([e[-1]], [v[-1]], "o" if r["converged"] else "x", color=f"C{k}", ms=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("effort (steps × restarts)")
        ax.set_title(f"β ≤ {b:g}", fontsize=9)
    axes[0][0].set_ylabel("best ratio of the random restarts")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
