"""Chapter `mlp`: Corollary 3.2, the tug-of-war between attention and the MLP's Lipschitz constant.

Experiments (plain data) and figures for ``chapters/mlp.md``. The networks are the
library's SAN with its optional token-wise ReLU MLP (``SANConfig.mlp_hidden``);
``mlp_scale`` multiplies the MLP's output weights and bias, so it multiplies the
Lipschitz constant ``lambda`` exactly. Parts (a, b): no skip connections (the corollary's setting).
Part (c), the sensitivity trade (Q3), uses two families in which the rank survives: shallow networks without
skips, and networks with skips, each beside an identity-attention control.

Verdicts: the pure functions ``verdict_c3`` and ``verdict_q3`` (listed in :data:`VERDICTS`) decide them from
plain evidence dicts by the rules :data:`RULE_C3` and :data:`RULE_Q3`; ``judge_*`` build the evidence.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..book import checks
from ..book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from ..core import bounds
from ..core.lipschitz import jacobian_norm, mlp_lipschitz_local, mlp_lipschitz_upper
from ..core.metrics import norm_1inf, relative_residual, res
from ..core.san import SAN, SANConfig, random_tokens
from ..core.stats import spearman as _spearman

# why a smoke verdict differs from the full profile's (shown next to the verdict at smoke;
# tests/test_records.py). Empty: since the smoke networks have full's width, tokens and depth (fewer seeds
# and a coarser lambda grid), both profiles reach the same verdicts.
SMOKE_VERDICT_NOTES: dict[str, str] = {}

SCHEMA = Schema(
    "mlp",
    [
        Param(
            "n_layers",
            "int",
            "depth L of the SAN+MLP networks",
            {"smoke": 12, "full": 12, "paper": 12},
            low=1,
            high=96,
        ),
        Param("n_heads", "int", "heads H per layer", {"smoke": 2, "full": 2, "paper": 4}, low=1, high=64),
        Param("d_model", "int", "width d", {"smoke": 32, "full": 32, "paper": 128}, low=2, high=4096),
        Param(
            "n_tokens", "int", "tokens n per input", {"smoke": 16, "full": 16, "paper": 64}, low=2, high=4096
        ),
        Param("mlp_ratio", "int", "MLP hidden width m: mlp_ratio times d", 4, low=1, high=16),
        Param(
            "mlp_scales",
            "float_list",
            "multipliers of the MLP's output weights (lambda scales with them exactly)",
            {
                "smoke": [0.25, 0.5, 1.0, 2.0, 4.0, 16.0, 64.0],
                "full": [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
                "paper": [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
            },
            low=1e-4,
            high=1e4,
        ),
        Param(
            "weight_scales",
            "float_list",
            "attention weight scales s (entries N(0, s^2/fan_in))",
            {"smoke": [1.0, 2.0], "full": [1.0, 2.0], "paper": [0.5, 1.0, 2.0]},
            low=1e-4,
            high=100.0,
        ),
        Param(
            "seeds",
            "int",
            "random networks (and inputs) per configuration",
            {"smoke": 3, "full": 10, "paper": 20},
            low=1,
            high=1000,
        ),
        Param(
            "q3_seeds",
            "int",
            "networks per lambda and family for the sensitivity measurement (Q3)",
            {"smoke": 3, "full": 6, "paper": 20},
            low=1,
            high=1000,
        ),
        Param(
            "q3_layers",
            "int",
            "depth of Q3's shallow family (SAN+MLP without skips), shallow enough that r(X_L) stays "
            "far above round-off",
            {"smoke": 2, "full": 2, "paper": 2},
            low=1,
            high=8,
        ),
        Param(
            "q3_dirs",
            "int",
            "random input directions per network for the residual sensitivity (Q3)",
            {"smoke": 4, "full": 8, "paper": 16},
            low=1,
            high=1000,
        ),
        Param(
            "jac_iters",
            "int",
            "power-iteration steps for Jacobian norms",
            {"smoke": 20, "full": 40, "paper": 100},
            low=1,
            high=1000,
        ),
        Param("collapse_tol", "float", "r(X_l) below this counts as collapsed", 1e-6, low=1e-15, high=0.5),
    ],
)

FLOOR = 1e-13  # r(X) is clipped here before taking logs: below it float64 round-off decides the value


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts)."""
    require_divisible(p, "d_model", "n_heads", "d_qk = d_v = d_model / n_heads")
    require_distinct(p, "weight_scales", "scale", "each scale's values are recorded under its name")
    if len(set(p.mlp_scales)) < 4:
        raise ParameterError(
            f"parameter 'mlp_scales' = {p.mlp_scales} needs at least 4 distinct values: the rank "
            "correlation of lambda and rank preservation is taken over them (core.stats.spearman)"
        )


