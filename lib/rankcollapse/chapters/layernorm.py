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


def record_sides(ch, sides: list[dict]) -> None:
    """Record part (a)'s side checks: the worst errors of the matrix form and of each factor's side, and
    how well the per-token scaling can be written as a right factor with few and with many tokens; glue the
    sizes for the prose."""
    ch.value("factor_err", max(r["factor_err"] for r in sides), atol=1e-13, note="float64 round-off")
    ch.value(
        "centre_right_err", max(r["centre_is_right"] for r in sides), atol=1e-13, note="float64 round-off"
    )
    ch.value("scale_left_err", max(r["scale_is_left"] for r in sides), atol=1e-13, note="float64 round-off")
    few, many = sides[0], sides[1]
    ch.value(
        "scale_as_right_few",
        few["scale_as_right"],
        atol=1e-10,
        note="least squares; 0 up to round-off when n <= d",
    )
    ch.value(
        "scale_as_right_many", many["scale_as_right"], rtol=1e-6, note="least-squares residual, float64"
    )
    ch.value("scale_as_scalar_many", many["scale_as_scalar"], rtol=1e-6, note="float64")
    ch.glue("n_few", few["n"])
    ch.glue("n_many", many["n"])
    ch.glue("d_side", few["d"])


def record_rewrite(ch, rw: dict) -> None:
    """Record the paper's rewrite against the correct one: both errors, the range of the row sums of
    ``D^-1 P_h`` and the residual of the bias term."""
    ch.value("rewrite_err_correct", rw["err_correct"], atol=1e-13, note="float64 round-off")
    ch.value("rewrite_err_paper", rw["err_paper"], rtol=1e-6, note="float64")
    ch.value("rewrite_rowsum_min", rw["left_row_sum_min"], rtol=1e-9, note="float64")
    ch.value("rewrite_rowsum_max", rw["left_row_sum_max"], rtol=1e-9, note="float64")
    ch.value("rewrite_bias_residual", rw["bias_term_residual"], rtol=1e-6, note="float64")


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


def record_random_claims(ch, rc: list[dict], d: int) -> dict:
    """Record the shares of random inputs on which each claim holds, and the shares with the affine rank
    preserved for fewer and for more tokens than features; returns the row of Gaussian inputs with
    ``n = 2d`` (plain LN), which the LN2 verdict reads."""
    claims = list(lnm.CLAIMS)
    ch.value(
        "random_claims",
        {f"{r['family']} | {'affine' if r['affine'] else 'plain'}": [r[k] for k in claims] for r in rc},
        atol=0.2,
        glue=False,
        note="share of random inputs where each claim holds; ties in r/srank comparisons can flip on other "
        "machines",
    )
    aff_many = next(r for r in rc if r["family"].startswith("Gaussian, n=" + str(2 * d)) and not r["affine"])
    ch.value(
        "affine_equal_share_many",
        aff_many["affine_rank_equal"],
        atol=0.0,
        note="exact ranks of random matrices",
    )
    ch.value(
        "affine_equal_share_few",
        next(r for r in rc if not r["affine"])["affine_rank_equal"],
        atol=0.0,
        note="exact ranks of random matrices",
    )
    return aff_many


def table_random_claims(rc: list[dict]) -> str:
    """Markdown table: per input family and LN variant, the share of inputs on which each claim holds."""
    claims = list(lnm.CLAIMS)
    head = "| inputs | LN | " + " | ".join(f"`{k}`" for k in claims) + " |\n|---|---|" + "---|" * len(claims)
    rows = (
        f"| {r['family']} | {'random g, b' if r['affine'] else 'g=1, b=0'} | "
        + " | ".join(f"{r[k]:.2f}" for k in claims)
        + " |"
        for r in rc
    )
    return head + "\n" + "\n".join(rows)


def constructed_table(n: int, d: int, seed: int) -> list[dict]:
    rows = []
    for name, X in lnm.constructed_inputs(n, d, seed).items():
        out = lnm.check_claims(X)
        rows.append(
            {"input": name, "n": X.shape[0], "d": X.shape[1], "before": out["before"], "after": out["after"]}
        )
    return rows


