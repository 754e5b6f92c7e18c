"""Chapter `skip`: Claim 3.1, the path that skips everything, and the open lower-bound problem.

Experiments (each returns plain data) and figures (each returns a matplotlib
figure) for ``chapters/skip.md``. The search machinery is in :mod:`rankcollapse.core.adversary`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..book.params import Param, ParameterError, Schema
from ..core import adversary as A
from ..core.metrics import norm_1inf, res
from ..core.san import SAN, SANConfig, random_tokens
from ..core.trajectory import float_floor, floor_index, trajectory

SCHEMA = Schema(
    "skip",
    [
        Param(
            "n_tokens",
            "int",
            "tokens n of the constructions and the curves",
            {"smoke": 16, "full": 32, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "d_model",
            "int",
            "width d of the constructions and the curves",
            {"smoke": 32, "full": 64, "paper": 768},
            low=2,
            high=8192,
        ),
        Param(
            "heads",
            "int",
            "heads H of the constructions and the curves",
            {"smoke": 2, "full": 4, "paper": 12},
            low=1,
            high=128,
        ),
        Param(
            "construct_depths",
            "int_list",
            "depths at which the constructions are checked",
            {"smoke": [1, 4, 16, 64], "full": [1, 4, 16, 64, 256], "paper": [1, 12, 64, 256]},
            low=1,
            high=4096,
        ),
        Param(
            "construct_betas",
            "float_list",
            "beta of the non-trivial family (every head's beta_h equal to it)",
            [1e-6, 1e-3, 1.0, 1e3],
            low=0.0,
            high=1e9,
        ),
        Param(
            "subspace_dim",
            "int",
            "dimension k of the subspace holding the inputs' residual in the family",
            {"smoke": 4, "full": 8, "paper": 64},
            low=1,
            high=8192,
        ),
        Param(
            "curve_layers",
            "int",
            "depth of the SAN vs SAN+skip curves",
            {"smoke": 24, "full": 24, "paper": 12},
            low=1,
            high=256,
        ),
        Param(
            "curve_scales",
            "float_list",
            "weight scales of the curves",
            {"smoke": [0.5, 1.0, 2.0, 4.0], "full": [0.5, 1.0, 2.0, 4.0], "paper": [0.5, 1.0, 2.0]},
            low=1e-6,
            high=100.0,
        ),
        Param(
            "curve_seeds",
            "int",
            "random networks per scale",
            {"smoke": 2, "full": 4, "paper": 3},
            low=1,
            high=1000,
        ),
        Param(
            "floor_mult",
            "float",
            "curves stop at floor_mult float64 machine epsilons",
            100.0,
            low=1.0,
            high=1e6,
        ),
        Param(
            "search_tokens",
            "int",
            "tokens of the lower-bound search",
            {"smoke": 8, "full": 8, "paper": 16},
            low=2,
            high=4096,
        ),
        Param(
            "search_d",
            "int",
            "width of the lower-bound search",
            {"smoke": 8, "full": 8, "paper": 16},
            low=2,
            high=8192,
        ),
        Param(
            "search_heads",
            "int",
            "heads of the lower-bound search (d_qk and d_v are d // H)",
            {"smoke": 1, "full": 1, "paper": 2},
            low=1,
            high=128,
        ),
        Param(
            "search_depths",
            "int_list",
            "depths of the lower-bound search",
            {"smoke": [1, 2, 4], "full": [1, 2, 4, 8], "paper": [1, 2, 4, 8, 12]},
            low=1,
            high=96,
        ),
        Param(
            "search_betas",
            "float_list",
            "beta constraints of the lower-bound search",
            {
                "smoke": [0.1, 1.0, 10.0],
                "full": [0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
                "paper": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
            },
            low=1e-9,
            high=1e6,
        ),
        Param(
            "search_random",
            "int",
            "random parameterisations per (depth, beta)",
            {"smoke": 32, "full": 128, "paper": 1024},
            low=1,
            high=100000,
        ),
        Param(
            "search_steps",
            "int",
            "gradient steps per adversarial start",
            {"smoke": 80, "full": 300, "paper": 500},
            low=0,
            high=100000,
        ),
        Param(
            "search_starts",
            "int",
            "adversarial starts: the best structured, the best random, then random draws",
            {"smoke": 2, "full": 4, "paper": 6},
            low=1,
            high=1000,
        ),
        Param(
            "search_lr",
            "float",
            "Adam learning rate of the adversarial search (on scale-free weights)",
            0.005,
            low=1e-6,
            high=1.0,
        ),
    ],
)


COLLAPSE_TOL = 1e-6  # r(X_L) at or below this counts as collapsed in (b): ten orders above float64 round-off

C2_RULE = (
    "supported if every construction (zero values, uniform attention, residual-orthogonal family) keeps "
    "||res(X_L)||/||res(X)|| = 1 up to its round-off scale at every depth and beta that stays in float "
    "range, AND at random initialisation no SAN+skip network ends with relative r(X_L) <= 1e-6 while most "
    "pure SANs do; refuted if a construction fails or skip networks collapse at least as often as pure "
    "SANs; inconclusive otherwise (e.g. some skip networks collapse in the relative residual)"
)
Q1_RULE = (
    "an open problem cannot be settled by search: the smallest ratio found is achievable, so it bounds any "
    "valid lower bound from above but proves none; the verdict is 'inconclusive' by construction, with the "
    "frontier (smallest ratio found per depth and beta) as the evidence"
)


def c2_verdict(exact_all: bool, san_collapsed: int, skip_collapsed: int, n_each: int) -> str:
    if not exact_all or skip_collapsed >= max(san_collapsed, 1):
        return "refuted"
    if skip_collapsed == 0 and 2 * san_collapsed > n_each:
        return "supported"
    return "inconclusive"


def check(p) -> None:
    if p.d_model // p.heads < 1 or p.search_d // p.search_heads < 1:
        raise ParameterError("parameters 'heads'/'search_heads' must not exceed 'd_model'/'search_d'")
    if p.subspace_dim >= p.d_model:
        raise ParameterError(
            f"parameter 'subspace_dim' = {p.subspace_dim} is not allowed: it must be below "
            f"d_model = {p.d_model} (the values must have a complement to live in)"
        )


def ratio(san: SAN, X) -> float:
    with torch.no_grad():
        return float(A.residual_ratio(san, X))


EPS64 = float(torch.finfo(torch.float64).eps)
LOST_DIGITS = 1e-4  # a case whose round-off scale exceeds this has too few digits left to check anything


def preservation(san: SAN, X) -> dict:
    """The residual ratio, and the round-off scale it can be checked to: subtracting a token mean of size
    ``||X_L||`` from every token costs about ``eps * ||X_L|| / ||res(X)||`` in the ratio. ``exact`` when
    ``|ratio - 1| <= 100 * (eps + that scale)``; ``overflow`` when the forward pass leaves the float
    range."""
    with torch.no_grad():
        hs, _ = san.forward(X)
        num, den = float(norm_1inf(res(hs[-1]))), float(norm_1inf(res(X)))
        scale = EPS64 * float(norm_1inf(hs[-1])) / den
    r = num / den
    ok = math.isfinite(r) and math.isfinite(scale)
    lost = ok and scale > LOST_DIGITS
    return {
        "ratio": r if ok else None,
        "roundoff": scale if ok else None,
        "overflow": not ok,
        "precision_lost": lost,
        "checkable": ok and not lost,
        "dev_in_roundoff": abs(r - 1) / (EPS64 + scale) if ok else None,
        "exact": ok and abs(r - 1) <= 100 * (EPS64 + scale),
    }


# -- (a) constructions -----------------------------------------------------------------------
def zero_value_san(cfg: SANConfig, seed: int) -> SAN:
    """The one-line construction: random W_Q, W_K, bias, but W_V = 0. Every layer is X + 1 b^T."""
    san = SAN.random(cfg, seed)
    san.WV.zero_()
    return san


def uniform_attention_san(cfg: SANConfig, seed: int) -> SAN:
    """W_Q = 0: every attention row is uniform, so P X W_h = 1 xbar^T W_h is rank one; values are random."""
    san = SAN.random(cfg, seed)
    san.WQ.zero_()
    return san


def subspace_tokens(n: int, d: int, k: int, seed: int):
    """Tokens ``1 x^T + R`` with a random mean ``x`` and residual rows ``R`` in the first ``k``
    coordinates."""
    g = torch.Generator().manual_seed(int(seed))
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    R = res(X)
    R[:, k:] = 0
    return R + torch.randn(1, d, generator=g, dtype=torch.float64)


def orthogonal_value_san(cfg: SANConfig, k: int, beta: float, seed: int) -> SAN:
    """The non-trivial family: random queries, keys, outputs, bias; values ``W_V = (I - Pi_k) G`` that
    annihilate the residual subspace (first ``k`` coordinates); every head scaled onto ``beta_h = beta``.

    On inputs from :func:`subspace_tokens` the attention is arbitrary and not uniform, the values are not
    zero, yet every layer adds ``P (1 x^T) W_h = 1 (x^T W_h)``: ``res`` is preserved exactly at any depth and
    any beta.
    """
    san = SAN.random(cfg, seed)
    san.WV[:, :, :k, :] = 0
    A.project_beta(san, beta, exact=True)
    return san


def constructions(n, d, H, depths, betas, k, seed) -> list[dict]:
    """Residual ratio ``||res(X_L)||/||res(X)||`` (composite norm) of each construction, depth and beta."""
    rows = []
    for L in depths:
        cfg = SANConfig(L, H, d, skip=True)
        Xg = random_tokens(n, d, seed + 1)
        z = zero_value_san(cfg, seed)
        rows.append(
            {"family": "zero values", "L": L, "beta": float(A.head_betas(z).max()), **preservation(z, Xg)}
        )
        u = uniform_attention_san(cfg, seed)
        rows.append(
            {
                "family": "uniform attention",
                "L": L,
                "beta": float(A.head_betas(u).max()),
                **preservation(u, Xg),
            }
        )
        Xs = subspace_tokens(n, d, k, seed + 2)
        for b in betas:
            o = orthogonal_value_san(cfg, k, b, seed)
            with torch.no_grad():
                P = o.attention(0, Xs)
            rows.append(
                {
                    "family": "residual-orthogonal values",
                    "L": L,
                    "beta": float(A.head_betas(o).max()),
                    "beta_target": b,
                    **preservation(o, Xs),
                    "attention_from_uniform": float((P - 1.0 / n).abs().max()),
                }
            )
        # the same family on generic inputs (residual not in a subspace): not preserved in general
        o = orthogonal_value_san(cfg, k, 1.0, seed)
        rows.append(
            {
                "family": "residual-orthogonal values, generic input",
                "L": L,
                "beta": 1.0,
                **preservation(o, Xg),
            }
        )
    return rows


def record_constructions(ch, cons: list[dict], p) -> dict:
    """Record part (a): the constructions checked, the unchecked ones (overflow or too few digits), whether
    all are exact, their worst deviation (absolute and in round-off units), the family on a generic input
    and how far the family's attention is from uniform; glue the depths and betas of the grid and the
    generic ratios' range. Returns what the C2 verdict reads: ``exact_all``, ``cases``, ``worst_dev``."""
    fams = ("zero values", "uniform attention", "residual-orthogonal values")
    in_range = [r for r in cons if r["family"] in fams and r["checkable"]]
    exact_all = all(r["exact"] for r in in_range)
    worst_dev = max(abs(r["ratio"] - 1) for r in in_range)
    generic = [r for r in cons if r["family"].endswith("generic input") and r["checkable"]]
    ch.value("construct_cases", len(in_range), note="count")
    ch.value(
        "construct_unchecked",
        sum(not r["checkable"] for r in cons if r["family"] in fams),
        note="count of cases that overflow or keep fewer than four digits of the residual",
    )
    ch.value(
        "construct_all_exact", exact_all, note="boolean: every case equal to 1 up to its round-off scale"
    )
    ch.value(
        "construct_worst_dev", worst_dev, atol=1e-4, note="round-off; grows with the token mean, see figure"
    )
    ch.value(
        "construct_worst_in_roundoff",
        max(r["dev_in_roundoff"] for r in in_range),
        atol=100,
        note="deviation in units of each case's round-off scale; exact means below 100",
    )
    ch.value(
        "generic_ratio_range",
        [min(r["ratio"] for r in generic), max(r["ratio"] for r in generic)],
        rtol=1e-6,
        note="float64",
    )
    ch.glue("generic_lo", min(r["ratio"] for r in generic))
    ch.glue("generic_hi", max(r["ratio"] for r in generic))
    ch.value(
        "family_attention_from_uniform",
        max(r["attention_from_uniform"] for r in cons if r["family"] == "residual-orthogonal values"),
        rtol=1e-6,
        note="float64; largest |P - 1/n| of the family's first layer",
    )
    ch.glue("construct_max_depth", max(p.construct_depths))
    ch.glue("construct_betas_md", ", ".join(f"{b:g}" for b in p.construct_betas))
    return {"exact_all": exact_all, "cases": len(in_range), "worst_dev": worst_dev}