# -- (a) the lambda estimators on cases with a known constant -----------------------------------
def lambda_check(d: int, m: int, seed: int, iters: int) -> dict:
    """Both estimators against exact Lipschitz constants.

    * linear activation: the MLP is ``y -> y W_1 W_2 + c``, lambda = ``||W_1 W_2||_2`` exactly;
    * ReLU with every unit active (``b_1`` large): the same map, the same exact lambda;
    * ReLU with ``W_1 = c I``, ``W_2 = I`` and positive inputs: lambda = ``c``.
    """
    out = {}
    for act in ("linear", "relu"):
        cfg = SANConfig(1, 1, d, mlp_hidden=m, mlp_act=act)
        san = SAN.random(cfg, seed)
        if act == "relu":
            san.b1 = san.b1 + 1e3  # every unit active at these inputs: the ReLU acts as the identity
        exact = float(torch.linalg.matrix_norm(san.W1[0] @ san.W2[0], ord=2))
        Y = random_tokens(8, d, seed + 1)
        out[f"{act}_exact"] = exact
        out[f"{act}_power"] = jacobian_norm(
            lambda Z: san.mlp(0, Z), Y, iters=iters * 10, seed=seed, tol=1e-12
        )
        out[f"{act}_product"] = mlp_lipschitz_upper(san, 0)
    c = 3.0
    cfg = SANConfig(1, 1, d, mlp_hidden=d, bias=False)
    eye = torch.eye(d, dtype=torch.float64)[None]
    base = SAN.random(SANConfig(1, 1, d, bias=False), seed)
    san = SAN(
        cfg,
        base.WQ,
        base.WK,
        base.WV,
        base.WO,
        base.b,
        W1=c * eye,
        b1=torch.zeros(1, d, dtype=torch.float64),
        W2=eye.clone(),
        b2=torch.zeros(1, d, dtype=torch.float64),
    )
    Y = random_tokens(8, d, seed + 2).abs()
    out["diag_exact"] = c
    out["diag_power"] = jacobian_norm(lambda Z: san.mlp(0, Z), Y, iters=iters * 10, seed=seed, tol=1e-12)
    out["diag_product"] = mlp_lipschitz_upper(san, 0)
    out["max_rel_err_power"] = max(
        abs(out[f"{k}_power"] - out[f"{k}_exact"]) / out[f"{k}_exact"] for k in ("linear", "relu", "diag")
    )
    out["max_rel_err_product_exact_cases"] = abs(out["diag_product"] - c) / c
    return out


def record_lambda_check(ch, chk: dict) -> None:
    """Record the estimator check (:func:`lambda_check`): the power iteration's worst error against exact
    constants, the product of norms where it is exact, and both for the linear MLP; glue the product's slack
    (product over exact) on the linear MLP."""
    ch.value(
        "lam_check_power_err",
        chk["max_rel_err_power"],
        atol=1e-6,
        note="power iteration against exact constants; converges to ~1e-10 in float64",
    )
    ch.value(
        "lam_check_product_err",
        chk["max_rel_err_product_exact_cases"],
        atol=1e-12,
        note="product of norms is exact when W1 W2 has aligned singular vectors",
    )
    ch.value("lam_check_linear_exact", chk["linear_exact"], rtol=1e-9, note="float64 SVD")
    ch.value("lam_check_linear_product", chk["linear_product"], rtol=1e-9, note="float64 SVD")
    ch.glue("lam_check_slack", chk["linear_product"] / chk["linear_exact"])


# -- (a, b) collapse curves, lambda and the corollary's factor ---------------------------------
def run_network(san: SAN, X: torch.Tensor, jac_iters: int, seed: int, local_lambda: bool = True) -> dict:
    """One forward pass by sublayers: r(X_l), lambda per layer (both estimators), beta, gamma and the
    factor.

    gamma is the a-priori one of :func:`rankcollapse.core.bounds.attention_gamma` (from the attention entries
    and the layer's input, never its output), so the factor can certify something; ``bound_ratio`` is the
    observed residual after the whole layer (attention and MLP) over ``factor * res_in^3``."""
    cfg = san.cfg
    Y = X
    r = [float(relative_residual(X))]
    rows = []
    with torch.no_grad():
        for l in range(cfg.n_layers):
            A, Z, P = san.sublayers(l, Y)
            r_in, r_attn, r_out = (float(norm_1inf(res(T))) for T in (Y, A, Z))
            lam_up = mlp_lipschitz_upper(san, l) if cfg.mlp_hidden else 1.0
            row = {
                "layer": l + 1,
                "beta": bounds.beta(san, l),
                "res_in": r_in,
                "res_attn": r_attn,
                "res_out": r_out,
                "lambda_upper": lam_up,
            }
            if r_in > 0 and math.isfinite(r_in):
                ga = bounds.attention_gamma(Y, san.WQ[l], san.WK[l], san.head_maps(l), P)
                g, b = float(ga["gamma"]), ga["beta"]
                row["beta"] = b
                row["gamma_attn"] = g
                row["factor"] = bounds.one_layer_factor(g, b, cfg.n_heads, cfg.dqk, lipschitz=lam_up)
                den = row["factor"] * r_in**3
                # <= 1: the corollary's inequality holds (a bound of 0, attention exactly rank one in
                # float64, is left out)
                row["bound_ratio"] = r_out / den if den > 0 else None
            rows.append(row)
            Y = Z
            r.append(float(relative_residual(Y)))
    if local_lambda and cfg.mlp_hidden:
        A, _, _ = san.sublayers(0, X)
        rows[0]["lambda_local"] = mlp_lipschitz_local(san, 0, A.detach(), iters=jac_iters, seed=seed)
    return {"r": r, "layers": rows}