def record_constructed(ch, ct: list[dict]) -> None:
    """Record the four rank measures before and after LN for every constructed input, and the numbers the
    prose quotes: r before and after LN for the near-collapse onto all-ones, and the affine rank after LN of
    collinear tokens off the origin."""
    for r in ct:
        key = "".join(c if c.isalnum() else "_" for c in r["input"]).strip("_")
        ch.value(
            f"built_{key}",
            {"before": r["before"], "after": r["after"]},
            rtol=1e-6,
            atol=1e-9,
            glue=False,
            note="ranks exact; r and srank float64",
        )
    near1 = next(r for r in ct if r["input"] == "near-collapsed along all-ones")
    ch.value("near1_r_before", near1["before"]["r"], rtol=1e-6, note="float64")
    ch.value("near1_r_after", near1["after"]["r"], rtol=1e-6, note="float64")
    line = next(r for r in ct if r["input"] == "collinear, off the origin")
    ch.value("line_affine_after", line["after"]["affine_rank"], note="exact rank")


def table_constructed(ct: list[dict]) -> str:
    """Markdown table: the rank measures of each constructed input before and after LN."""
    head = (
        "| input | n | d | rank | affine rank | r(X) | srank | → rank | affine rank | r | srank |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(
        f"| {r['input']} | {r['n']} | {r['d']} | {r['before']['rank']} | {r['before']['affine_rank']} | "
        f"{r['before']['r']:.2e} | {r['before']['srank']:.3f} | {r['after']['rank']} | "
        f"{r['after']['affine_rank']} | {r['after']['r']:.2e} | {r['after']['srank']:.3f} |"
        for r in ct
    )


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


def fmt_matrix(M) -> str:
    """A small matrix as ``[a b; c d]``."""
    return "[" + "; ".join(" ".join(f"{x:g}" for x in row) for row in M) + "]"


def record_counterexamples(ch, ce: dict, max_size: int) -> None:
    """Record the size of the smallest counterexample found per claim (None: none found); glue the
    search's largest size for the prose."""
    ch.glue("search_max", max_size)
    ch.value(
        "counterexample_sizes",
        {k: (None if v is None else [v["n"], v["d"]]) for k, v in ce.items()},
        glue=False,
        note="exact integer search; deterministic given the seed",
    )


def table_counterexamples(ce: dict) -> str:
    """Markdown table: per claim and LN bias, the smallest counterexample and its measures before and
    after LN."""
    fmt = fmt_matrix
    head = (
        "| claim | LN bias | smallest counterexample X | b | before (rank, affine rank, r, srank) "
        "| after |\n"
        "|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(
        f"| {lnm.CLAIMS[k.split('|')[0]][0]} | {k.split('|')[1]} | "
        + (
            "none found | | | |"
            if v is None
            else f"{v['n']}×{v['d']}: {fmt(v['X'])} | {'' if v['b'] is None else fmt([v['b']])} | "
            f"{v['before']['rank']}, {v['before']['affine_rank']}, {v['before']['r']:.3f}, "
            f"{v['before']['srank']:.3f} | "
            f"{v['after']['rank']}, {v['after']['affine_rank']}, {v['after']['r']:.3f}, "
            f"{v['after']['srank']:.3f} |"
        )
        for k, v in ce.items()
    )


def record_affine_examples(ch, ce: dict) -> dict | None:
    """Record the smallest affine-rank increase (without LN bias) and glue it and the smallest decrease as
    matrices for the prose; returns the example the figure draws (the increase, else the decrease)."""
    up = ce["affine_rank_no_increase|no bias"]
    down = ce["affine_rank_no_decrease|no bias"]
    ch.value(
        "affine_up_example",
        None
        if up is None
        else {"X": up["X"], "before": up["before"]["affine_rank"], "after": up["after"]["affine_rank"]},
        glue=False,
        note="exact integer example",
    )
    ch.glue("up_X", "none found" if up is None else fmt_matrix(up["X"]))
    ch.glue("up_n", 0 if up is None else up["n"])
    ch.glue("up_d", 0 if up is None else up["d"])
    ch.glue("down_X", "none found" if down is None else fmt_matrix(down["X"]))
    return up if up is not None else down


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