# -- (b) SAN vs SAN+skip at random init -----------------------------------------------------------
def skip_curves(n, d, H, L, scales, seeds, floor_mult, seed, device, log=print) -> list[dict]:
    floor = float_floor(torch.float64, floor_mult)
    rows = []
    for s in scales:
        for skip in (False, True):
            for i in range(seeds):
                san = SAN.random(
                    SANConfig(L, H, d, skip=skip, weight_scale=s), seed + 1000 * i, device=device
                )
                X = random_tokens(n, d, seed + 1000 * i + 1, device=device)
                tr = trajectory(san, X)
                tr.pop("_hidden")
                rows.append(
                    {
                        "scale": s,
                        "skip": skip,
                        "seed": i,
                        "r": tr["r"],
                        "res": tr["res"],
                        "floor_at": floor_index(tr["r"], floor),
                    }
                )
        log(f"curves at scale {s} done")
    return rows


def curve_summary(rows) -> dict:
    """Per scale and skip: median final r(X_L) and median ratio r(X_L)/r(X_0)."""
    out = {}
    for s in sorted({r["scale"] for r in rows}):
        for skip in (False, True):
            sel = [r for r in rows if r["scale"] == s and r["skip"] == skip]
            out[f"{'skip' if skip else 'san'}_{s:g}"] = {
                "r_L_median": float(np.median([r["r"][-1] for r in sel])),
                "r_L_min": float(min(r["r"][-1] for r in sel)),
                "ratio_median": float(np.median([r["r"][-1] / r["r"][0] for r in sel])),
                "abs_ratio_min": float(min(r["res"][-1] / r["res"][0] for r in sel)),
            }
    return out


