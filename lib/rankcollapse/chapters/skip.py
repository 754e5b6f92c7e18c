"""Chapter `skip`: Claim 3.1, the path that skips everything, and the open lower-bound problem.

Experiments (each returns plain data) and figures (each returns a matplotlib
figure) for ``chapters/skip.md``. The search machinery is in :mod:`rankcollapse.core.adversary`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..book import checks
from ..book.params import Param, ParameterError, Schema, require_distinct, require_divisible
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
            "depths of the lower-bound search (the shallowest is the one compounded in Q1)",
            {"smoke": [1, 2, 4], "full": [1, 2, 4, 8], "paper": [1, 2, 4, 8, 12]},
            low=1,
            high=96,
        ),
        Param(
            "search_betas",
            "float_list",
            "beta constraints of the lower-bound search",
            {
                "smoke": [0.1, 1.0],
                "full": [0.03, 0.3, 3.0],
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
            "gradient steps per restart at the first effort level (doubled at each level)",
            {"smoke": 25, "full": 50, "paper": 100},
            low=1,
            high=100000,
        ),
        Param(
            "search_starts",
            "int",
            "random restarts of the adversarial search (the padded and structured candidates descend beside "
            "them)",
            {"smoke": 4, "full": 8, "paper": 16},
            low=1,
            high=1000,
        ),
        Param(
            "search_levels",
            "int",
            "effort cap: at most this many effort levels (steps doubled at each)",
            {"smoke": 5, "full": 8, "paper": 10},
            low=3,
            high=16,
        ),
        Param(
            "search_tol",
            "float",
            "plateau: a cell has converged when four times the effort lowers the random restarts' best "
            "by less than this fraction",
            0.05,
            low=1e-6,
            high=0.9,
        ),
        Param(
            "search_lr",
            "float",
            "Adam learning rate of the adversarial search (on scale-free weights)",
            0.01,
            low=1e-6,
            high=1.0,
        ),
    ],
)


COLLAPSE_TOL = 1e-6  # r(X_L) at or below this counts as collapsed in (b): ten orders above float64 round-off

RULE_C2 = (
    "supported if every construction (zero values, uniform attention, residual-orthogonal family) keeps "
    "||res(X_L)||/||res(X)|| = 1 up to its round-off scale at every depth and beta that stays in float "
    "range, AND at random initialisation no SAN+skip network ends with relative r(X_L) <= 1e-6 while most "
    "pure SANs do; refuted if a construction fails or skip networks collapse at least as often as pure "
    "SANs; inconclusive otherwise (e.g. some skip networks collapse in the relative residual)"
)
C2_RULE = RULE_C2  # the name this rule had before the verdict form
RULE_Q1 = (
    "sub-claim tested (the open problem itself cannot be settled by search): on the search input, depth "
    "shrinks the residual no faster than compounding the shallowest network, rho(L, beta) >= "
    "rho(L0, beta)^(L/L0) for every depth L searched, rho the smallest ratio found and L0 the shallowest "
    "depth; refuted if some cell whose shallowest cell converged lies below "
    "((1 - tol) rho(L0, beta))^(L/L0) "
    "(tol the plateau fraction: a margin for what more effort could still take off the shallow value); "
    "supported if every cell's search converged (four times the effort lowered its best by less than tol) "
    "and every deeper cell lies at or above rho(L0, beta)^(L/L0); inconclusive otherwise (some search not "
    "converged and nothing refuting, or a deeper cell between the two marks)"
)
OLD_RULE_Q1 = (
    "an open problem cannot be settled by search: the smallest ratio found is achievable, so it bounds any "
    "valid lower bound from above but proves none; the verdict is 'inconclusive' by construction, with the "
    "frontier (smallest ratio found per depth and beta) as the evidence"
)


def verdict_c2(evidence: dict) -> tuple[str, str]:
    """C2 from ``construct_all_exact``, ``construct_cases``, ``san_collapsed``, ``skip_collapsed`` and
    ``networks_per_variant``."""
    ok, n = evidence["construct_all_exact"], evidence["networks_per_variant"]
    san, skip = evidence["san_collapsed"], evidence["skip_collapsed"]
    counts = (
        f"at random initialisation {skip} of {n} SAN+skip networks and {san} of {n} pure SANs end with "
        f"r(X_L) <= {COLLAPSE_TOL:g}"
    )
    cons = f"{'all' if ok else 'not all'} {evidence['construct_cases']} construction cases hold exactly"
    if not ok or skip >= max(san, 1):
        return "refuted", f"The skip connections do not prevent the collapse: {cons}, and {counts}."
    if skip == 0 and 2 * san > n:
        return "supported", f"The constructions and the random networks agree: {cons}, and {counts}."
    return "inconclusive", f"The constructions hold but the random networks split: {cons}, and {counts}."


def q1_compare(evidence: dict) -> list[dict]:
    """Per deeper cell of Q1's evidence: its best, the compounded shallowest value ``rho0^(L/L0)``, the
    refutation mark ``((1 - tol) rho0)^(L/L0)`` and whether the shallowest cell converged."""
    tol, cells = evidence["tol"], evidence["cells"]
    out = []
    for b in sorted({c["beta"] for c in cells}):
        row = sorted((c for c in cells if c["beta"] == b), key=lambda c: c["L"])
        base = row[0]
        for c in row[1:]:
            k = c["L"] / base["L"]
            out.append(
                {
                    "L": c["L"],
                    "beta": b,
                    "best": c["best"],
                    "L0": base["L"],
                    "compound": base["best"] ** k,
                    "mark": ((1 - tol) * base["best"]) ** k,
                    "base_converged": base["converged"],
                }
            )
    return out


def verdict_q1(evidence: dict) -> tuple[str, str]:
    """Q1's sub-claim from ``tol`` and ``cells`` (each with ``L``, ``beta``, ``best``, ``converged``)."""
    cmp = q1_compare(evidence)
    if not cmp:
        return "inconclusive", "Only one depth was searched, so there is nothing to compound."
    below = [c for c in cmp if c["base_converged"] and c["best"] < c["mark"]]
    if below:
        c = min(below, key=lambda c: c["best"] / c["mark"])
        return "refuted", (
            f"Depth beats compounding: at L = {c['L']}, beta <= {c['beta']:g} the search found "
            f"{c['best']:.3g}, below depth {c['L0']}'s converged {c['compound'] ** (c['L0'] / c['L']):.3g} "
            f"compounded ({c['compound']:.3g}, margin {c['mark']:.3g})."
        )
    open_cells = [c for c in evidence["cells"] if not c["converged"]]
    lowest = min(cmp, key=lambda c: c["best"] / c["compound"])
    closest = (
        f"the closest deeper cell is L = {lowest['L']}, beta <= {lowest['beta']:g}: {lowest['best']:.3g} "
        f"against {lowest['compound']:.3g} compounded"
    )
    if not open_cells and all(c["best"] >= c["compound"] for c in cmp):
        return "supported", (
            f"Every one of the {len(evidence['cells'])} searches converged and no deeper network beat "
            f"compounding the shallowest ({closest})."
        )
    n_open = len(open_cells)
    return "inconclusive", (
        f"No deeper network beat compounding by the margin, but {n_open} of {len(evidence['cells'])} "
        f"searches did not converge within the effort cap ({closest})."
    )