def certificate(factor: float | None, res0: float) -> float | None:
    """``log10(sqrt(f) * ||res(X_0)||_{1,inf})``: negative where the one-layer factor ``f``, taken for every
    layer, proves collapse. The depth bound ``f^((3^L-1)/2) res0^(3^L) = (sqrt(f) res0)^(3^L) / sqrt(f)``
    goes to zero with depth iff ``sqrt(f) res0 < 1`` (as
    :func:`rankcollapse.core.trajectory.theorem_certifies`); ``f < 1`` is enough only when ``res0 <= 1``."""
    if factor is None or not (factor > 0 and res0 > 0):
        return None
    return 0.5 * math.log10(factor) + math.log10(res0)


def preservation(r: list[float]) -> float:
    """Rank preservation: the mean over layers 0..L of ``log10 max(r(X_l), 1e-13)`` (higher = more rank
    kept)."""
    return float(np.mean([math.log10(max(x, FLOOR)) for x in r]))


def depth_to_collapse(r: list[float], tol: float) -> int:
    """First layer ``l`` with ``r(X_l) < tol``; ``L + 1`` if none."""
    for l, x in enumerate(r):
        if x < tol:
            return l
    return len(r)


def sweep(p, device, log=print) -> list[dict]:
    """SAN (no MLP) and SAN+MLP for every weight scale, MLP scale and seed."""
    rows = []
    m = p.mlp_ratio * p.d_model
    for ws in p.weight_scales:
        for s in [0.0] + list(p.mlp_scales):
            for i in range(p.seeds):
                sd = p.seed + 1000 * i
                cfg = SANConfig(
                    p.n_layers,
                    p.n_heads,
                    p.d_model,
                    weight_scale=ws,
                    mlp_hidden=m if s > 0 else 0,
                    mlp_scale=s if s > 0 else 1.0,
                )
                san = SAN.random(cfg, sd, device=device)
                X = random_tokens(p.n_tokens, p.d_model, sd + 1, device=device)
                out = run_network(san, X, p.jac_iters, sd, local_lambda=(i == 0))
                ls = out["layers"]
                rows.append(
                    {
                        "weight_scale": ws,
                        "mlp_scale": s,
                        "seed": sd,
                        "r": out["r"],
                        "A": preservation(out["r"]),
                        "depth": depth_to_collapse(out["r"], p.collapse_tol),
                        "lambda": float(np.mean([x["lambda_upper"] for x in ls])) if s > 0 else 0.0,
                        "lambda_local": ls[0].get("lambda_local"),
                        "factor1": ls[0].get("factor"),
                        "gamma1": ls[0].get("gamma_attn"),
                        "beta1": ls[0]["beta"],
                        "bound_ratio1": ls[0].get("bound_ratio"),
                        "res0": ls[0]["res_in"],
                        "cert1": certificate(ls[0].get("factor"), ls[0]["res_in"]),
                        "factor2": ls[1].get("factor") if len(ls) > 1 else None,
                    }
                )
            log(f"weight scale {ws}, MLP scale {s}: done")
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Per (weight scale, MLP scale): medians over seeds and the geometric-mean curve r(X_l)."""
    out = []
    keys = sorted({(r["weight_scale"], r["mlp_scale"]) for r in rows})
    for ws, s in keys:
        g = [r for r in rows if r["weight_scale"] == ws and r["mlp_scale"] == s]
        R = np.log10(np.maximum(np.array([r["r"] for r in g]), FLOOR))
        med = lambda k: (  # noqa: E731
            float(np.median([r[k] for r in g if r[k] is not None]))
            if any(r[k] is not None for r in g)
            else None
        )
        out.append(
            {
                "weight_scale": ws,
                "mlp_scale": s,
                "lambda": med("lambda"),
                "A": med("A"),
                "depth": med("depth"),
                "curve_log10": R.mean(axis=0).tolist(),
                "factor1": med("factor1"),
                "factor2": med("factor2"),
                "gamma1": med("gamma1"),
                "beta1": med("beta1"),
                "bound_ratio1": med("bound_ratio1"),
                "res0": med("res0"),
                "cert1": med("cert1"),
                "certified_share": float(np.mean([r["cert1"] is not None and r["cert1"] < 0 for r in g])),
                "lambda_local": next((r["lambda_local"] for r in g if r["lambda_local"] is not None), None),
                "collapsed_share": float(np.mean([r["r"][-1] < 1e-3 for r in g])),
            }
        )
    return out


def record_curves(ch, rows: list[dict], summ: list[dict], p) -> None:
    """Record part (a): lambda of the reference configuration (first weight scale, multiplier 1, or else the
    first with an MLP), its local constant as a share of it, and the share of SAN+MLP networks that end with
    r(X_L) < 1e-3; glue the reference multiplier and the number of networks."""
    ref = (
        next(r for r in summ if r["weight_scale"] == p.weight_scales[0] and r["mlp_scale"] == 1.0)
        if 1.0 in p.mlp_scales
        else next(r for r in summ if r["mlp_scale"] > 0)
    )
    ch.value("lambda_ref", ref["lambda"], rtol=1e-9, note="spectral norms of seeded float64 weights")
    ch.value(
        "lambda_local_over_upper",
        ref["lambda_local"] / ref["lambda"],
        rtol=1e-3,
        note="power iteration stops at relative change 1e-6",
    )
    ch.value(
        "collapsed_share_all",
        float(np.mean([r["r"][-1] < 1e-3 for r in rows if r["mlp_scale"] > 0])),
        atol=0.0,
        note="share of SAN+MLP networks with r(X_L) < 1e-3; exact count",
    )
    ch.glue("ref_scale", ref["mlp_scale"])
    ch.glue("n_networks", len(rows))


def slowing(summary: list[dict], ws: float) -> dict:
    """Rank preservation against lambda at one weight scale: the rise up to its peak and the fall after
    it."""
    g = sorted(
        (r for r in summary if r["weight_scale"] == ws and r["mlp_scale"] > 0), key=lambda r: r["lambda"]
    )
    A = [r["A"] for r in g]
    k = int(np.argmax(A))
    return {
        "lambda": [r["lambda"] for r in g],
        "A": A,
        "peak_scale": g[k]["mlp_scale"],
        "peak_lambda": g[k]["lambda"],
        "rise": A[k] - A[0],
        "fall_after_peak": A[k] - A[-1],
        "depth_min_lambda": g[0]["depth"],
        "depth_peak": g[k]["depth"],
        "depth_max_lambda": g[-1]["depth"],
        "rho_upto_peak": spearman([r["lambda"] for r in g[: k + 1]], A[: k + 1]),
        "rho_all": spearman([r["lambda"] for r in g], A),
    }


def record_rate(ch, rows: list[dict], summ: list[dict], p) -> dict:
    """Record part (b): per attention weight scale (``ws1``, ``ws2``, ... in the names) rank preservation
    without MLP and at the smallest and largest lambda, its rise to the peak, the rank correlation with
    lambda, the peak's multiplier and the layers to collapse; at the first weight scale the corollary's
    factor at the smallest and largest lambda, the certificate ``log10 sqrt(f) ||res X_0||`` there, how many
    lambda values it certifies (and how many the misstated ``f < 1`` would); and the largest ratio of the
    observed residual to the one-layer bound. Glue the first and last weight scales and lambda at the ends
    and the peak of the grid.
    Returns :func:`slowing` per weight scale, which the table and the C3 verdict read."""
    slow = {ws: slowing(summ, ws) for ws in p.weight_scales}
    for ws, s in slow.items():
        tag = f"{ws:g}".replace(".", "p")
        base = next(r for r in summ if r["weight_scale"] == ws and r["mlp_scale"] == 0)
        ch.value(
            f"A_san_ws{tag}",
            base["A"],
            atol=0.3,
            note="mean log10 r; round-off moves collapsed layers slightly",
        )
        ch.value(f"A_min_lambda_ws{tag}", s["A"][0], atol=0.3, note="as above")
        ch.value(f"A_max_lambda_ws{tag}", s["A"][-1], atol=0.3, note="as above")
        ch.value(f"A_rise_ws{tag}", s["rise"], atol=0.4, note="difference of two A values")
        ch.value(
            f"rho_all_ws{tag}", s["rho_all"], atol=0.15, note="rank correlation over the grid; one swap ~0.1"
        )
        ch.value(f"peak_scale_ws{tag}", s["peak_scale"], note="grid point of the largest A")
        ch.value(f"depth_min_lambda_ws{tag}", s["depth_min_lambda"], atol=1, note="median layer index")
        ch.value(f"depth_max_lambda_ws{tag}", s["depth_max_lambda"], atol=1, note="median layer index")
    ws0 = p.weight_scales[0]
    mlps0 = sorted(
        (r for r in summ if r["weight_scale"] == ws0 and r["mlp_scale"] > 0), key=lambda r: r["lambda"]
    )
    ch.value("factor1_min_lambda", mlps0[0]["factor1"], rtol=1e-6, note="float64 norms")
    ch.value("factor1_max_lambda", mlps0[-1]["factor1"], rtol=1e-6, note="float64 norms")
    ch.value("factor2_max_lambda", mlps0[-1]["factor2"], rtol=1e-3, note="layer-2 residuals; float64")
    ch.value(
        "bound_ratio1_max",
        max(r["bound_ratio1"] for r in summ if r["mlp_scale"] > 0 and r["bound_ratio1"] is not None),
        rtol=1e-6,
        note="observed res_out / (factor res_in^3) at layer 1; <= 1 means the inequality holds",
    )
    # the guarantee: sqrt(f) ||res X_0|| < 1, not f < 1 (||res X_0|| is far above 1 for Gaussian tokens)
    ch.value("res0", mlps0[0]["res0"], rtol=1e-9, note="||res X_0||_{1,inf} of seeded Gaussian tokens")
    ch.value("cert1_min_lambda", mlps0[0]["cert1"], atol=1e-6, note="log10 sqrt(f) res0; float64 norms")
    ch.value("cert1_max_lambda", mlps0[-1]["cert1"], atol=1e-6, note="log10 sqrt(f) res0; float64 norms")
    certified = [r for r in mlps0 if r["cert1"] is not None and r["cert1"] < 0]
    checks.count(
        ch,
        "n_lambda_certified",
        len(certified),
        of=len(mlps0),
        note="lambda values whose median sqrt(f) res0 < 1 at the first weight scale",
    )
    checks.count(
        ch,
        "n_lambda_factor_below_1",
        sum(r["factor1"] is not None and r["factor1"] < 1 for r in mlps0),
        of=len(mlps0),
        note="lambda values whose median factor is < 1 (the misstated condition)",
    )
    ch.value(
        "certified_share_all",
        float(np.mean([r["cert1"] is not None and r["cert1"] < 0 for r in rows if r["mlp_scale"] > 0])),
        atol=0.0,
        note="share of SAN+MLP networks (all weight scales) with sqrt(f) res0 < 1; exact count",
    )
    ch.glue("n_lambda", len(mlps0))
    ch.glue(
        "lam_cert_max",
        f"{max(r['lambda'] for r in certified):.3g}" if certified else "no λ of the grid",
    )
    ch.glue("ws0", ws0)
    ch.glue("ws_last", p.weight_scales[-1])
    ch.glue("lam_min", mlps0[0]["lambda"])
    ch.glue("lam_max", mlps0[-1]["lambda"])
    ch.glue("lam_peak0", slow[ws0]["peak_lambda"])
    return slow


def table_slowing(summ: list[dict], slow: dict) -> str:
    """Part (b)'s table, as Markdown: per attention weight scale, rank preservation A without MLP and at the
    smallest, peak and largest lambda; those lambdas; the rise to the peak and the fall after it (decades);
    how many lambdas keep more rank than the same SAN without MLP; the rank correlation of lambda and A; and
    the layers to collapse at the smallest and largest lambda."""
    head = (
        "| weight scale | A without MLP | A at smallest λ | A at peak (multiplier) | A at largest λ "
        "| λ: smallest → peak → largest | rise to peak, fall after (decades) "
        "| λ values keeping more rank than without MLP | rank corr. (λ, A) "
        "| layers to collapse: smallest λ → largest λ |\n" + "|---" * 10 + "|\n"
    )
    lines = []
    for ws, s in slow.items():
        base = next(r["A"] for r in summ if r["weight_scale"] == ws and r["mlp_scale"] == 0)
        lam = s["lambda"]
        better = sum(a > base for a in s["A"])
        lines.append(
            f"| {ws:g} | {base:.2f} | {s['A'][0]:.2f} | {max(s['A']):.2f} (×{s['peak_scale']:g}) "
            f"| {s['A'][-1]:.2f} | {lam[0]:.3g} → {s['peak_lambda']:.3g} → {lam[-1]:.3g} "
            f"| {s['rise']:.2f}, {s['fall_after_peak']:.2f} | {better} of {len(s['A'])} "
            f"| {s['rho_all']:+.2f} | {s['depth_min_lambda']:g} → {s['depth_max_lambda']:g} |"
        )
    return head + "\n".join(lines)


RULE_C3 = (
    "per attention weight scale, rank preservation A against lambda: at every scale A rises by >= 1 "
    "decade to its peak and falls by <= 0.5 decade after it (a larger lambda, a slower collapse): "
    "supported; at some scale the largest lambda keeps >= 1 decade less rank than the smallest (a "
    "larger lambda, a faster collapse): refuted; otherwise (slowing over part of the range only): "
    "inconclusive"
)


def verdict_c3(evidence: dict) -> tuple[str, str]:
    """C3 by :data:`RULE_C3` from ``{"ws<s>": {rise, fall_after_peak, A_min_lambda, A_max_lambda}}`` (one
    entry per attention weight scale, as :func:`c3_evidence` builds it)."""
    desc = "; ".join(
        f"weight scale {k[2:]}: rise {s['rise']:.2f}, fall after peak {s['fall_after_peak']:.2f}, "
        f"A {s['A_min_lambda']:.2f} at the smallest lambda, {s['A_max_lambda']:.2f} at the largest"
        for k, s in evidence.items()
    )
    faster = [k[2:] for k, s in evidence.items() if s["A_min_lambda"] - s["A_max_lambda"] >= 1.0]
    if faster:
        return (
            "refuted",
            f"at weight scale {', '.join(faster)} the largest lambda keeps >= 1 decade less rank ({desc})",
        )
    if all(s["rise"] >= 1.0 and s["fall_after_peak"] <= 0.5 for s in evidence.values()):
        return "supported", f"at every weight scale a larger lambda keeps more rank ({desc})"
    return "inconclusive", f"a larger lambda keeps more rank over part of the range only ({desc})"


def c3_evidence(slow: dict) -> dict:
    """The C3 verdict's evidence from :func:`slowing` per weight scale."""
    return {
        f"ws{ws:g}": {
            "rise": s["rise"],
            "fall_after_peak": s["fall_after_peak"],
            "A_min_lambda": s["A"][0],
            "A_max_lambda": s["A"][-1],
            "peak_scale": s["peak_scale"],
            "rho_all": s["rho_all"],
        }
        for ws, s in slow.items()
    }


