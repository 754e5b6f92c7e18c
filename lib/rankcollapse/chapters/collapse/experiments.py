"""What chapter `collapse` computes, from its parameters: random pure SANs run in float64 and float32 (the
curves, :func:`curves`, and the phase diagram, :func:`phase_diagram`), the certificate of Theorem 2.2 with
one gamma fitted on *calibration inputs* (other Gaussian inputs, at several input scales, through the same
network: :func:`rankcollapse.core.bounds.calibrated_gamma`) and tested on the held-out input the network is
run on, at every layer, so it can fail; and the summaries of those runs (:func:`by_scale`,
:func:`curves_summary`, :func:`bound_rows`) that the records, the figures and the verdict read. Generic
pieces (float floor, exponent regression, the bound along a trajectory) live in
:mod:`rankcollapse.core.trajectory`; the a-priori gamma in :mod:`rankcollapse.core.bounds`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...book.params import ParameterError
from ...core import bounds as B
from ...core.san import SAN, SANConfig, random_tokens
from ...core.trajectory import (
    certificate_margin,
    exponent_fit,
    exponent_fit_decaying,
    float_floor,
    floor_index,
    geometric_factor,
    log10_depth_bound,
    theorem_certifies,
    trajectory_attention,
)

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _check_heads(widths, heads):
    """Every head count divides every width: a curve's heads are d / H wide (d_qk = d_v = d / H)."""
    for d in widths:
        for H in heads:
            if d % H:
                raise ParameterError(
                    f"parameters 'widths' = {list(widths)} and 'heads' = {list(heads)}: every width must be "
                    f"divisible by every head count (d_qk = d_v = d / H; {d} % {H} != 0)"
                )


CAL_SEED = 500  # calibration inputs of network i use seeds seed + 1000 i + CAL_SEED + k (k < fit_inputs)


def gamma_trust(floor: float) -> float:
    """The relative residual above which a layer's a-priori gamma is signal: 100 times the square root of
    the float floor. gamma divides the attention's deviation, quadratic in the residual, by the residual
    squared, while the logits' round-off (eps times the logits of the token mean) does not shrink with the
    residual: at relative residual r the round-off in gamma is about eps / r^2, 1e-6 at this level (at the
    square root of the floor itself it would be 1%, enough to move a maximum between kernels)."""
    return 100.0 * math.sqrt(floor)


def calibrate(
    san: SAN, n: int, d: int, seed: int, fit_inputs: int, fit_scales, floor: float, device
) -> dict:
    """gamma* of ``san``: the largest a-priori layer gamma over the forward passes of ``fit_inputs``
    Gaussian inputs, each at every scale in ``fit_scales``
    (:func:`rankcollapse.core.bounds.calibrated_gamma`, layers whose input is above :func:`gamma_trust`).
    None of them is the input the certificate is then applied to."""
    Xs = torch.cat(
        [c * random_tokens(n, d, seed + CAL_SEED, batch=fit_inputs, device=device) for c in fit_scales]
    )
    return B.calibrated_gamma(san, Xs.to(san.dtype), gamma_trust(floor))


def certify(gamma_star: float, beta_max: float, H: int, dqk: int, res0: float) -> dict:
    """Theorem 2.2 with gamma* (fitted elsewhere) and the largest beta over layers (from the weights):
    ``factor`` = 4 gamma* beta_max H / sqrt(d_qk), ``margin`` = log10(sqrt(factor) res0) (certified iff < 0),
    and ``log10_input_scale``: log10 of the largest input scale c at which c X is certified (= -margin)."""
    if not (gamma_star == gamma_star and gamma_star > 0):
        return {"factor": math.nan, "margin": math.inf, "certified": False, "log10_input_scale": -math.inf}
    f = B.one_layer_factor(gamma_star, beta_max, H, dqk)
    m = certificate_margin(f, res0)
    return {"factor": f, "margin": m, "certified": m < 0, "log10_input_scale": -m}