VERDICTS = {"C2": verdict_c2, "Q1": verdict_q1}


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts; the chapter
    again, as :func:`check`)."""
    for d, H in (("d_model", "heads"), ("search_d", "search_heads")):
        require_divisible(p, d, H, f"d_qk = d_v = {d} / {H}")
    if p.subspace_dim >= p.d_model:
        raise ParameterError(
            f"parameters 'subspace_dim' = {p.subspace_dim} and 'd_model' = {p.d_model}: subspace_dim must "
            "be below d_model (the values must have a complement to live in)"
        )
    for name in ("search_depths", "search_betas"):
        require_distinct(p, name, why="the frontier has one cell per depth and beta")


check = validate  # the name the chapter's notebook calls


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
    n_fams = sum(r["family"] in fams for r in cons)
    checks.count(ch, "construct_cases", len(in_range), of=n_fams, note="cases inside the float range")
    checks.count(
        ch,
        "construct_unchecked",
        sum(not r["checkable"] for r in cons if r["family"] in fams),
        of=n_fams,
        note="cases that overflow or keep fewer than four digits of the residual",
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
    checks.count(ch, "san_collapsed", san_collapsed, of=n_each, note="pure SANs ending collapsed")
    checks.count(ch, "skip_collapsed", skip_collapsed, of=n_each, note="SAN+skip networks ending collapsed")
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
def frontier(n, d, H, depths, betas, samples, steps, starts, levels, tol, lr, seed, log=print) -> list[dict]:
    """Smallest ``||res(X_L)||/||res(X)||`` found with skips under ``beta_h <= beta``, per (depth, beta): by
    random search, the structured sharpen-and-subtract family, the best network of the next shallower
    depth padded with quiet layers, and adversarial gradient descent from ``starts`` random draws and from
    those two candidates, run to a plateau (:func:`rankcollapse.core.adversary.search_to_plateau`: the
    steps doubled at each effort level until four times the effort lowers the random restarts' best by
    less than ``tol``, or ``levels`` levels). Each value is achieved by a network on the constraint; the
    cell's ``best`` is the smallest, ``converged`` is the descent's. Float64, CPU (small sizes; the
    restarts are batched)."""
    X = random_tokens(n, d, seed + 1)
    rows, best_san = [], {}
    for L in sorted(depths):
        cfg = SANConfig(L, H, d, skip=True, bias=False)
        for b in betas:
            cell_seed = int(seed) + 7919 * L + int(1000 * b)
            g = torch.Generator().manual_seed(cell_seed)
            r_best, r_san = A.random_search(cfg, X, b, samples, g)
            s_best, s_san = A.structured_search(cfg, X, b)
            shallower = [k for k in best_san if k[1] == b and k[0] < L]
            p_best, p_san = math.inf, None
            if shallower:
                p_san = A.pad_with_quiet_layers(best_san[max(shallower)], L, b, g)
                p_best = A.checked_ratio(p_san, X)
            extra = tuple(x for x in (p_san, s_san) if x is not None)
            run = A.search_to_plateau(cfg, X, b, cell_seed + 1, starts, steps, levels, tol, lr, extra)
            cands = {
                "random": (r_best, r_san),
                "structured": (s_best, s_san),
                "padded": (p_best, p_san),
                "adversarial": (run["best"], run["san"]),
            }
            src = min((k for k in cands if cands[k][1] is not None), key=lambda k: cands[k][0])
            best, best_san[(L, b)] = cands[src]
            rows.append(
                {
                    "L": L,
                    "beta": b,
                    "random": r_best,
                    "structured": s_best,
                    "padded": p_best if shallower else None,
                    "adversarial": run["best"],
                    "adversarial_random": run["random_best"],
                    "adversarial_from_candidates": run["extra_best"],
                    "best": best,
                    "best_from": src,
                    "per_layer": best ** (1.0 / L),
                    "converged": run["converged"],
                    "levels": run["levels"],
                    "effort": run["levels"][-1]["effort"],
                }
            )
            log(
                f"frontier L={L} beta={b:g}: random {r_best:.3g}, structured {s_best:.3g}, padded "
                f"{p_best:.3g}, adversarial {run['random_best']:.3g} (from candidates "
                f"{run['extra_best']:.3g}) after {run['levels'][-1]['steps']} steps x "
                f"{starts} restarts ({'converged' if run['converged'] else 'not converged'})"
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
    it, and the input's residual; glue the frontier at the extreme depths and betas, the shallowest network
    compounded to the largest depth, the plateau's settings and the counts of the search (which cells
    converged, and the effort each used, are in Q1's evidence and :func:`table_frontier`)."""
    key = [f"L{r['L']}_beta{r['beta']:g}" for r in front]
    ch.value(
        "frontier",
        dict(zip(key, (r["best"] for r in front))),
        rtol=0.3,
        atol=1e-3,
        note="optimiser output; round-off differences can steer Adam elsewhere, most where the search has "
        "not converged, so 30%",
    )
    # which cells converged, and the effort each used, follow the optimiser's path: they are kept in Q1's
    # evidence and the table, not recorded as values to match (a plateau near the tolerance may move with
    # the kernels)
    ch.value(
        "frontier_random",
        dict(zip(key, (r["random"] for r in front))),
        rtol=1e-6,
        note="float64 forward passes of seeded draws",
    )
    ch.value("input_res_1inf", ins["res_1inf"], rtol=1e-12, note="float64")
    ch.glue("self_max_word", "true" if ins["self_max"] else "false")
    n_conv = sum(r["converged"] for r in front)
    ch.glue("n_converged", n_conv)
    ch.glue("n_cells", len(front))
    open_cells = [f"L = {r['L']}, β ≤ {r['beta']:g}" for r in front if not r["converged"]]
    ch.glue("open_cells_md", "; ".join(open_cells) if open_cells else "none")
    ch.glue("effort_cap", p.search_steps * 2 ** (p.search_levels - 1) * p.search_starts)
    ch.glue("effort_first", p.search_steps * p.search_starts)
    ch.glue("search_tol_pct", 100 * p.search_tol)
    bmin, bmax = min(p.search_betas), max(p.search_betas)
    Lmin, Lmax = min(p.search_depths), max(p.search_depths)
    at = {(r["L"], r["beta"]): r for r in front}
    ch.glue("front_small", at[(Lmax, bmin)]["best"])
    ch.glue("front_large", at[(Lmax, bmax)]["best"])
    ch.glue("front_small_L1", at[(Lmin, bmin)]["best"])
    ch.glue("front_large_L1", at[(Lmin, bmax)]["best"])
    ch.glue("front_large_compound", at[(Lmin, bmax)]["best"] ** (Lmax / Lmin))
    ch.glue("front_small_compound", at[(Lmin, bmin)]["best"] ** (Lmax / Lmin))
    ch.glue("bmin", bmin)
    ch.glue("bmax", bmax)
    ch.glue("Lmax", Lmax)
    ch.glue("Lmin", Lmin)
    ch.glue("random_min", min(r["random"] for r in front))
    gain = [r["levels"][0]["best"] / r["adversarial_random"] for r in front if r["adversarial_random"] > 0]
    ch.glue("effort_gain_max", max(gain))
    srcs = [r["best_from"] for r in front]
    ch.glue("from_adversarial", sum(s_ == "adversarial" for s_ in srcs))
    ch.glue("from_padded", sum(s_ == "padded" for s_ in srcs))