def judge_c3(ch, slow: dict) -> str:
    """Record the C3 verdict: :func:`verdict_c3` on :func:`c3_evidence`. Returns the verdict."""
    ev = c3_evidence(slow)
    v, reason = verdict_c3(ev)
    ch.glue("reason-C3", reason)
    return ch.verdict(
        "C3",
        v,
        claim="MLPs slow the collapse through their Lipschitz constant (Corollary 3.2)",
        rule=RULE_C3,
        evidence=ev | {"reason": reason},
    )


# -- (c) the sensitivity trade, where the rank survives ---------------------------------------------
# Q3's families. In the deep networks of (a, b) every SAN+MLP ends at round-off, so "rank preservation"
# there is decided by the clip at 1e-13 and a small sensitivity only says that the output ignores its input.
# Q3 is measured instead on two families in which r(X_L) stays far above round-off at every lambda:
#   * "shallow": SAN+MLP without skips (the corollary's setting), ``q3_layers`` layers;
#   * "skip": SAN+MLP with skips around both sublayers (x <- x + SA(x), x <- x + MLP(x)), ``n_layers``
#     layers.
# Each is paired with a control, the same weights with every attention matrix replaced by the identity
# (each token attends only to itself): the layers become token-wise, no mixing can remove rank, and
# whatever the sensitivity does with lambda there is the MLP's own, not a price of rank kept.
Q3_FAMILIES = ("shallow", "skip")
Q3_RANK_FLOOR = (
    1e-8  # a family counts only if every median r(X_L) is above this (far above float64 round-off)
)
Q3_GAIN = 0.5  # decades of rank kept: the least gain in log10 r(X_L)/r(X_0) that counts as rank bought
Q3_PRICE = 0.3  # decades of residual sensitivity beyond the control: a price (a factor of 2)
Q3_FREE = 0.1  # decades: at most this beyond the control is no price