def record_skip_curves(ch, curves: list[dict]) -> dict:
    """Record part (b): the per-scale summary of the curves, how many pure SANs and SAN+skip networks
    collapse (``r(X_L) <= COLLAPSE_TOL``), the smallest final r of the skip networks and the range of their
    absolute residual ratio; glue the networks per variant, the threshold, how many skip networks end below
    their input's absolute residual (and ``abs_holds_in``: Claim 3.1's inequality holds in "all", "some" or
    "none" of them), and the skip networks' median final r with its scales, as lists. Returns what the C2
    verdict reads."""
    cs = curve_summary(curves)
    ch.value("curve_summary", cs, rtol=1e-6, atol=1e-13, note="float64; SAN values at round-off (atol)")
    san_collapsed = sum(r["r"][-1] <= COLLAPSE_TOL for r in curves if not r["skip"])
    skip_collapsed = sum(r["r"][-1] <= COLLAPSE_TOL for r in curves if r["skip"])
    n_each = sum(1 for r in curves if r["skip"])
    ch.value("san_collapsed", san_collapsed, note="count")
    ch.value("skip_collapsed", skip_collapsed, note="count")
    ch.value(
        "skip_r_L_min",
        min(r["r"][-1] for r in curves if r["skip"]),
        rtol=1e-6,
        atol=1e-13,
        note="float64; round-off below 1e-13",
    )
    skip_abs_min = min(r["res"][-1] / r["res"][0] for r in curves if r["skip"])
    skip_abs_max = max(r["res"][-1] / r["res"][0] for r in curves if r["skip"])
    n_below = sum(r["res"][-1] < r["res"][0] for r in curves if r["skip"])
    ch.glue("skip_abs_below", n_below)
    ch.glue("skip_abs_min", skip_abs_min)
    ch.glue("skip_abs_max", skip_abs_max)
    ch.glue("abs_holds_in", "all" if n_below == 0 else "none" if n_below == n_each else "some")
    ch.value(
        "skip_abs_ratio_range",
        [skip_abs_min, skip_abs_max],
        rtol=1e-6,
        note="float64; ||res(X_L)|| / ||res(X)|| of the skip networks",
    )
    ch.glue("n_each", n_each)
    ch.glue("collapse_tol", COLLAPSE_TOL)
    skip_cs = {k.split("_")[1]: v for k, v in cs.items() if k.startswith("skip")}
    ch.glue("skip_r_L_medians", ", ".join(f"{v['r_L_median']:.2g}" for v in skip_cs.values()))
    ch.glue("skip_scales", ", ".join(skip_cs))
    return {
        "san_collapsed": san_collapsed,
        "skip_collapsed": skip_collapsed,
        "n_each": n_each,
        "skip_r_L_min": min(r["r"][-1] for r in curves if r["skip"]),
        "skip_abs_min": skip_abs_min,
    }