def table_frontier(front: list[dict]) -> str:
    """Part (c)'s table, as Markdown: per cell the best found, where it came from, the effort used and
    whether the search converged."""
    head = (
        "| depth L | β ≤ | smallest ratio found | found by | random restarts' best | effort (steps × "
        "restarts) | converged |\n|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(
        f"| {r['L']} | {r['beta']:g} | {r['best']:.3g} | {r['best_from']} | {r['adversarial_random']:.3g} | "
        f"{r['effort']} | {'yes' if r['converged'] else '**no**'} |"
        for r in front
    )


def c2_across_interval(ev: dict) -> dict:
    """:func:`verdict_c2` with each collapsed count (the pure SANs', the SAN+skip networks', out of the
    networks per variant) moved alone through its exact 95% interval
    (:func:`rankcollapse.book.checks.across_interval`)."""
    n = ev["networks_per_variant"]
    counts = {
        "pure SANs collapsed": (ev["san_collapsed"], n, checks.at_key("san_collapsed")),
        "SAN+skip collapsed": (ev["skip_collapsed"], n, checks.at_key("skip_collapsed")),
    }
    return checks.across_interval(verdict_c2, ev, counts)


def judge_c2(ch, cons: dict, curves: dict) -> str:
    """Record the C2 verdict (:func:`verdict_c2`) from part (a)'s constructions (``cons``, as returned by
    :func:`record_constructions`) and part (b)'s counts (``curves``, from :func:`record_skip_curves`); glue
    ``c2_constructions``, "All" or "Not all" (of the constructions hold exactly). Returns the verdict."""
    evidence = {
        "construct_all_exact": cons["exact_all"],
        "construct_cases": cons["cases"],
        "construct_worst_dev": cons["worst_dev"],
        "san_collapsed": curves["san_collapsed"],
        "skip_collapsed": curves["skip_collapsed"],
        "networks_per_variant": curves["n_each"],
        "skip_r_L_min": curves["skip_r_L_min"],
        "skip_abs_ratio_min": curves["skip_abs_min"],
    }
    v, reason = verdict_c2(evidence)
    ch.glue("c2_reason", reason)
    across = c2_across_interval(evidence)
    ch.glue("c2_interval", checks.interval_text(across))
    c2 = ch.verdict(
        "C2",
        v,
        claim="skip connections prevent the collapse (Claim 3.1: parameterisations with "
        "||res(X_L)|| >= ||res(X)|| exist for any depth and arbitrarily small beta)",
        rule=RULE_C2,
        evidence=evidence | {"reason": reason, "across_interval": across},
    )
    ch.glue("c2_constructions", "All" if cons["exact_all"] else "Not all")
    return c2