RULE_Q3 = (
    "two families in which the rank survives: SAN+MLP without skips and q3_layers deep (shallow), and "
    "SAN+MLP with skips around both sublayers (skip), each beside a control with every attention matrix "
    "replaced by the identity. Per family, between the smallest and the largest lambda: the gain in rank "
    "kept, G = log10 r(X_L)/r(X_0) (medians over networks), and the price, the rise of log10 S beyond the "
    "control's rise, with S the residual sensitivity (RMS over random input directions u of "
    "(||res(J u)||_F / ||res F(X)||_F) / (||u||_F / ||X||_F)). A family buys rank if every median r(X_L) "
    f">= {Q3_RANK_FLOOR:g} and its gain is >= {Q3_GAIN:g} decade. Supported: some family buys rank, and in "
    f"every family that does the price is >= {Q3_PRICE:g} decade; refuted: some family buys rank, and in "
    f"every family that does the price is <= {Q3_FREE:g} decade; inconclusive: no family buys rank, or the "
    "prices are in between or disagree"
)

# The rule this chapter used before (on the deep networks of (a, b), with the clipped rank preservation A
# and the Jacobian norm relative to the whole output); its verdict was "supported" at both profiles.
RULE_Q3_OLD = (
    "over the lambda range where rank preservation rises (>= 3 grid points, a rise >= 1 decade): "
    "relative sensitivity rises too (rank corr >= 0.8 for both): supported; relative sensitivity "
    "does not rise (rank corr <= 0): refuted; otherwise, or no such range: inconclusive"
)