# -- (c) the lower-bound frontier ------------------------------------------------------------------
def frontier(n, d, H, depths, betas, samples, steps, starts, lr, seed, log=print) -> list[dict]:
    """Smallest ``||res(X_L)||/||res(X)||`` found with skips under ``beta_h <= beta``, per (depth, beta), by
    random search, the structured sharpen-and-subtract family, and projected adversarial gradient descent.
    Float64, CPU (small sizes; the search is sequential)."""
    X = random_tokens(n, d, seed + 1)
    rows = []
    for L in depths:
        cfg = SANConfig(L, H, d, skip=True, bias=False)
        for b in betas:
            g = torch.Generator().manual_seed(int(seed) + 7919 * L + int(1000 * b))
            r_best, r_san = A.random_search(cfg, X, b, samples, g)
            s_best, s_san = A.structured_search(cfg, X, b)
            inits = [x for x in (s_san, r_san) if x is not None]
            inits += [A.random_on_constraint(cfg, b, g) for _ in range(max(starts - len(inits), 0))]
            adv = [A.adversarial_search(s, X, b, steps, lr)[0] for s in inits[:starts]]
            best = min([r_best, s_best] + adv)
            rows.append(
                {
                    "L": L,
                    "beta": b,
                    "random": r_best,
                    "structured": s_best,
                    "adversarial": min(adv),
                    "best": best,
                    "per_layer": best ** (1.0 / L),
                }
            )
            log(
                f"frontier L={L} beta={b:g}: random {r_best:.3g}, structured {s_best:.3g}, "
                f"adversarial {min(adv):.3g}"
            )
    return rows