def predict_depth(res: list[float], top: int, factor: float) -> list[dict]:
    """The depth bound with one factor (gamma*, beta_max) as a prediction of the residual at every layer
    ``l = 1..top-1`` above the float floor: per layer ``log10 bound - log10 actual`` (``gap``, >= 0 where it
    holds), whether it holds, and whether it is informative (below res(X_0), so it says more than the
    input)."""
    if not (factor == factor) or top < 2:
        return []
    lb = log10_depth_bound(factor, res[0], top - 1)
    out = []
    for l in range(1, top):
        gap = lb[l] - math.log10(res[l])
        out.append(
            {"layer": l, "gap": gap, "holds": gap >= -1e-9, "informative": lb[l] < math.log10(res[0])}
        )
    return out


def gamma_slope(layers: list[dict], segment: tuple[int, int]) -> float | None:
    """kappa: the slope of log gamma_l on log ||res(X_{l-1})|| over the layers of the decaying segment
    (layers ``a+1..b`` of :func:`rankcollapse.core.trajectory.decaying_segment`). gamma ~ res^kappa makes the
    a-priori one-layer bound ~ res^(3 + kappa): 0 is the theorem's bounded gamma (cubic), -2 a saturated
    attention whose deviation no longer shrinks with the residual (linear). None with fewer than two
    layers."""
    a, b = segment
    pts = [
        (math.log(x["res_in"]), math.log(x["gamma"]))
        for x in layers
        if a < x["layer"] <= b and x["gamma"] > 0
    ]
    if len(pts) < 2 or max(p[0] for p in pts) - min(p[0] for p in pts) < 1e-12:
        return None
    return float(np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)[0])


def _run(cfg, n, seed, dtype, device):
    san = SAN.random(cfg, seed, dtype=dtype, device=device)
    X = random_tokens(n, cfg.d_model, seed + 1, dtype=dtype, device=device)
    return san, X


def curves(
    n,
    L,
    widths,
    heads,
    scales,
    seeds,
    bias,
    floor_mult,
    collapse_tol,
    seed,
    device,
    fit_inputs=4,
    fit_scales=(1.0, 0.1, 0.01),
    log=print,
) -> list[dict]:
    """One row per (width, heads, scale, seed): the trajectory in float64 and float32, the exponent fits,
    the a-priori per-layer bounds, the certificate with gamma* fitted on calibration inputs, its depth
    prediction on the held-out input, and (where the input itself is not certified) the same input scaled
    to half the largest certified input scale, run again."""
    _check_heads(widths, heads)
    floor = float_floor(torch.float64, floor_mult)
    rows = []
    for d in widths:
        for H in heads:
            for s in scales:
                for i in range(seeds):
                    cfg = SANConfig(L, H, d, bias=bias, weight_scale=s)
                    row = {"d": d, "H": H, "scale": s, "seed": i, "dqk": cfg.dqk}
                    for dname, dt in DTYPES.items():
                        san, X = _run(cfg, n, seed + 1000 * i, dt, device)
                        tr = trajectory_attention(san, X)
                        tr["floor_at"] = floor_index(tr["r"], float_floor(dt, floor_mult))
                        hs, atts = tr.pop("_hidden"), tr.pop("_attention")
                        row[dname] = tr
                        if dname == "float64":
                            row["layers"] = B.layer_bounds(san, hs, atts)
                            san64, X64 = san, X
                    tr = row["float64"]
                    res, fa = tr["res"], tr["floor_at"]
                    top = fa if fa is not None else len(res)
                    above = [x for x in row["layers"] if x["layer"] < top]
                    # layers whose gamma is signal (input above the square root of the floor)
                    trusted = [x for x in above if tr["r"][x["layer"] - 1] > gamma_trust(floor)]
                    row["gamma_points"] = [(x["res_in"], x["gamma"]) for x in trusted]
                    row["fit"] = exponent_fit(res, fa)  # all pairs: the old, mislabelled regression
                    row["fit_dec"] = exponent_fit_decaying(res, fa)
                    row["growth"] = geometric_factor(res, fa)
                    row["r_ratio"] = geometric_factor(tr["r"], fa)
                    row["growing"] = len(res) > 1 and res[1] > res[0]
                    row["kappa"] = gamma_slope(trusted, row["fit_dec"]["segment"])
                    row["collapsed"] = tr["r"][-1] <= collapse_tol
                    cal = calibrate(san64, n, d, seed + 1000 * i, fit_inputs, fit_scales, floor, device)
                    beta_max = max(B.beta(san64, l) for l in range(L))
                    row["gamma_star"], row["beta_max"] = cal["gamma"], beta_max
                    row["cert"] = certify(cal["gamma"], beta_max, H, cfg.dqk, res[0])
                    row["pred"] = predict_depth(res, top, row["cert"]["factor"])
                    row["gamma_within"] = [x["gamma"] <= cal["gamma"] for x in trusted]
                    # the old, circular certificate (gamma fitted on this run's own output), for the old rule
                    row["cert_old"] = theorem_certifies(above, res[0], H, cfg.dqk)
                    row["scaled"] = None
                    if not row["cert"]["certified"] and math.isfinite(row["cert"]["margin"]):
                        c = 10.0 ** (row["cert"]["log10_input_scale"]) / 2.0
                        trs = trajectory_attention(san64, c * X64)
                        trs.pop("_hidden"), trs.pop("_attention")
                        fas = floor_index(trs["r"], floor)
                        tops = fas if fas is not None else len(trs["res"])
                        row["scaled"] = {
                            "input_scale": c,
                            "margin": certify(cal["gamma"], beta_max, H, cfg.dqk, trs["res"][0])["margin"],
                            "collapsed": trs["r"][-1] <= collapse_tol,
                            "r_L": trs["r"][-1],
                            "pred": predict_depth(trs["res"], tops, row["cert"]["factor"]),
                        }
                    rows.append(row)
            log(f"curves d={d} H={H} done")
    return rows