def tokenwise_forward(san: SAN, X: torch.Tensor) -> torch.Tensor:
    """The control network: ``san`` with every attention matrix replaced by the identity (each token attends
    only to itself), skips and MLPs as in ``san``. Returns ``X_L``."""
    cfg = san.cfg
    n = X.shape[-2]
    eye = torch.eye(n, dtype=X.dtype, device=X.device).expand(cfg.n_heads, n, n)
    Y = X
    for l in range(cfg.n_layers):
        A = san.mix(l, eye, Y) + san.b[l]
        if cfg.skip:
            A = A + Y
        Z = san.mlp(l, A)
        Y = Z + A if cfg.skip else Z
    return Y


def residual_sensitivity(F, X: torch.Tensor, n_dirs: int, seed: int) -> dict:
    """Sensitivity of a network ``F`` at ``X`` on a normalised output, averaged over random directions.

    For ``n_dirs`` seeded Gaussian unit directions ``u`` (Jacobian-vector products, exact derivatives):
    ``res``: RMS of ``(||res(J u)||_F / ||res F(X)||_F) / (||u||_F / ||X||_F)``, the relative change of the
    output's residual (the part that tells tokens apart) per relative input change; a network whose output is
    nearly the same token everywhere is not called robust by it. ``out``: the same with the whole output.
    ``r_out``: ``r(F(X))``. NaN where the output's residual is 0.
    """
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    with torch.no_grad():
        Y = F(X)
    nx = float(torch.linalg.matrix_norm(X))
    ry, ny = float(torch.linalg.matrix_norm(res(Y))), float(torch.linalg.matrix_norm(Y))
    a, b = [], []
    for _ in range(n_dirs):
        u = torch.randn(X.shape, generator=g, dtype=torch.float64).to(dtype=X.dtype, device=X.device)
        u = u / torch.linalg.vector_norm(u)
        _, Ju = torch.func.jvp(F, (X,), (u,))
        a.append(float(torch.linalg.matrix_norm(res(Ju))) * nx)
        b.append(float(torch.linalg.matrix_norm(Ju)) * nx)
    rms = lambda v, den: math.sqrt(float(np.mean(np.square(v)))) / den if den > 0 else math.nan  # noqa: E731
    return {"res": rms(a, ry), "out": rms(b, ny), "r_out": float(relative_residual(Y))}