def record_collapse(ch, cc: list[dict], weight_scales) -> list[dict]:
    """Record, per weight scale and LN placement, rank preservation A and the median depth of collapse; the
    largest differences from the plain SAN; and the spread of the per-token scales post-LN divides by.
    Returns the differences per weight scale and placement, which the C4 verdict reads."""
    diffs = []
    for ws in weight_scales:
        tag = f"{ws:g}".replace(".", "p")
        g = {r["layernorm"]: r for r in cc if r["weight_scale"] == ws}
        for ln in ("none", "post", "pre"):
            ch.value(
                f"A_{ln}_ws{tag}",
                g[ln]["A"],
                atol=0.3,
                note="mean log10 r; collapsed layers clipped at 1e-13",
            )
            ch.value(f"depth_{ln}_ws{tag}", g[ln]["depth"], atol=1, note="median layer index")
        for ln in ("post", "pre"):
            diffs.append(
                {
                    "ws": ws,
                    "ln": ln,
                    "dA": g[ln]["A"] - g["none"]["A"],
                    "ddepth": g[ln]["depth"] - g["none"]["depth"],
                    "collapsed_ln": g[ln]["collapsed_share"],
                    "collapsed_san": g["none"]["collapsed_share"],
                }
            )
    ch.value("max_abs_dA", max(abs(d["dA"]) for d in diffs), atol=0.4, note="decades")
    ch.value("max_abs_ddepth", max(abs(d["ddepth"]) for d in diffs), atol=1, note="layers")
    ch.value(
        "sigma_spread_post",
        float(np.median([r["sigma_spread"] for r in cc if r["layernorm"] == "post"])),
        rtol=1e-6,
        note="std/mean of the per-token scales LN divides by in layer 1; float64",
    )
    return diffs


# -- verdicts -------------------------------------------------------------------------------------------
def judge_c4(ch, diffs: list[dict], rw: dict) -> str:
    """Verdict C4 (LN plays no role) from the SAN-against-SAN+LN differences; the rewrite errors go into the
    evidence."""
    ok = all(
        abs(d["ddepth"]) <= 3 and abs(d["dA"]) <= 2.0 and d["collapsed_ln"] >= d["collapsed_san"] - 0.5
        for d in diffs
    )
    stops = any(d["collapsed_ln"] < d["collapsed_san"] - 0.5 or d["ddepth"] > 5 for d in diffs)
    c4 = "refuted" if stops else ("supported" if ok else "inconclusive")
    return ch.verdict(
        "C4",
        c4,
        claim="layer normalisation plays no role in the rank collapse of SANs",
        rule="for every weight scale and LN placement: median layers to collapse within 3 of the plain "
        "SAN's, rank preservation within 2 decades and the collapsed share not lower by more than 0.5: "
        "supported; LN stops the collapse (collapsed share lower by > 0.5) or delays it by > 5 layers "
        "anywhere: refuted; else inconclusive. (The paper's algebraic rewrite is checked separately: "
        "rewrite_err_paper.)",
        evidence={
            "diffs": diffs,
            "rewrite_err_paper": rw["err_paper"],
            "rewrite_err_correct": rw["err_correct"],
        },
    )


def judge_ln2(ch, ce: dict, aff_many: dict) -> str:
    """Verdict LN2 (LN is precisely affine-rank-neutral): refuted by any counterexample of the search or
    any random input with more tokens than features whose affine rank changes."""
    found = [k for k in ("affine_rank_equal|no bias", "affine_rank_equal|bias") if ce[k] is not None]
    ln2 = "refuted" if found or aff_many["affine_rank_equal"] < 1.0 else "supported"
    keys = (
        "affine_rank_equal|no bias",
        "affine_rank_no_increase|no bias",
        "affine_rank_no_decrease|no bias",
    )
    return ch.verdict(
        "LN2",
        ln2,
        claim="LN is precisely affine-rank-neutral: it preserves the affine rank of the token set exactly",
        rule="refuted if any input (searched or random) has a different affine rank after LN; supported if "
        "none",
        evidence={
            "smallest_counterexamples": {
                k: (
                    None
                    if ce[k] is None
                    else {
                        "X": ce[k]["X"],
                        "b": ce[k]["b"],
                        "before": ce[k]["before"]["affine_rank"],
                        "after": ce[k]["after"]["affine_rank"],
                    }
                )
                for k in keys
            },
            "random_n_gt_d_preserved_share": aff_many["affine_rank_equal"],
        },
    )


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