def depth_to_floor(rows, dtype="float64") -> dict:
    """Per scale: the median depth at which the curves reach the float floor (L+1 if never)."""
    out = {}
    for s in sorted({r["scale"] for r in rows}):
        fl = [
            r[dtype]["floor_at"] if r[dtype]["floor_at"] is not None else len(r[dtype]["r"])
            for r in rows
            if r["scale"] == s
        ]
        out[str(s)] = float(np.median(fl))
    return out


def _med(v):
    v = [x for x in v if x is not None and x == x]
    return float(np.median(v)) if v else None


def by_scale(rows) -> dict:
    """Per weight scale, over runs: the share whose residual grows in the first layer; the median
    decaying-segment exponent (runs with one) and how many runs have one; for the growing runs the median
    per-layer factor of ||res|| and of r (a geometric sequence: the all-pairs regression's slope, also
    given, is then 1 whatever the factor); the median kappa (gamma ~ res^kappa); the median a-priori
    one-layer tightness (log10 observed / bound, <= 0); gamma*'s share of layers it bounds; the depth
    prediction's share of (run, layer) pairs where it holds and where it is informative, and its median gap
    (decades) over the informative ones; certified runs; and the median log10 largest certified input
    scale."""
    out = {}
    for s in sorted({r["scale"] for r in rows}):
        rs = [r for r in rows if r["scale"] == s]
        grow = [r for r in rs if r["growing"]]
        tight = [
            math.log10(x["tightness"])
            for r in rs
            for x in r["layers"]
            if x["layer"] < (r["float64"]["floor_at"] or len(r["float64"]["res"])) and x["tightness"] > 0
        ]
        pred = [p for r in rs for p in r["pred"]]
        inf_ = [p["gap"] for p in pred if p["informative"]]
        within = [w for r in rs for w in r["gamma_within"]]
        out[str(s)] = {
            "runs": len(rs),
            "growing_share": len(grow) / len(rs),
            "exponent_decaying_median": _med([r["fit_dec"]["slope"] for r in rs]),
            "decaying_fits": sum(r["fit_dec"]["slope"] is not None for r in rs),
            "slope_all_pairs_median": _med([r["fit"]["slope"] for r in rs]),
            "growth_factor_median": _med([r["growth"] for r in grow]),
            "r_factor_median": _med([r["r_ratio"] for r in grow]),
            "kappa_median": _med([r["kappa"] for r in rs]),
            "tightness_log10_median": _med(tight),
            "gamma_star_bounds_share": float(np.mean(within)) if within else None,
            "prediction_holds_share": float(np.mean([p["holds"] for p in pred])) if pred else None,
            "prediction_informative_share": float(np.mean([p["informative"] for p in pred]))
            if pred
            else None,
            "prediction_gap_median": _med(inf_),
            "certified": sum(r["cert"]["certified"] for r in rs),
            "log10_certified_input_scale_median": _med(
                [r["cert"]["log10_input_scale"] for r in rs if math.isfinite(r["cert"]["log10_input_scale"])]
            ),
        }
    return out