def q3_sweep(p, device, log=print) -> list[dict]:
    """Per family (:data:`Q3_FAMILIES`), MLP scale and seed: the rank kept and the residual sensitivity of
    the network and of its identity-attention control (attention weight scale ``weight_scales[0]``)."""
    rows = []
    m = p.mlp_ratio * p.d_model
    ws = p.weight_scales[0]
    for fam in Q3_FAMILIES:
        L, skip = (p.q3_layers, False) if fam == "shallow" else (p.n_layers, True)
        for s in p.mlp_scales:
            for i in range(p.q3_seeds):
                sd = p.seed + 1000 * i
                cfg = SANConfig(
                    L, p.n_heads, p.d_model, weight_scale=ws, skip=skip, mlp_hidden=m, mlp_scale=s
                )
                san = SAN.random(cfg, sd, device=device)
                X = random_tokens(p.n_tokens, p.d_model, sd + 1, device=device)
                r0 = float(relative_residual(X))
                net = residual_sensitivity(lambda Z: san.forward(Z)[0][-1], X, p.q3_dirs, sd + 7)
                ctl = residual_sensitivity(lambda Z: tokenwise_forward(san, Z), X, p.q3_dirs, sd + 7)
                rows.append(
                    {
                        "family": fam,
                        "mlp_scale": s,
                        "seed": sd,
                        "lambda": float(np.mean([mlp_lipschitz_upper(san, l) for l in range(L)])),
                        "r0": r0,
                        "r_L": net["r_out"],
                        "sens_res": net["res"],
                        "sens_out": net["out"],
                        "ctl_r_L": ctl["r_out"],
                        "ctl_sens_res": ctl["res"],
                    }
                )
            log(f"Q3 {fam} family, MLP scale {s}: done")
    return rows


def _log10(x: float) -> float:
    return math.log10(x) if x > 0 and math.isfinite(x) else math.nan


def summarise_q3(rows: list[dict]) -> dict:
    """Per family, per MLP scale (sorted by lambda): medians over networks of ``r(X_L)``, the rank kept
    ``G = log10 r(X_L)/r(X_0)``, log10 of the residual and whole-output sensitivities, and the control's
    ``G`` and log10 residual sensitivity."""
    out = {}
    for fam in dict.fromkeys(r["family"] for r in rows):
        pts = []
        for s in sorted({r["mlp_scale"] for r in rows if r["family"] == fam}):
            g = [r for r in rows if r["family"] == fam and r["mlp_scale"] == s]
            med = lambda f: float(np.median([f(r) for r in g]))  # noqa: E731
            pts.append(
                {
                    "mlp_scale": s,
                    "lambda": med(lambda r: r["lambda"]),
                    "r_L": med(lambda r: r["r_L"]),
                    "G": med(lambda r: _log10(r["r_L"] / r["r0"])),
                    "S": med(lambda r: _log10(r["sens_res"])),
                    "S_out": med(lambda r: _log10(r["sens_out"])),
                    "G_ctl": med(lambda r: _log10(r["ctl_r_L"] / r["r0"])),
                    "S_ctl": med(lambda r: _log10(r["ctl_sens_res"])),
                }
            )
        out[fam] = pts
    return out


