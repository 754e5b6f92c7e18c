"""Chapter `layernorm`: does layer normalisation help against rank collapse?

Experiments (plain data) and figures for ``chapters/layernorm.md``; the matrix form of LN,
the rank measures and the counterexample search live in :mod:`rankcollapse.core.layernorm`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..book.params import Param, Schema
from ..core import layernorm as lnm
from ..core.metrics import relative_residual
from ..core.san import SAN, SANConfig, random_tokens

SCHEMA = Schema(
    "layernorm",
    [
        Param(
            "n_tokens",
            "int",
            "tokens n of the random inputs and SANs",
            {"smoke": 8, "full": 16, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "d_model",
            "int",
            "width d of the random inputs and SANs",
            {"smoke": 16, "full": 32, "paper": 768},
            low=3,
            high=8192,
        ),
        Param(
            "random_trials",
            "int",
            "random inputs per family for the rank claims",
            {"smoke": 20, "full": 100, "paper": 500},
            low=1,
            high=100000,
        ),
        Param(
            "search_max_size",
            "int",
            "counterexample search: sizes with n + d up to this",
            {"smoke": 6, "full": 8, "paper": 10},
            low=4,
            high=20,
        ),
        Param(
            "search_trials",
            "int",
            "counterexample search: integer matrices drawn per size",
            {"smoke": 60, "full": 300, "paper": 2000},
            low=1,
            high=1000000,
        ),
        Param(
            "n_layers",
            "int",
            "depth L of the SANs for the collapse curves",
            {"smoke": 8, "full": 12, "paper": 12},
            low=1,
            high=96,
        ),
        Param(
            "n_heads", "int", "heads H of the SANs", {"smoke": 2, "full": 2, "paper": 12}, low=1, high=128
        ),
        Param(
            "weight_scales",
            "float_list",
            "attention weight scales for the collapse curves",
            {"smoke": [0.5, 1.0, 2.0, 4.0], "full": [0.5, 1.0, 2.0, 4.0], "paper": [0.5, 1.0, 2.0, 4.0]},
            low=1e-4,
            high=100.0,
        ),
        Param(
            "seeds",
            "int",
            "random SANs per configuration",
            {"smoke": 4, "full": 10, "paper": 20},
            low=1,
            high=1000,
        ),
        Param("collapse_tol", "float", "r(X_l) below this counts as collapsed", 1e-6, low=1e-15, high=0.5),
    ],
)

PLACEMENTS = ("none", "post", "pre")
FLOOR = 1e-13


# -- (a) the matrix form ---------------------------------------------------------------------------
def side_table(n: int, d: int, seed: int) -> list[dict]:
    """Side checks on random inputs with fewer and with more tokens than features (random gain and bias)."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    rows = []
    for nn in (n, 2 * d):
        X = torch.randn(nn, d, generator=g, dtype=torch.float64)
        gain = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
        bias = torch.randn(d, generator=g, dtype=torch.float64)
        rows.append({"n": nn, "d": d, **lnm.side_checks(X, gain, bias)})
    return rows


def rewrite_check(n: int, d: int, H: int, seed: int) -> dict:
    """The paper's rewrite of ``LN(SA(X))`` against the correct one, for one random SAN layer."""
    san = SAN.random(SANConfig(1, H, d), seed)
    X = random_tokens(n, d, seed + 1)
    P = san.attention(0, X)
    g = torch.Generator(device="cpu").manual_seed(int(seed) + 2)
    gain = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
    bias = torch.randn(d, generator=g, dtype=torch.float64)
    out = lnm.exact_rewrite(P, X, san.head_maps(0), san.b[0], gain, bias)
    rs = out.pop("left_row_sums")
    out["left_row_sum_min"], out["left_row_sum_max"] = float(rs.min()), float(rs.max())
    return out


# -- (b) rank claims ---------------------------------------------------------------------------------
def families(n: int, d: int):
    """Random input families: name -> (shape, generator of one input from a torch.Generator)."""

    def gauss(nn):
        return lambda g: torch.randn(nn, d, generator=g, dtype=torch.float64)

    def hetero(g):
        return torch.exp(1.5 * torch.randn(n, 1, generator=g, dtype=torch.float64)) * torch.randn(
            n, d, generator=g, dtype=torch.float64
        )

    def near(g):
        x = torch.randn(1, d, generator=g, dtype=torch.float64)
        return torch.ones(n, 1, dtype=torch.float64) @ x + 1e-3 * torch.randn(
            n, d, generator=g, dtype=torch.float64
        )

    return {
        f"Gaussian, n={n} < d={d}": gauss(n),
        f"Gaussian, n=d={d}": gauss(d),
        f"Gaussian, n={2 * d} > d={d}": gauss(2 * d),
        "tokens of different norms": hetero,
        "near-collapsed (1xᵀ + 1e-3 E)": near,
    }