def curves_summary(rows) -> dict:
    """Over all runs of the curves: the decaying-regime exponent and kappa (medians over runs that have
    them), the scales where most runs decay, the certified runs (input as drawn, and scaled into the
    certified region) and how many of them collapse, the depth prediction's record, and the old rule's
    summary (fitted, circular certificate; all-pairs slope)."""
    scaled = [r["scaled"] for r in rows if r["scaled"] is not None]
    cert = [r for r in rows if r["cert"]["certified"]]
    pred = [p for r in rows for p in r["pred"]] + [p for sc in scaled for p in sc["pred"]]
    bs = by_scale(rows)
    old_cert = [r for r in rows if r["cert_old"]["certified"]]
    e_old = [r["fit"]["slope"] for r in old_cert if r["fit"]["slope"] is not None]
    return {
        "runs": len(rows),
        "collapsed": sum(r["collapsed"] for r in rows),
        "exponent_decaying_median": _med([r["fit_dec"]["slope"] for r in rows]),
        "exponent_decaying_min": min(
            (r["fit_dec"]["slope"] for r in rows if r["fit_dec"]["slope"] is not None), default=None
        ),
        "exponent_decaying_max": max(
            (r["fit_dec"]["slope"] for r in rows if r["fit_dec"]["slope"] is not None), default=None
        ),
        "decaying_fits": sum(r["fit_dec"]["slope"] is not None for r in rows),
        "decaying_scales": [float(k) for k, v in bs.items() if v["decaying_fits"] * 2 > v["runs"]],
        "growing_scales": [float(k) for k, v in bs.items() if v["growing_share"] > 0.5],
        "kappa_median": _med([r["kappa"] for r in rows]),
        "kappa_min": min((r["kappa"] for r in rows if r["kappa"] is not None), default=None),
        "kappa_growing": pooled_kappa([r for r in rows if r["growing"]]),
        "certified_drawn": len(cert),
        "certified_drawn_collapsed": sum(r["collapsed"] for r in cert),
        "certified_scaled": len(scaled),
        "certified_scaled_collapsed": sum(sc["collapsed"] for sc in scaled),
        "prediction_pairs": len(pred),
        "prediction_holds_share": float(np.mean([p["holds"] for p in pred])) if pred else None,
        "gamma_star_bounds_share": float(np.mean([w for r in rows for w in r["gamma_within"]])),
        "old_certified": len(old_cert),
        "old_certified_collapsed": sum(r["collapsed"] for r in old_cert),
        "old_exponent_certified_median": _med(e_old),
    }