def input_scale(n, d, seed) -> dict:
    X = random_tokens(n, d, seed + 1)
    G = X @ X.T
    return {
        "res_1inf": float(norm_1inf(res(X))),
        "mean_sq_norm": float((X**2).sum(-1).mean()),
        "self_max": bool((G.argmax(dim=-1) == torch.arange(n)).all()),
    }


def record_frontier(ch, front: list[dict], ins: dict, p) -> None:
    """Record part (c): the frontier (smallest ratio found per depth and beta), the random search's part of
    it, and the input's residual; glue the frontier at the smallest and largest beta and depth, the
    shallowest network's ratio compounded to the largest depth and whether the deepest one lies "above" or
    "at or below" that (``front_vs_compound``), whether every token scores highest against itself
    (``self_max_word``: "true"/"false"), and the search's counts."""
    ch.value(
        "frontier",
        {f"L{r['L']}_beta{r['beta']:g}": r["best"] for r in front},
        rtol=0.2,
        atol=1e-3,
        note="optimiser output; round-off differences can steer Adam elsewhere, so 20%",
    )
    ch.value(
        "frontier_random",
        {f"L{r['L']}_beta{r['beta']:g}": r["random"] for r in front},
        rtol=1e-6,
        note="float64 forward passes of seeded draws",
    )
    ch.value("input_res_1inf", ins["res_1inf"], rtol=1e-12, note="float64")
    ch.glue("self_max_word", "true" if ins["self_max"] else "false")
    bmin, bmax = min(p.search_betas), max(p.search_betas)
    Lmax = max(p.search_depths)
    at = {(r["L"], r["beta"]): r for r in front}
    ch.glue("front_small", at[(Lmax, bmin)]["best"])
    ch.glue("front_large", at[(Lmax, bmax)]["best"])
    ch.glue("front_small_L1", at[(min(p.search_depths), bmin)]["best"])
    ch.glue("per_layer_small", at[(Lmax, bmin)]["per_layer"])
    compound = at[(min(p.search_depths), bmin)]["best"] ** (Lmax / min(p.search_depths))
    ch.glue("front_compound", compound)
    ch.glue("front_vs_compound", "above" if at[(Lmax, bmin)]["best"] > compound else "at or below")
    ch.glue("bmin", bmin)
    ch.glue("bmax", bmax)
    ch.glue("Lmax", Lmax)
    ch.glue("Lmin", min(p.search_depths))
    ch.glue("adv_wins", sum(r["adversarial"] < min(r["random"], r["structured"]) for r in front))
    ch.glue("n_cells", len(front))
    ch.glue("random_min", min(r["random"] for r in front))