def random_claims(n: int, d: int, trials: int, seed: int) -> list[dict]:
    """Per family and LN variant (gain 1, bias 0 / random gain and bias): the share of inputs where each
    claim holds."""
    rows = []
    for fi, (name, make) in enumerate(families(n, d).items()):
        for affine in (False, True):
            g = torch.Generator(device="cpu").manual_seed(int(seed) + 100 * fi + int(affine))
            holds = {k: 0 for k in lnm.CLAIMS}
            for _ in range(trials):
                X = make(g)
                gain = bias = None
                if affine:
                    gain = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
                    bias = torch.randn(d, generator=g, dtype=torch.float64)
                out = lnm.check_claims(X, gain, bias)
                for k, v in out["holds"].items():
                    holds[k] += v
            rows.append({"family": name, "affine": affine, **{k: v / trials for k, v in holds.items()}})
    return rows


def constructed_table(n: int, d: int, seed: int) -> list[dict]:
    rows = []
    for name, X in lnm.constructed_inputs(n, d, seed).items():
        out = lnm.check_claims(X)
        rows.append(
            {"input": name, "n": X.shape[0], "d": X.shape[1], "before": out["before"], "after": out["after"]}
        )
    return rows


def search_sizes(max_size: int) -> list[tuple[int, int]]:
    """All (n, d) with n, d >= 2 and n + d <= max_size, smallest total first."""
    return [(n, s - n) for s in range(4, max_size + 1) for n in range(2, s - 1)]


def counterexamples(max_size: int, trials: int, seed: int) -> dict:
    """Per claim, with and without LN bias: the smallest counterexample found (or None)."""
    sizes = search_sizes(max_size)
    out = {}
    for i, claim in enumerate(lnm.CLAIMS):
        for wb in (False, True):
            out[f"{claim}|{'bias' if wb else 'no bias'}"] = lnm.search_counterexample(
                claim, sizes, trials, seed + 10 * i + int(wb), with_bias=wb
            )
    return out


# -- (c) SAN against SAN+LN -----------------------------------------------------------------------------
def collapse_curves(p, device, log=print) -> list[dict]:
    rows = []
    for ws in p.weight_scales:
        for ln in PLACEMENTS:
            R, depth, spread = [], [], []
            for i in range(p.seeds):
                sd = p.seed + 1000 * i
                san = SAN.random(
                    SANConfig(p.n_layers, p.n_heads, p.d_model, weight_scale=ws, layernorm=ln),
                    sd,
                    device=device,
                )
                X = random_tokens(p.n_tokens, p.d_model, sd + 1, device=device)
                with torch.no_grad():
                    hs, _ = san.forward(X)
                r = [float(relative_residual(h)) for h in hs]
                R.append([math.log10(max(x, FLOOR)) for x in r])
                depth.append(next((l for l, x in enumerate(r) if x < p.collapse_tol), len(r)))
                if (
                    ln == "post"
                ):  # how unequal are the per-token scales LN divides by (layer 1's input to LN)
                    Y = san.mix(0, san.attention(0, X), X) + san.b[0]
                    sig = Y.std(dim=-1, unbiased=False)
                    spread.append(float(sig.std() / sig.mean()))
            R = np.array(R)
            rows.append(
                {
                    "weight_scale": ws,
                    "layernorm": ln,
                    "curve_log10": R.mean(0).tolist(),
                    "A": float(R.mean()),
                    "depth": float(np.median(depth)),
                    "collapsed_share": float(np.mean([c[-1] < math.log10(1e-3) for c in R])),
                    "sigma_spread": float(np.median(spread)) if spread else None,
                }
            )
        log(f"collapse curves at weight scale {ws}: done")
    return rows


# -- figures --------------------------------------------------------------------------------------------
def fig_curves(rows: list[dict], tol: float):
    import matplotlib.pyplot as plt

    wss = sorted({r["weight_scale"] for r in rows})
    fig, axes = plt.subplots(1, len(wss), figsize=(3.2 * len(wss), 3.3), squeeze=False, sharey=True)
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