def pooled_kappa(rows) -> float | None:
    """The slope of log gamma on log ||res(X_{l-1})|| pooled over every trusted layer of ``rows`` (None with
    fewer than two distinct residuals): for the runs whose residual grows, -2 is an attention whose
    deviation from rank one has stopped growing with the residual (saturated)."""
    pts = [(math.log(x), math.log(g)) for r in rows for x, g in r["gamma_points"] if g > 0]
    if len(pts) < 2 or max(p[0] for p in pts) - min(p[0] for p in pts) < 1e-12:
        return None
    return float(np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)[0])


def float_plateaus(rows) -> dict:
    """Where each dtype's curves bottom out: the median over runs that reached their floor of the smallest
    r."""
    out = {}
    for dname in DTYPES:
        m = [min(r[dname]["r"]) for r in rows if r[dname]["floor_at"] is not None]
        out[dname] = float(np.median(m)) if m else None
    return out


def bound_rows(rows, ref_scale) -> dict:
    """The reference configuration (scale closest to ``ref_scale``, widest, most heads, seed 0): per layer
    beta, the a-priori gamma, the fitted (circular) gamma_min, the one-layer a-priori bound from the actual
    previous residual, and the depth bound with gamma* (fitted on calibration inputs) and beta_max."""
    cands = [r for r in rows if r["seed"] == 0]
    s = min({r["scale"] for r in cands}, key=lambda x: abs(x - ref_scale))
    ref = max((r for r in cands if r["scale"] == s), key=lambda r: (r["d"], r["H"]))
    res = ref["float64"]["res"]
    fa = ref["float64"]["floor_at"]
    top = fa if fa is not None else len(res)
    layers = [row for row in ref["layers"] if row["layer"] < top]
    f = ref["cert"]["factor"]
    return {
        "d": ref["d"],
        "H": ref["H"],
        "scale": s,
        "dqk": ref["dqk"],
        "res": res[:top],
        "layers": layers,
        "gamma_star": ref["gamma_star"],
        "beta_max": ref["beta_max"],
        "factor": f,
        "margin": ref["cert"]["margin"],
        "log10_bound": log10_depth_bound(f, res[0], top - 1),
        "log10_onestep": [math.log10(row["bound"]) for row in layers],
        "gamma_spread": max(x["gamma"] for x in layers) / min(x["gamma"] for x in layers),
    }


def _crossing(xs, ys) -> tuple[float | None, bool]:
    """The first x at which ``ys`` (sampled at increasing ``xs``, in log10 x) crosses from < 0 to >= 0,
    linearly interpolated in log10 x; ``(max xs, True)`` (censored) when ys < 0 everywhere, ``(None,
    False)`` when ys >= 0 already at the first x."""
    if ys[0] >= 0:
        return None, False
    for j in range(1, len(xs)):
        if ys[j] >= 0:
            a, b = math.log10(xs[j - 1]), math.log10(xs[j])
            t = -ys[j - 1] / (ys[j] - ys[j - 1])
            return 10 ** (a + t * (b - a)), False
    return xs[-1], True


