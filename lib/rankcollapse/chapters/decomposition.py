"""Chapter `decomposition`: Theorem 2.1, the sum over paths, checked and used exactly.

Experiments (each returns plain data) and figures (each returns a matplotlib
figure) for ``chapters/decomposition.md``.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..book import checks
from ..book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from ..core.metrics import res
from ..core.paths import length_components, path_length_distribution, path_sum_naive
from ..core.san import SAN, SANConfig, random_tokens

SCHEMA = Schema(
    "decomposition",
    [
        Param(
            "recon_layers",
            "int_list",
            "depths L for the explicit path-sum reconstruction",
            {"smoke": [1, 2, 3, 4], "full": [1, 2, 3, 4, 6], "paper": [1, 2, 3, 4, 6]},
            low=1,
            high=12,
        ),
        Param(
            "recon_heads",
            "int_list",
            "head counts H for the explicit path-sum reconstruction",
            {"smoke": [1, 2, 3], "full": [1, 2, 4], "paper": [1, 2, 4, 8]},
            low=1,
            high=16,
        ),
        Param(
            "n_tokens",
            "int",
            "tokens n of the small networks",
            {"smoke": 8, "full": 16, "paper": 32},
            low=2,
            high=4096,
        ),
        Param(
            "d_model",
            "int",
            "width d of the small networks",
            {"smoke": 16, "full": 32, "paper": 64},
            low=2,
            high=8192,
        ),
        Param(
            "max_paths",
            "int",
            "largest number of paths enumerated one by one (skip configurations above it)",
            {"smoke": 1024, "full": 20000, "paper": 100000},
            low=1,
        ),
        Param(
            "weight_scale",
            "float",
            "weight scale s (entries N(0, s^2/fan_in)) of the reconstruction networks",
            1.0,
            low=1e-6,
            high=100.0,
        ),
        Param(
            "big_layers",
            "int",
            "depth of the large network for the exact recursion",
            {"smoke": 6, "full": 12, "paper": 12},
            low=1,
            high=96,
        ),
        Param(
            "big_heads",
            "int",
            "heads of the large network",
            {"smoke": 4, "full": 12, "paper": 12},
            low=1,
            high=128,
        ),
        Param(
            "big_tokens",
            "int",
            "tokens of the large network",
            {"smoke": 32, "full": 128, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "big_d",
            "int",
            "width of the large network",
            {"smoke": 64, "full": 768, "paper": 768},
            low=2,
            high=8192,
        ),
        Param(
            "share_scales",
            "float_list",
            "weight scales at which the share of each path length is measured (a wide grid: C5 is decided "
            "on the part of it where the question is meaningful)",
            {
                "smoke": [0.25, 0.5, 0.7, 0.85, 1.0, 1.2, 1.4, 2.0, 4.0],
                "full": [0.25, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 2.0, 2.8, 4.0],
                "paper": [0.125, 0.25, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 2.0, 2.8, 4.0],
            },
            low=1e-6,
            high=100.0,
        ),
        Param(
            "share_seeds",
            "int",
            "random networks per scale for the shares",
            {"smoke": 2, "full": 2, "paper": 10},
            low=1,
            high=1000,
        ),
    ],
)

# estimated cost of the paper profile relative to full (more seeds, larger enumerations); used by
# `rcbook run --profile paper` to tell a CPU user how long it would take
PAPER_VS_FULL = 3.0

# (name, heads H, layers L) as listed in the spec
ARCHITECTURES = [
    ("DeiT-T", 3, 12),
    ("MobileBERT", 4, 12),
    ("DistilBERT", 12, 6),
    ("BERT-Base / ViT-B", 12, 12),
    ("BERT-Large / ViT-L", 16, 24),
    ("ViT-H", 16, 32),
    ("T5-3B", 32, 24),
    ("T5-11B", 128, 24),
    ("GPT-3", 96, 96),
]
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts)."""
    small = [H for H in p.recon_heads if p.d_model // H < 1]
    if small:
        raise ParameterError(
            f"parameters 'd_model' = {p.d_model} and 'recon_heads' = {p.recon_heads}: every head count "
            f"must be at most d_model (each head's d_qk = d_v = d_model // H must be >= 1; "
            f"{p.d_model} // {small[0]} = 0)"
        )
    require_divisible(p, "big_d", "big_heads", "d_qk = d_v = big_d / big_heads")
    fewest = min(p.recon_heads) ** min(p.recon_layers)
    if fewest > p.max_paths:
        raise ParameterError(
            f"parameters 'recon_heads' = {p.recon_heads}, 'recon_layers' = {p.recon_layers} and "
            f"'max_paths' = {p.max_paths}: no configuration would be enumerated (the smallest has H^L = "
            f"{fewest} paths > max_paths)"
        )
    require_distinct(p, "share_scales", "scale", "each scale's values are recorded under its name")


def rel_fro(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(a - b) / torch.linalg.matrix_norm(b))


# -- (a) reconstruction -----------------------------------------------------------------
def reconstruction(layers, heads, n, d, scale, max_paths, seed, device, log=print) -> list[dict]:
    """Explicit path sum (each path from scratch) and the recursion against the forward pass.

    One row per (L, H, skip, dtype) whose path count is at most ``max_paths``.
    """
    rows = []
    for L in layers:
        for H in heads:
            for skip in (False, True):
                count = (H + 1) ** L if skip else H**L
                if count > max_paths:
                    continue
                # each head d // H wide (H need not divide d; validate() keeps it >= 1)
                cfg = SANConfig(L, H, d, d_qk=d // H, d_v=d // H, skip=skip, weight_scale=scale)
                for dname, dt in DTYPES.items():
                    san = SAN.random(cfg, seed, dtype=dt, device=device)
                    X = random_tokens(n, d, seed + 1, dtype=dt, device=device)
                    hs, atts = san.forward(X)
                    naive = path_sum_naive(san, X, atts)
                    rec = length_components(san, X, atts)
                    rows.append(
                        {
                            "L": L,
                            "H": H,
                            "skip": skip,
                            "dtype": dname,
                            "paths": count,
                            "err_paths": rel_fro(naive.total(), hs[-1]),
                            "err_recursion": rel_fro(rec.total(), hs[-1]),
                            "err_rec_vs_paths": float(
                                (rec.components - naive.components).abs().max()
                                / naive.components.abs().max()
                            ),
                            "eps": float(torch.finfo(dt).eps),
                        }
                    )
            log(f"reconstruction L={L} H={H} done")
    return rows


# -- (b) path lengths -----------------------------------------------------------------------
def architecture_lengths() -> list[dict]:
    out = []
    for name, H, L in ARCHITECTURES:
        dist = np.array(path_length_distribution(L, H))
        lengths = np.arange(L + 1)
        out.append(
            {
                "name": name,
                "H": H,
                "L": L,
                "dist": dist.tolist(),
                "mean_length": float((dist * lengths).sum()),
                "share_half_or_shorter": float(dist[: L // 2 + 1].sum()),
                "share_len0": float(dist[0]),
                "mode": int(dist.argmax()),
            }
        )
    return out


# -- (c, d) the recursion at scale, and the shares by length -----------------------------------
def big_network(L, H, n, d, scale, seed, device, dtype=torch.float64):
    san = SAN.random(SANConfig(L, H, d, skip=True, weight_scale=scale), seed, dtype=dtype, device=device)
    X = random_tokens(n, d, seed + 1, dtype=dtype, device=device)
    return san, X


def recursion_at_scale(L, H, n, d, seed, device, repeats=3) -> dict:
    """The recursion at a size where enumeration ((H+1)^L paths) is impossible: exactness and cost."""
    out = {}
    for dname, dt in DTYPES.items():
        san, X = big_network(L, H, n, d, 1.0, seed, device, dt)
        with torch.no_grad():
            hs, atts = san.forward(X)
            split = length_components(san, X, atts)
        out[f"err_{dname}"] = rel_fro(split.total(), hs[-1])
    san, X = big_network(L, H, n, d, 1.0, seed, device, torch.float32)
    with torch.no_grad():
        t_fwd, t_rec = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, atts = san.forward(X)
            t1 = time.perf_counter()
            length_components(san, X, atts)
            t2 = time.perf_counter()
            t_fwd.append(t1 - t0)
            t_rec.append(t2 - t1)
    out.update(
        paths=(H + 1) ** L,
        forward_s=min(t_fwd),
        recursion_s=min(t_rec),
        recursion_in_forwards=min(t_rec) / min(t_fwd),
    )
    return out


def length_shares(L, H, n, d, scales, seeds, seed, device, log=print) -> list[dict]:
    """Per scale: norm and residual norm of each length component, and the truncation error.

    ``trunc_err[k] = ||res(Y) - res(S^(<=k))||_F / ||res(Y)||_F`` (the bias term has zero residual).
    Averaged over ``seeds`` random networks, float64.
    """
    rows = []
    for s in scales:
        norm_share, res_share, trunc, growth = [], [], [], []
        for i in range(seeds):
            san, X = big_network(L, H, n, d, s, seed + 1000 * i, device)
            with torch.no_grad():
                hs, atts = san.forward(X)
                S = length_components(san, X, atts).components  # (L+1, n, d)
            Y, R = hs[-1], res(hs[-1])
            rS = res(S)
            norm_share.append((torch.linalg.matrix_norm(S) / torch.linalg.matrix_norm(Y)).tolist())
            res_share.append((torch.linalg.matrix_norm(rS) / torch.linalg.matrix_norm(R)).tolist())
            cum = torch.cumsum(rS, dim=0)
            trunc.append((torch.linalg.matrix_norm(R - cum) / torch.linalg.matrix_norm(R)).tolist())
            growth.append(float(torch.linalg.matrix_norm(Y) / torch.linalg.matrix_norm(X)))
        trunc_mean = np.mean(trunc, axis=0)
        k90 = int(np.argmax(trunc_mean <= 0.1)) if (trunc_mean <= 0.1).any() else L
        rows.append(
            {
                "scale": s,
                "norm_share": np.mean(norm_share, axis=0).tolist(),
                "res_share": np.mean(res_share, axis=0).tolist(),
                "trunc_err": trunc_mean.tolist(),
                "k90": k90,
                "r_out": float(torch.linalg.matrix_norm(R) / torch.linalg.matrix_norm(Y)),
                "growth": float(np.mean(growth)),
            }
        )
        log(f"shares at scale {s} done (k90 = {k90})")
    return rows


# -- figures ------------------------------------------------------------------------------------
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


def log10(x: float) -> float:
    return math.log10(x) if x > 0 else float("-inf")


# -- what each section records (values with their tolerances, verdicts with their rules) -----------------
def record_reconstruction(ch, recon: list[dict]) -> dict:
    """Part (a): the configurations checked and the worst errors of the path sum and of the length
    recursion, each held to its dtype's round-off. Returns the worst path-sum error by dtype (read by D1)."""
    worst = {dt: max(r["err_paths"] for r in recon if r["dtype"] == dt) for dt in DTYPES}
    worst_rec = {
        dt: max(max(r["err_recursion"], r["err_rec_vs_paths"]) for r in recon if r["dtype"] == dt)
        for dt in DTYPES
    }
    checks.exact(ch, "recon_configs", len(recon), why="the parameters set it (depths x heads x dtypes)")
    checks.exact(
        ch, "recon_max_paths", max(r["paths"] for r in recon), why="the parameters set it: (1 + heads)^depth"
    )
    ch.value(
        "recon_err_f64",
        worst["float64"],
        atol=1e-13,
        note="float64 round-off; any value below 1e-13 is exact",
    )
    ch.value(
        "recon_err_f32", worst["float32"], atol=5e-6, note="float32 round-off; any value below 5e-6 is exact"
    )
    ch.value(
        "recon_err_f64_in_eps",
        worst["float64"] / np.finfo(np.float64).eps,
        atol=500,
        note="error in units of float64 epsilon; round-off scale",
    )
    ch.value("recursion_err_f64", worst_rec["float64"], atol=1e-13, note="float64 round-off")
    ch.value("recursion_err_f32", worst_rec["float32"], atol=5e-6, note="float32 round-off")
    return worst


def record_architectures(ch, archs: list[dict]) -> None:
    """Part (b): the path-length statistics of BERT-Base and GPT-3 (exact combinatorics)."""
    bert = next(a for a in archs if a["name"].startswith("BERT-Base"))
    ch.value("bert_mean_length", bert["mean_length"], rtol=1e-12, note="exact combinatorics")
    ch.value("bert_share_half", bert["share_half_or_shorter"], rtol=1e-9, note="exact combinatorics")
    ch.value("bert_share_len0", bert["share_len0"], rtol=1e-9, note="exact combinatorics")
    ch.value(
        "gpt3_share_half",
        next(a for a in archs if a["name"] == "GPT-3")["share_half_or_shorter"],
        rtol=1e-9,
        note="exact combinatorics",
    )
    ch.value("arch_mean_lengths", {a["name"]: a["mean_length"] for a in archs}, glue=False)


def table_architectures(archs: list[dict]) -> str:
    """Part (b)'s table, as Markdown."""
    head = (
        "| architecture | H | L | paths $(H+1)^L$ | mean length | share with length ≤ L/2 |\n"
        "|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(
        f"| {a['name']} | {a['H']} | {a['L']} | {float(a['H'] + 1) ** a['L']:.2e} | "
        f"{a['mean_length']:.2f} | {a['share_half_or_shorter']:.2e} |"
        for a in archs
    )


def record_recursion(ch, big: dict, p) -> None:
    """Part (c): the exact recursion at scale, held to round-off; its timing is glued, not checked."""
    ch.value("big_paths", float(big["paths"]), rtol=1e-12, note="exact count (H+1)^L")
    ch.value("big_err_f64", big["err_float64"], atol=1e-12, note="float64 round-off")
    ch.value("big_err_f32", big["err_float32"], atol=2e-5, note="float32 round-off")
    ch.glue("big_recursion_in_forwards", big["recursion_in_forwards"])
    ch.glue("big_recursion_s", big["recursion_s"])
    for name, v in [
        ("big_L", p.big_layers),
        ("big_H", p.big_heads),
        ("big_n", p.big_tokens),
        ("big_dm", p.big_d),
    ]:
        ch.glue(name, v)


# -- the verdicts: rules fixed before the results, each a pure function of its evidence --------------
IDENTITY_TOL = 0.1  # C5: truncation error at which paths of length <= k "reproduce" res(Y) (k90)
EXPLODE = 10.0  # C5: ||Y||_F / ||X||_F above this: the forward pass has exploded (no meaningful question)

RULE_D1 = (
    "supported if the relative Frobenius error of the explicit path sum against the forward pass is "
    "< 1e-12 in float64 and < 1e-5 in float32 in every configuration enumerated, and < 1e-12 (float64) for "
    "the length recursion at scale; refuted if any float64 error exceeds 1e-6 (far above round-off: the "
    "identity fails); inconclusive otherwise (errors above round-off without a failure of the identity) "
    "or when no configuration was enumerated"
)
RULE_C5 = (
    "at random initialisation, over the weight-scale grid: a scale is in the meaningful regime when the "
    "path that skips every layer alone misses more than 10% of res(Y) (truncation error at length 0 > 0.1; "
    "below that the input alone reproduces the residual and path lengths are moot) and the forward pass has "
    "not exploded (||Y||_F/||X||_F <= 10; above that the attention saturates and every layer multiplies "
    "the output); within the regime: supported if paths of length <= L/2 reproduce res(Y) to 10% "
    "(truncation error at length floor(L/2) <= 0.1) at every scale, refuted if at none, inconclusive if at "
    "some, or if fewer than two scales of the grid fall in the regime; the reason gives the regime's "
    "boundaries on the grid"
)
OLD_RULE_C5 = (
    "paths of length <= L/2 reproduce res(output) to 10% (k90 <= L/2) at every weight scale tested: "
    "supported; at none: refuted; at some: inconclusive"
)


def verdict_d1(evidence: dict) -> tuple[str, str]:
    """D1 from ``configs`` (configurations enumerated), ``err_f64``, ``err_f32`` (worst path-sum errors) and
    ``big_err_f64`` (the recursion at scale)."""
    e64, e32, big = evidence["err_f64"], evidence["err_f32"], evidence["big_err_f64"]
    nums = f"worst error {e64:.1e} (float64), {e32:.1e} (float32), {big:.1e} at scale (float64)"
    if not evidence["configs"]:
        return "inconclusive", "No configuration was enumerated, so the identity was not checked."
    if max(e64, big) > 1e-6:
        return "refuted", f"The path sum misses the forward pass far beyond round-off: {nums}."
    if e64 < 1e-12 and e32 < 1e-5 and big < 1e-12:
        n = evidence["configs"]
        return (
            "supported",
            f"In all {n} configurations and at scale the path sum is exact to round-off: {nums}.",
        )
    return "inconclusive", f"The errors exceed round-off but are no failure of the identity: {nums}."


def c5_regime(scales: list[dict]) -> list[dict]:
    """The rows of ``scales`` (each with ``scale``, ``trunc0``, ``growth``) in C5's meaningful regime."""
    return [r for r in scales if r["trunc0"] > IDENTITY_TOL and r["growth"] <= EXPLODE]


def verdict_c5(evidence: dict) -> tuple[str, str]:
    """C5 from ``L`` and ``scales``: one row per weight scale with ``scale``, ``trunc0`` (truncation error
    keeping the length-0 path only), ``trunc_half`` (keeping lengths <= floor(L/2)) and ``growth``
    (``||Y||_F/||X||_F``)."""
    L, rows = evidence["L"], sorted(evidence["scales"], key=lambda r: r["scale"])
    reg = c5_regime(rows)
    low = [r["scale"] for r in rows if r["trunc0"] <= IDENTITY_TOL]
    high = [r["scale"] for r in rows if r["growth"] > EXPLODE]
    where = (
        f"the identity path alone reproduces res(Y) at scales {_fmt(low)} and the forward pass explodes at "
        f"{_fmt(high)}"
    )
    if len(reg) < 2:
        return "inconclusive", (
            f"Only {len(reg)} scale(s) of the grid ({_fmt([r['scale'] for r in reg])}) lie in the "
            f"meaningful regime ({where}), too few to decide."
        )
    holds = [r["scale"] for r in reg if r["trunc_half"] <= IDENTITY_TOL]
    span = f"{reg[0]['scale']:g} to {reg[-1]['scale']:g}"
    errs = ", ".join(f"{r['trunc_half']:.2g} at {r['scale']:g}" for r in reg)
    text = (
        f"in the meaningful regime, scales {span} of the grid ({where}), paths of length <= {L // 2} of "
        f"{L} leave a residual error of {errs}"
    )
    if len(holds) == len(reg):
        return "supported", f"At random initialisation, {text}: at most 10% at every scale."
    if not holds:
        return "refuted", f"At random initialisation, {text}: above 10% at every scale."
    return "inconclusive", f"At random initialisation, {text}: at most 10% only at scales {_fmt(holds)}."


def _fmt(xs) -> str:
    return ", ".join(f"{x:g}" for x in xs) if xs else "none"


VERDICTS = {"D1": verdict_d1, "C5": verdict_c5}


def c5_evidence(shares: list[dict], L: int) -> dict:
    """C5's evidence from :func:`length_shares`' rows."""
    return {
        "L": L,
        "scales": [
            {
                "scale": r["scale"],
                "trunc0": r["trunc_err"][0],
                "trunc_half": r["trunc_err"][L // 2],
                "growth": r["growth"],
                "k90": r["k90"],
            }
            for r in shares
        ],
    }


def record_shares(ch, shares: list[dict], p) -> dict:
    """Part (d): k90, the truncation error and the output's growth at each weight scale, the regime where
    C5 is asked (its boundaries on the grid), and the old rule's verdict beside it. Returns C5's
    evidence."""
    for r in shares:
        tag = f"{r['scale']:g}".replace(".", "p")
        checks.count(
            ch,
            f"k90_scale{tag}",
            r["k90"],
            of=p.big_layers,
            note="path lengths that carry 90% of the output; moves where a share sits at the line",
        )
        ch.value(f"trunc_err_scale{tag}", r["trunc_err"], rtol=1e-6, atol=1e-12, note="float64 norms")
    ch.value(
        "growth_by_scale",
        {f"{r['scale']:g}": r["growth"] for r in shares},
        rtol=1e-6,
        note="float64; ||Y||_F / ||X||_F, mean over seeds",
    )
    ev = c5_evidence(shares, p.big_layers)
    reg = c5_regime(ev["scales"])
    ch.value(
        "c5_regime",
        [reg[0]["scale"], reg[-1]["scale"]] if reg else None,
        note="smallest and largest grid scale in the meaningful regime (None: empty)",
    )
    checks.count(ch, "c5_regime_count", len(reg), of=len(ev["scales"]), note="grid scales in the regime")
    ch.glue("c5_regime_md", _fmt([r["scale"] for r in reg]))
    ch.glue("c5_identity_md", _fmt([r["scale"] for r in ev["scales"] if r["trunc0"] <= IDENTITY_TOL]))
    ch.glue("c5_explode_md", _fmt([r["scale"] for r in ev["scales"] if r["growth"] > EXPLODE]))
    ch.glue("c5_half", p.big_layers // 2)
    ch.glue("identity_tol", IDENTITY_TOL)
    ch.glue("explode", EXPLODE)
    ref = min(shares, key=lambda r: abs(r["scale"] - 1.0))
    checks.count(ch, "k90_ref", ref["k90"], of=p.big_layers, note="path lengths for 90% at scale 1")
    ch.glue("ref_scale", ref["scale"])
    ch.glue("k90_list", ", ".join(f"{r['k90']} (scale {r['scale']:g})" for r in shares))
    shallow = [r["k90"] <= p.big_layers / 2 for r in shares]
    old = "supported" if all(shallow) else ("refuted" if not any(shallow) else "inconclusive")
    ch.value("c5_old_rule_verdict", old, note="the verdict the old rule (every scale of the grid) gives")
    ch.glue("c5_old_rule", OLD_RULE_C5)
    return ev


def judge_c5(ch, evidence: dict) -> str:
    """Record C5 (:func:`verdict_c5`) from :func:`record_shares`' evidence."""
    v, reason = verdict_c5(evidence)
    ch.glue("c5_reason", reason)
    return ch.verdict(
        "C5",
        v,
        claim="SANs with skips behave like ensembles of shallow paths (at random initialisation, in the "
        "regime of weight scales where the question is meaningful)",
        rule=RULE_C5,
        evidence=evidence | {"reason": reason},
    )


def judge_d1(ch, recon: list[dict], worst: dict, big: dict) -> str:
    """Record D1 (:func:`verdict_d1`): the identity holds to round-off in every configuration and at
    scale."""
    evidence = {
        "configs": len(recon),
        "err_f64": worst["float64"],
        "err_f32": worst["float32"],
        "big_err_f64": big["err_float64"],
    }
    v, reason = verdict_d1(evidence)
    ch.glue("d1_reason", reason)
    return ch.verdict(
        "D1",
        v,
        claim="the SAN output is exactly the sum over paths plus 1b^T",
        rule=RULE_D1,
        evidence=evidence | {"reason": reason},
    )


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
    ax.set_title("shaded: the regime where C5 is decided", fontsize=9)
    fig.tight_layout()
    return fig