def q1_evidence(front: list[dict], p) -> dict:
    """Q1's evidence from the frontier rows."""
    return {
        "tol": p.search_tol,
        "cells": [
            {
                "L": r["L"],
                "beta": r["beta"],
                "best": r["best"],
                "converged": r["converged"],
                "effort": r["effort"],
            }
            for r in front
        ],
        "search_d": p.search_d,
        "search_tokens": p.search_tokens,
    }


def judge_q1(ch, front: list[dict], ins: dict, p) -> str:
    """Record the Q1 verdict (:func:`verdict_q1`, the compounding sub-claim) from the frontier."""
    evidence = q1_evidence(front, p) | {"input_res_1inf": ins["res_1inf"]}
    v, reason = verdict_q1(evidence)
    ch.glue("q1_reason", reason)
    ch.glue("q1_old_rule", OLD_RULE_Q1)
    return ch.verdict(
        "Q1",
        v,
        claim="a tight lower bound on ||res(X_L)||/||res(X)|| with skip connections (open problem); "
        "sub-claim tested: on the search input, depth shrinks the residual no faster than compounding the "
        "shallowest network, rho(L, beta) >= rho(L0, beta)^(L/L0)",
        rule=RULE_Q1,
        evidence=evidence | {"reason": reason},
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
    import matplotlib.pyplot as plt

    betas = sorted({r["beta"] for r in rows})
    depths = sorted({r["L"] for r in rows})
    fig, axes = plt.subplots(1, len(betas), figsize=(3.3 * len(betas), 3.4), sharey=True, squeeze=False)
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
