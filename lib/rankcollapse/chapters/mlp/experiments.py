"""Chapter `mlp`, experiments: what is computed from the parameters, as plain data. The networks are the
library's SAN with its optional token-wise ReLU MLP (``SANConfig.mlp_hidden``); ``mlp_scale`` multiplies the
MLP's output weights and bias, so it multiplies the Lipschitz constant ``lambda`` exactly. Part (a), the
lambda estimators on cases with a known constant; parts (a, b), collapse curves, lambda and the corollary's
factor without skip connections (the corollary's setting), and their summaries; part (c), the sensitivity
trade (Q3), on two families in which the rank survives (shallow networks without skips, networks with
skips), each beside an identity-attention control.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...core import bounds
from ...core.lipschitz import jacobian_norm, mlp_lipschitz_local, mlp_lipschitz_upper
from ...core.metrics import norm_1inf, relative_residual, res
from ...core.san import SAN, SANConfig, random_tokens
from ...core.stats import spearman as _spearman

FLOOR = 1e-13  # r(X) is clipped here before taking logs: below it float64 round-off decides the value


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


GAMMA_TRUST = 1e-5  # a layer's a-priori gamma counts where its input has r above this (as in `collapse`)


def max_factor(layers: list[dict], r: list[float]) -> float | None:
    """The corollary's factor that a guarantee for the whole depth needs: the largest over layers of
    ``4 gamma beta H lambda / sqrt(d_qk)``, over the layers whose input has ``r`` above
    :data:`GAMMA_TRUST` (below it, gamma divides the logits' round-off by a residual near zero, and the
    collapse has happened already). None when no layer qualifies."""
    fs = [
        x["factor"]
        for x in layers
        if x.get("factor") is not None and math.isfinite(x["factor"]) and r[x["layer"] - 1] > GAMMA_TRUST
    ]
    return max(fs) if fs else None


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
                        "factor_max": max_factor(ls, out["r"]),
                        "cert_max": certificate(max_factor(ls, out["r"]), ls[0]["res_in"]),
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
                "cert_max": med("cert_max"),
                "certified_share": float(np.mean([r["cert1"] is not None and r["cert1"] < 0 for r in g])),
                "lambda_local": next((r["lambda_local"] for r in g if r["lambda_local"] is not None), None),
                "collapsed_share": float(np.mean([r["r"][-1] < 1e-3 for r in g])),
            }
        )
    return out


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
                    "r_L_ctl": med(lambda r: r["ctl_r_L"]),
                }
            )
        out[fam] = pts
    return out


def spearman(x, y) -> float:
    """The rank correlation of :mod:`rankcollapse.core.stats`, from three points on (the grid of scales is
    short), with NaN where it is undefined: this chapter's rules compare it with numbers, and NaN compares
    false."""
    r = _spearman(x, y, min_points=3)
    return float("nan") if r is None else r


def c3_control(p, device, log=print) -> list[dict]:
    """C3's control runs: SAN+MLP networks without skips as in parts (a, b), but ``c3_control_layers``
    deep (shallow enough that r(X_L) stays above round-off at all but the smallest lambdas), at the first
    attention weight scale, for every MLP multiplier and ``q3_seeds`` networks (the seeds and inputs of
    part (c)). Per network: lambda (product of spectral norms, mean over layers) and
    rank preservation ``A`` (:func:`preservation`)."""
    rows = []
    m = p.mlp_ratio * p.d_model
    ws, L = p.weight_scales[0], p.c3_control_layers
    for s in p.mlp_scales:
        for i in range(p.q3_seeds):
            sd = p.seed + 1000 * i
            cfg = SANConfig(L, p.n_heads, p.d_model, weight_scale=ws, mlp_hidden=m, mlp_scale=s)
            san = SAN.random(cfg, sd, device=device)
            X = random_tokens(p.n_tokens, p.d_model, sd + 1, device=device)
            with torch.no_grad():
                r = [float(relative_residual(h)) for h in san.forward(X)[0]]
            rows.append(
                {
                    "family": "c3_control",
                    "mlp_scale": s,
                    "seed": sd,
                    "lambda": float(np.mean([mlp_lipschitz_upper(san, l) for l in range(L)])),
                    "A": preservation(r),
                    "r_L": r[-1],
                }
            )
    log(f"C3 control ({L} layers): done")
    return rows


def q3_slowing(qrows: list[dict], family: str = "c3_control") -> dict:
    """C3's control: rank preservation ``A`` (:func:`preservation`, the mean over layers of log10 r) against
    lambda in the rows of one family (:func:`c3_control`; medians over networks per MLP multiplier, sorted
    by lambda), as :func:`slowing` gives it for the deep networks: the rise to the peak and the fall after
    it, ``A`` at the ends, the peak's multiplier and the smallest median r(X_L)."""
    pts = []
    for s in sorted({r["mlp_scale"] for r in qrows if r["family"] == family}):
        g = [r for r in qrows if r["family"] == family and r["mlp_scale"] == s]
        pts.append(
            {
                "mlp_scale": s,
                "lambda": float(np.median([r["lambda"] for r in g])),
                "A": float(np.median([r["A"] for r in g])),
                "r_L": float(np.median([r["r_L"] for r in g])),
            }
        )
    pts.sort(key=lambda q: q["lambda"])
    A = [q["A"] for q in pts]
    k = int(np.argmax(A))
    return {
        "lambda": [q["lambda"] for q in pts],
        "A": A,
        "peak_scale": pts[k]["mlp_scale"],
        "peak_lambda": pts[k]["lambda"],
        "rise": A[k] - A[0],
        "fall_after_peak": A[k] - A[-1],
        "rho_all": spearman([q["lambda"] for q in pts], A),
        "min_r_L": min(q["r_L"] for q in pts),
        "rise_above_floor": _rise_above_floor(pts, k),
    }


def _rise_above_floor(pts: list[dict], k: int) -> float | None:
    """The rise of ``A`` to its peak (index ``k``) from the first point whose median r(X_L) is at least
    1000 times the clip :data:`FLOOR` (so that no ``A`` it compares is set by the clip); None if that point
    is the peak or later."""
    j = next((i for i, q in enumerate(pts) if q["r_L"] >= 1e3 * FLOOR), None)
    return None if j is None or j >= k else pts[k]["A"] - pts[j]["A"]