def phase_diagram(
    n,
    L,
    d,
    H,
    scales,
    dqks,
    seeds,
    bias,
    collapse_tol,
    floor_mult,
    seed,
    device,
    fit_inputs=4,
    fit_scales=(1.0, 0.1, 0.01),
    log=print,
) -> dict:
    """Observed collapse and the theorem's certificate (gamma* from calibration inputs, beta_max from the
    weights) over (weight scale, d_qk), float64.

    Per cell (median over seeds): ``r(X_L)``, collapsed, the certificate margin log10(sqrt(f) res0),
    certified, ``4 beta H / sqrt(d_qk)`` and gamma*. Per d_qk: the largest weight scale the theorem
    certifies (where the median margin crosses 0) and the largest weight scale up to which every smaller one
    collapses (where log10 r(X_L) / collapse_tol crosses 0), both interpolated in log scale between grid
    points, the latter censored at the grid's top when all collapse; their ratio, and its fourth power, the
    ratio of beta (beta ~ s^4 for one seed).
    """
    floor = float_floor(torch.float64, floor_mult)
    cells, n_cert, n_cert_ok = [], 0, 0
    for q in dqks:
        for s in scales:
            rL, coll, marg, fac, gam = [], [], [], [], []
            for i in range(seeds):
                cfg = SANConfig(L, H, d, d_qk=q, bias=bias, weight_scale=s)
                san, X = _run(cfg, n, seed + 1000 * i, torch.float64, device)
                tr = trajectory_attention(san, X)
                tr.pop("_hidden"), tr.pop("_attention")
                beta_max = max(B.beta(san, l) for l in range(L))
                cal = calibrate(san, n, d, seed + 1000 * i, fit_inputs, fit_scales, floor, device)
                c = certify(cal["gamma"], beta_max, H, q, tr["res"][0])
                rL.append(max(tr["r"][-1], floor))
                coll.append(tr["r"][-1] <= collapse_tol)
                marg.append(c["margin"])
                fac.append(4 * beta_max * H / math.sqrt(q))
                gam.append(cal["gamma"])
                n_cert += c["certified"]
                n_cert_ok += c["certified"] and coll[-1]
            cells.append(
                {
                    "scale": s,
                    "dqk": q,
                    "r_L": float(np.median(rL)),
                    "collapsed": sum(coll) * 2 > seeds,
                    "margin": float(np.median(marg)),
                    "certified": float(np.median(marg)) < 0,
                    "beta_factor": float(np.median(fac)),
                    "gamma": float(np.median(gam)),
                }
            )
        log(f"phase diagram d_qk={q} done")
    per_dqk = {}
    for q in dqks:
        cs = sorted((c for c in cells if c["dqk"] == q), key=lambda c: c["scale"])
        xs = [c["scale"] for c in cs]
        s_cert, cert_cens = _crossing(xs, [c["margin"] for c in cs])
        s_coll, coll_cens = _crossing(xs, [math.log10(c["r_L"] / collapse_tol) for c in cs])
        ratio = s_coll / s_cert if s_cert and s_coll else None
        per_dqk[str(q)] = {
            "scale_certified": s_cert,
            "certified_censored": cert_cens,
            "scale_collapsed": s_coll,
            "collapsed_censored": coll_cens,
            "scale_ratio": ratio,
            "beta_ratio": ratio**4 if ratio else None,
        }
    coll_f = [c["beta_factor"] for c in cells if c["collapsed"]]
    return {
        "cells": cells,
        "per_dqk": per_dqk,
        "n_cells": len(cells),
        "n_collapsed": sum(c["collapsed"] for c in cells),
        "n_certified": sum(c["certified"] for c in cells),
        "n_certified_not_collapsed": sum(c["certified"] and not c["collapsed"] for c in cells),
        "n_certified_runs": n_cert,
        "n_certified_runs_collapsed": n_cert_ok,
        "max_beta_factor_collapsed": max(coll_f) if coll_f else None,
        "n_collapsed_beta_factor_ge1": sum(f >= 1 for f in coll_f),
    }