def q3_evidence(qsum: dict) -> dict:
    """The Q3 verdict's evidence per family: the smallest median ``r(X_L)``, the gain ``G`` and the rises of
    log10 S (network and control) from the smallest to the largest lambda, and the price (their
    difference); with the same for the whole-output sensitivity, the control's gain, and the rise of log10 S
    up to the first lambda where G is within 0.1 decade of its largest value (the end of the rank's rise),
    for the page."""
    ev = {}
    for fam, pts in qsum.items():
        a, b = pts[0], pts[-1]
        gmax = max(q["G"] for q in pts)
        plat = next(q for q in pts if q["G"] >= gmax - 0.1)  # where the rank kept stops rising
        ev[fam] = {
            "lambda_plateau": plat["lambda"],
            "rise_S_to_plateau": plat["S"] - a["S"],
            "min_r_L": min(q["r_L"] for q in pts),
            "gain": b["G"] - a["G"],
            "rise_S": b["S"] - a["S"],
            "rise_S_control": b["S_ctl"] - a["S_ctl"],
            "price": (b["S"] - a["S"]) - (b["S_ctl"] - a["S_ctl"]),
            "rise_S_out": b["S_out"] - a["S_out"],
            "gain_control": b["G_ctl"] - a["G_ctl"],
            "lambda_min": a["lambda"],
            "lambda_max": b["lambda"],
        }
    return {"families": ev}


def verdict_q3(evidence: dict) -> tuple[str, str]:
    """Q3 by :data:`RULE_Q3` from :func:`q3_evidence` (``{"families": {name: {min_r_L, gain, price}}}``)."""
    fams = evidence["families"]
    desc = "; ".join(
        f"{k}: min r(X_L) {f['min_r_L']:.2g}, gain {f['gain']:+.2f}, price {f['price']:+.2f} decades"
        for k, f in fams.items()
    )
    buying = {
        k: f
        for k, f in fams.items()
        if f["min_r_L"] >= Q3_RANK_FLOOR and f["gain"] >= Q3_GAIN and math.isfinite(f["price"])
    }
    if not buying:
        return "inconclusive", f"no family buys rank with lambda ({desc})"
    names = ", ".join(buying)
    if all(f["price"] >= Q3_PRICE for f in buying.values()):
        return "supported", f"rank bought by a larger lambda is paid for in sensitivity in {names} ({desc})"
    if all(f["price"] <= Q3_FREE for f in buying.values()):
        return (
            "refuted",
            f"rank bought by a larger lambda costs no sensitivity beyond the control in {names} ({desc})",
        )
    return "inconclusive", f"the price of the rank bought is neither clear nor absent in {names} ({desc})"


def record_q3(ch, qrows: list[dict], qsum: dict, ev: dict, p) -> None:
    """Record part (c): per family the smallest median r(X_L), the gain, the rises of residual sensitivity
    (network, control, whole output), the price and the control's gain; glue the depths and the number of
    networks."""
    for fam, f in ev["families"].items():
        ch.value(
            f"q3_{fam}_min_r_L",
            f["min_r_L"],
            rtol=1e-3,
            note="median relative residual at the output; far above round-off by the family's design",
        )
        for k in (
            "gain",
            "rise_S",
            "rise_S_control",
            "price",
            "rise_S_out",
            "gain_control",
            "rise_S_to_plateau",
        ):
            ch.value(
                f"q3_{fam}_{k}", f[k], atol=0.02, note="decades; differences of medians of smooth quantities"
            )
    ch.value(
        "q3_curves",
        {
            fam: [[q["mlp_scale"], q["G"], q["S"], q["S_out"], q["S_ctl"]] for q in pts]
            for fam, pts in qsum.items()
        },
        atol=0.02,
        glue=False,
        note="per family and multiplier: G, log10 S (residual), log10 S (whole output), control's log10 S",
    )
    ch.glue("q3_shallow_lambda_plateau", ev["families"]["shallow"]["lambda_plateau"])
    ch.glue("rule-Q3", RULE_Q3)
    ch.glue("rule-Q3-old", RULE_Q3_OLD)
    ch.glue("clip_floor", f"{FLOOR:.0e}")
    ch.glue("q3_layers", p.q3_layers)
    ch.glue("q3_skip_layers", p.n_layers)
    ch.glue("q3_total", len(qrows))
    ch.glue("q3_dirs", p.q3_dirs)


def judge_q3(ch, ev: dict) -> str:
    """Record the Q3 verdict: :func:`verdict_q3` on :func:`q3_evidence`."""
    v, reason = verdict_q3(ev)
    ch.glue("reason-Q3", reason)
    return ch.verdict(
        "Q3",
        v,
        claim="rank preservation by strong MLPs trades against robustness",
        rule=RULE_Q3,
        evidence=ev | {"reason": reason},
    )


# -- figures ------------------------------------------------------------------------------------------
def fig_curves(summary: list[dict], tol: float):
    import matplotlib.pyplot as plt

    wss = sorted({r["weight_scale"] for r in summary})
    fig, axes = plt.subplots(1, len(wss), figsize=(4.6 * len(wss), 3.6), squeeze=False)
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
    import matplotlib.pyplot as plt

    wss = sorted({r["weight_scale"] for r in summary})
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
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


def spearman(x, y) -> float:
    """The rank correlation of :mod:`rankcollapse.core.stats`, from three points on (the grid of scales is
    short), with NaN where it is undefined: this chapter's rules compare it with numbers, and NaN compares
    false."""
    r = _spearman(x, y, min_points=3)
    return float("nan") if r is None else r


VERDICTS = {"C3": verdict_c3, "Q3": verdict_q3}