def judge_c2(ch, cons: dict, curves: dict) -> str:
    """Record the C2 verdict (:func:`c2_verdict`) from part (a)'s constructions (``cons``, as returned by
    :func:`record_constructions`) and part (b)'s counts (``curves``, from :func:`record_skip_curves`); glue
    ``c2_constructions``, "All" or "Not all" (of the constructions hold exactly). Returns the verdict."""
    c2 = c2_verdict(cons["exact_all"], curves["san_collapsed"], curves["skip_collapsed"], curves["n_each"])
    ch.verdict(
        "C2",
        c2,
        claim="skip connections prevent the collapse (Claim 3.1: parameterisations with "
        "||res(X_L)|| >= ||res(X)|| exist for any depth and arbitrarily small beta)",
        rule=C2_RULE,
        evidence={
            "construct_all_exact": cons["exact_all"],
            "construct_cases": cons["cases"],
            "construct_worst_dev": cons["worst_dev"],
            "san_collapsed": curves["san_collapsed"],
            "skip_collapsed": curves["skip_collapsed"],
            "networks_per_variant": curves["n_each"],
            "skip_r_L_min": curves["skip_r_L_min"],
            "skip_abs_ratio_min": curves["skip_abs_min"],
        },
    )
    ch.glue("c2_constructions", "All" if cons["exact_all"] else "Not all")
    return c2


def judge_q1(ch, front: list[dict], ins: dict, p) -> str:
    """Record the Q1 verdict: 'inconclusive' by construction (:data:`Q1_RULE`), the frontier as evidence."""
    return ch.verdict(
        "Q1",
        "inconclusive",
        claim="a tight lower bound on ||res(X_L)||/||res(X)|| with skip connections (open problem)",
        rule=Q1_RULE,
        evidence={
            "frontier": {f"L{r['L']}_beta{r['beta']:g}": r["best"] for r in front},
            "input_res_1inf": ins["res_1inf"],
            "search_d": p.search_d,
            "search_tokens": p.search_tokens,
        },
    )


# -- figures -----------------------------------------------------------------------------------------
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
    import matplotlib.pyplot as plt

    scales = sorted({r["scale"] for r in rows})
    fig, axes = plt.subplots(2, len(scales), figsize=(3.2 * len(scales), 6.0), sharey="row", squeeze=False)
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
        ax.set_title(f"weight scale {s:g}", fontsize=9)
        ax2.set_yscale("log")
        ax2.set_xlabel("layer l")
    axes[0][0].set_ylabel("relative r(X_l)")
    axes[0][0].legend(fontsize=7)
    axes[1][0].set_ylabel("absolute ‖res(X_l)‖ / ‖res(X)‖")
    fig.tight_layout()
    return fig


def fig_frontier(rows):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    betas = sorted({r["beta"] for r in rows})
    depths = sorted({r["L"] for r in rows})
    for k, b in enumerate(betas):
        sel = [r for r in rows if r["beta"] == b]
        axes[0].plot(
            [r["L"] for r in sel], [r["best"] for r in sel], "o-", color=f"C{k}", label=f"β ≤ {b:g}"
        )
        axes[0].plot([r["L"] for r in sel], [r["random"] for r in sel], ":", color=f"C{k}", lw=1)
    axes[0].set_xscale("log", base=2)
    axes[0].set_yscale("log")
    axes[0].set_xlabel("depth L")
    axes[0].set_ylabel("smallest ‖res(X_L)‖/‖res(X)‖ found")
    axes[0].axhline(1, color="grey", lw=0.8)
    axes[0].legend(fontsize=7)
    axes[0].set_title("solid: best of all searches; dotted: random search", fontsize=8)
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