def skip_control(
    n,
    L,
    widths,
    heads,
    scales,
    seeds,
    bias,
    floor_mult,
    collapse_tol,
    seed,
    device,
    fit_inputs=4,
    fit_scales=(1.0, 0.1, 0.01),
    log=print,
) -> list[dict]:
    """C1's control: the curves' networks (the same weights, the same held-out and calibration inputs) with
    a skip connection around every attention layer, ``X <- X + SA(X)``, float64. Per run, what C1's rule
    reads, computed as for the curves (:func:`curves`): the decaying-segment exponent, kappa (the a-priori
    gamma of the attention sublayer on the layer's input), collapse, and the certificate of Theorem 2.2
    with gamma* fitted on calibration inputs and beta_max from the weights, on the input as drawn and, where
    it is not certified, scaled to half the largest certified input scale. The theorem is for networks
    without skips; a certified skip network that does not collapse is what the rule must read as a
    refutation, which is what makes it a control."""
    _check_heads(widths, heads)
    floor = float_floor(torch.float64, floor_mult)
    out = []
    for d in widths:
        for H in heads:
            for s in scales:
                for i in range(seeds):
                    cfg = SANConfig(L, H, d, bias=bias, weight_scale=s, skip=True)
                    san, X = _run(cfg, n, seed + 1000 * i, torch.float64, device)
                    tr = trajectory_attention(san, X)
                    hs, atts = tr.pop("_hidden"), tr.pop("_attention")
                    res, r = tr["res"], tr["r"]
                    fa = floor_index(r, floor)
                    top = fa if fa is not None else len(res)
                    trusted = []
                    for l in range(min(top, L + 1) - 1):
                        if r[l] <= gamma_trust(floor):
                            continue
                        g = B.attention_gamma(hs[l], san.WQ[l], san.WK[l], san.head_maps(l), atts[l])
                        gam = float(g["gamma"])
                        if math.isfinite(gam):
                            trusted.append({"layer": l + 1, "res_in": float(g["res_in"]), "gamma": gam})
                    fit_dec = exponent_fit_decaying(res, fa)
                    cal = calibrate(san, n, d, seed + 1000 * i, fit_inputs, fit_scales, floor, device)
                    beta_max = max(B.beta(san, l) for l in range(L))
                    cert = certify(cal["gamma"], beta_max, H, cfg.dqk, res[0])
                    row = {
                        "d": d,
                        "H": H,
                        "scale": s,
                        "seed": i,
                        "r_L": r[-1],
                        "collapsed": r[-1] <= collapse_tol,
                        "exponent": fit_dec["slope"],
                        "kappa": gamma_slope(trusted, fit_dec["segment"]),
                        "growth": geometric_factor(res, fa),
                        "certified": cert["certified"],
                        "scaled": None,
                    }
                    if not cert["certified"] and math.isfinite(cert["margin"]):
                        c = 10.0 ** (cert["log10_input_scale"]) / 2.0
                        trs = trajectory_attention(san, c * X)
                        trs.pop("_hidden"), trs.pop("_attention")
                        row["scaled"] = {
                            "input_scale": c,
                            "collapsed": trs["r"][-1] <= collapse_tol,
                            "r_L": trs["r"][-1],
                            "r_0": trs["r"][0],
                        }
                    out.append(row)
            log(f"skip control d={d} H={H} done")
    return out


def skip_control_summary(ctl: list[dict]) -> dict:
    """Over :func:`skip_control`'s runs, the evidence keys of C1's rule (as :func:`curves_summary` gives
    them for the curves): the median decaying-segment exponent and kappa, the scales where most runs have
    a decaying segment, and the certified runs (as drawn and scaled) and how many of them collapse; also
    the collapsed runs and the median r(X_L) of the scaled runs over their r(X_0) (1: the skip keeps the
    rank)."""
    scales = sorted({r["scale"] for r in ctl})
    dec = [
        s
        for s in scales
        if 2 * sum(r["exponent"] is not None for r in ctl if r["scale"] == s)
        > sum(r["scale"] == s for r in ctl)
    ]
    scaled = [r["scaled"] for r in ctl if r["scaled"] is not None]
    cert = [r for r in ctl if r["certified"]]
    kept = [sc["r_L"] / sc["r_0"] for sc in scaled if sc["r_0"] > 0]
    return {
        "runs": len(ctl),
        "collapsed": sum(r["collapsed"] for r in ctl),
        "exponent_decaying_median": _med([r["exponent"] for r in ctl]),
        "decaying_fits": sum(r["exponent"] is not None for r in ctl),
        "decaying_scales": [float(s) for s in dec],
        "kappa_median": _med([r["kappa"] for r in ctl]),
        "certified_drawn": len(cert),
        "certified_drawn_collapsed": sum(r["collapsed"] for r in cert),
        "certified_scaled": len(scaled),
        "certified_scaled_collapsed": sum(sc["collapsed"] for sc in scaled),
        "scaled_r_kept_median": _med(kept),
    }
