"""Chapter `collapse`: Theorems 2.2/2.3, the doubly exponential loss of rank in pure SANs.

Experiments (each returns plain data) and figures (each returns a matplotlib
figure) for ``chapters/collapse.md``. Generic pieces (float floor, exponent
regression, the bound along a trajectory) live in :mod:`rankcollapse.core.trajectory`; the a-priori gamma
(from the attention entries and the layer's input, never its output) in :mod:`rankcollapse.core.bounds`.

The certificate of Theorem 2.2 needs one gamma for all layers. It is fitted on *calibration inputs* (other
Gaussian inputs, at several input scales, through the same network: :func:`rankcollapse.core.bounds.
calibrated_gamma`) and tested on the held-out input the network is run on, at every layer, so it can fail:
gamma may be larger on the held-out input or at the residual sizes its deeper layers see.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..book import checks
from ..book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from ..core import bounds as B
from ..core.san import SAN, SANConfig, random_tokens
from ..core.trajectory import (
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

SCHEMA = Schema(
    "collapse",
    [
        Param(
            "n_tokens",
            "int",
            "tokens n per input",
            {"smoke": 16, "full": 32, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "n_layers", "int", "depth L of the curves", {"smoke": 8, "full": 12, "paper": 12}, low=1, high=96
        ),
        Param(
            "widths",
            "int_list",
            "model widths d of the curves",
            {"smoke": [16, 32], "full": [32, 64, 128], "paper": [768]},
            low=2,
            high=8192,
        ),
        Param(
            "heads",
            "int_list",
            "head counts H of the curves (d_qk and d_v are d // H)",
            {"smoke": [1, 4], "full": [1, 4, 8], "paper": [1, 12]},
            low=1,
            high=128,
        ),
        Param(
            "scales",
            "float_list",
            "weight scales s of the curves (entries N(0, s^2/fan_in))",
            {"smoke": [0.5, 1.0, 2.0], "full": [0.25, 0.5, 1.0, 2.0, 4.0], "paper": [0.5, 1.0, 2.0]},
            low=1e-6,
            high=100.0,
        ),
        Param(
            "seeds",
            "int",
            "random networks (and inputs) per configuration",
            {"smoke": 2, "full": 3, "paper": 3},
            low=1,
            high=1000,
        ),
        Param(
            "bias", "bool", "layers carry a bias 1b^T (it never changes res, but moves the token mean)", True
        ),
        Param(
            "floor_mult",
            "float",
            "a curve stops at the float floor: r(X) at most floor_mult times machine epsilon",
            100.0,
            low=1.0,
            high=1e6,
        ),
        Param(
            "ref_scale",
            "float",
            "weight scale of the configuration whose bound is shown layer by layer",
            1.0,
            low=1e-6,
            high=100.0,
        ),
        Param(
            "phase_scales",
            "float_list",
            "weight scales of the phase diagram",
            {
                "smoke": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
                "full": [0.125, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0],
                "paper": [0.125, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0],
            },
            low=1e-6,
            high=100.0,
        ),
        Param(
            "phase_dqk",
            "int_list",
            "query-key widths d_qk of the phase diagram",
            {"smoke": [1, 4, 16], "full": [1, 2, 4, 8, 16, 32, 64], "paper": [1, 4, 16, 64, 256]},
            low=1,
            high=8192,
        ),
        Param(
            "phase_d",
            "int",
            "model width of the phase diagram",
            {"smoke": 16, "full": 64, "paper": 768},
            low=2,
            high=8192,
        ),
        Param(
            "phase_heads",
            "int",
            "heads of the phase diagram",
            {"smoke": 1, "full": 1, "paper": 12},
            low=1,
            high=128,
        ),
        Param(
            "phase_layers",
            "int",
            "depth of the phase diagram",
            {"smoke": 6, "full": 12, "paper": 12},
            low=1,
            high=96,
        ),
        Param(
            "phase_seeds",
            "int",
            "networks per phase-diagram cell",
            {"smoke": 1, "full": 2, "paper": 3},
            low=1,
            high=1000,
        ),
        Param(
            "fit_inputs",
            "int",
            "calibration inputs per network on which the certificate's one gamma is fitted (never the input "
            "it is tested on)",
            {"smoke": 4, "full": 8, "paper": 8},
            low=1,
            high=1000,
        ),
        Param(
            "fit_input_scales",
            "float_list",
            "scales c of the calibration inputs c X (so the fit sees the small residuals deep layers see)",
            [1.0, 0.1, 0.01],
            low=1e-8,
            high=1e3,
        ),
        Param(
            "collapse_tol",
            "float",
            "a network has collapsed when r(X_L) is at most collapse_tol",
            1e-3,
            low=0.0,
            high=1.0,
        ),
    ],
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


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts)."""
    _check_heads(p.widths, p.heads)
    require_divisible(p, "phase_d", "phase_heads", "the phase diagram's d_v = phase_d / phase_heads")
    for name in ("phase_dqk", "phase_scales"):
        require_distinct(p, name, why="the phase diagram has one column per value")


# -- the certificate: one gamma fitted on calibration inputs ---------------------------------------
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


# -- (a, b, c) curves -----------------------------------------------------------------------------
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


def linear_reference(r: list[float], floor_at: int) -> list[float]:
    """The geometric (linear-rate) curve r_0 q^l with q the first layer's ratio r_1/r_0."""
    if floor_at < 2:
        return [r[0]]
    q = r[1] / r[0]
    return [r[0] * q**l for l in range(len(r))]


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


# -- the verdict --------------------------------------------------------------------------------------
RULE_C1 = (
    "In the decaying regime (runs whose residual falls over at least two consecutive layers above the "
    "float floor; the per-layer exponent is the slope of log res_l on log res_{l-1} over those layers "
    "only), with kappa the slope of log gamma_l on log res(X_{l-1}) over the same layers (gamma a priori, "
    "from the attention entries and the layer's input; gamma ~ res^kappa makes the one-layer bound "
    "~ res^(3+kappa)), and 'certified' meaning Theorem 2.2 with one gamma fitted on calibration inputs "
    "(never the tested input) and beta_max from the weights proves res -> 0 (sqrt(f) ||res X_0|| < 1), "
    "over the curves' runs (input as drawn, and scaled to half the largest certified input scale) and the "
    "phase diagram's runs: refuted if a certified run ends with r(X_L) > collapse_tol, or the median "
    "exponent is below 1.5, or the median kappa is below -1.5 (gamma grows as the residual shrinks so fast "
    "that the bound's rate is below 1.5); supported if at least one run is certified and every certified "
    "run collapses, the median exponent lies in [2, 4] and the median kappa is at least -0.5 (gamma "
    "bounded: the bound's rate at least 2.5); inconclusive otherwise (also without a decaying fit, a kappa "
    "or a certified run)."
)


def verdict_c1(e: dict) -> tuple[str, str]:
    """C1 from its evidence (see :data:`RULE_C1`). Keys: ``exponent_decaying_median``, ``decaying_fits``,
    ``decaying_scales``, ``kappa_median``, ``certified``, ``certified_not_collapsed``."""
    x, k = e["exponent_decaying_median"], e["kappa_median"]
    nc, nn = e["certified"], e["certified_not_collapsed"]
    where = "at random initialisation, weight scales " + ", ".join(f"{s:g}" for s in e["decaying_scales"])
    xs = "none" if x is None else f"{x:.2f}"
    ks = "none" if k is None else f"{k:.2f}"
    nums = (
        f"median decaying-regime exponent {xs} over {e['decaying_fits']} runs, median kappa {ks}, "
        f"{nc - nn} of {nc} certified runs collapsed"
    )
    if nn > 0:
        return "refuted", f"{nn} certified run(s) did not collapse ({nums}; {where})"
    if x is not None and x < 1.5:
        return "refuted", f"the per-layer exponent is below 1.5 ({nums}; {where})"
    if k is not None and k < -1.5:
        return (
            "refuted",
            f"gamma grows as the residual shrinks, the bound's rate below 1.5 ({nums}; {where})",
        )
    if x is None or k is None or nc == 0:
        return "inconclusive", f"the evidence is missing a decaying fit, a kappa or a certified run ({nums})"
    if 2.0 <= x <= 4.0 and k >= -0.5:
        return (
            "supported",
            f"cubic rate with bounded gamma and every certified run collapsed ({nums}; {where})",
        )
    return "inconclusive", f"exponent outside [2, 4] or kappa in [-1.5, -0.5) ({nums}; {where})"


VERDICTS = {"C1": verdict_c1}

RULE_C1_OLD = (
    "supported if every run that Theorem 2.2 certifies (beta from the weights, smallest valid gamma) "
    "collapses to r(X_L) <= collapse_tol and the median fitted per-layer exponent of those runs lies in "
    "[2, 4]; refuted if a certified run does not collapse or that median is below 1.5 (a linear rate); "
    "inconclusive otherwise"
)


def old_verdict_c1(s: dict) -> str:
    """The chapter's previous rule (:data:`RULE_C1_OLD`), on ``certified``, ``certified_collapsed`` and
    ``exponent_certified_median`` (its gamma was fitted on the run's own output, so its certificate was
    circular). Kept to show its verdict beside the new one."""
    if s["certified"] and s["certified_collapsed"] < s["certified"]:
        return "refuted"
    e = s["exponent_certified_median"]
    if e is None:
        return "inconclusive"
    if e < 1.5:
        return "refuted"
    return "supported" if 2.0 <= e <= 4.0 else "inconclusive"


def c1_evidence(summ: dict, ph: dict) -> dict:
    """The evidence dict of :func:`verdict_c1` from :func:`curves_summary` and :func:`phase_diagram`."""
    nc = summ["certified_drawn"] + summ["certified_scaled"] + ph["n_certified_runs"]
    ok = (
        summ["certified_drawn_collapsed"]
        + summ["certified_scaled_collapsed"]
        + ph["n_certified_runs_collapsed"]
    )
    return {
        "exponent_decaying_median": summ["exponent_decaying_median"],
        "exponent_decaying_min": summ["exponent_decaying_min"],
        "exponent_decaying_max": summ["exponent_decaying_max"],
        "decaying_fits": summ["decaying_fits"],
        "decaying_scales": summ["decaying_scales"],
        "kappa_median": summ["kappa_median"],
        "kappa_min": summ["kappa_min"],
        "certified": nc,
        "certified_not_collapsed": nc - ok,
        "certified_drawn": summ["certified_drawn"],
        "certified_scaled": summ["certified_scaled"],
        "certified_phase": ph["n_certified_runs"],
        "prediction_holds_share": summ["prediction_holds_share"],
        "gamma_star_bounds_share": summ["gamma_star_bounds_share"],
        "runs": summ["runs"],
        "collapsed": summ["collapsed"],
        "old_rule_verdict": old_verdict_c1(
            {
                "certified": summ["old_certified"],
                "certified_collapsed": summ["old_certified_collapsed"],
                "exponent_certified_median": summ["old_exponent_certified_median"],
            }
        ),
    }


def judge_c1(ch, summ: dict, ph: dict) -> str:
    """Build C1's evidence (:func:`c1_evidence`), decide it (:func:`verdict_c1`) and record it; glue the old
    rule's verdict on the same runs as ``old_rule_verdict``. Returns the verdict."""
    ev = c1_evidence(summ, ph)
    v, reason = verdict_c1(ev)
    ch.glue("old_rule_verdict", ev["old_rule_verdict"])
    ch.glue("verdict_reason", reason)
    return ch.verdict(
        "C1",
        v,
        claim="pure SANs lose rank doubly exponentially (cubic rate per layer)",
        rule=RULE_C1,
        evidence=ev | {"reason": reason},
    )


# -- recording ---------------------------------------------------------------------------------------
def _list(values, fmt: str) -> str:
    """A glued list of numbers, e.g. ``"8, 5, 3"``."""
    return ", ".join(format(v, fmt) for v in values)


def record_curves(ch, rows: list[dict], p) -> None:
    """Record part (a): the number of runs, the median depth to the float64 floor by weight scale and the
    number of collapsed runs; glue the float64 floor and the per-scale depths and scales as lists."""
    floor_depth = depth_to_floor(rows)
    checks.exact(ch, "runs", len(rows), why="the parameters set it (seeds x weight scales x widths)")
    ch.value(
        "depth_to_floor_by_scale",
        floor_depth,
        atol=1,
        note="median layer index; round-off may move a crossing by one",
    )
    ch.value(
        "collapsed_runs",
        sum(r["collapsed"] for r in rows),
        atol=1,
        note="count; a run on the threshold may flip",
    )
    ch.glue("floor64", float_floor(DTYPES["float64"], p.floor_mult))
    ch.glue("depth_to_floor_list", _list(floor_depth.values(), "g"))
    ch.glue("depth_to_floor_scales", ", ".join(floor_depth))


def record_exponents(ch, rows: list[dict]) -> dict:
    """Record part (b): per weight scale the decaying-regime exponent, the all-pairs slope (relabelled: a
    geometric sequence where the residual grows), the growing share and the growth factors; the overall
    medians. Glue lists for the prose. Returns :func:`curves_summary` (the verdict reads it)."""
    summ = curves_summary(rows)
    bs = by_scale(rows)
    keep = (
        "growing_share",
        "exponent_decaying_median",
        "decaying_fits",
        "slope_all_pairs_median",
        "growth_factor_median",
        "r_factor_median",
    )
    ch.value(
        "exponents_by_scale",
        {k: {kk: v[kk] for kk in keep} for k, v in bs.items()},
        rtol=0.02,
        atol=0.02,
        note="least-squares slopes and ratios of float64 logs; counts and shares exact unless a run flips",
    )
    ch.value(
        "exponent_decaying_median", summ["exponent_decaying_median"], rtol=0.02, note="median of slopes"
    )
    ch.value("decaying_fits", summ["decaying_fits"], atol=1, note="count")
    dec = {
        k: v["exponent_decaying_median"] for k, v in bs.items() if v["exponent_decaying_median"] is not None
    }
    ch.glue("exponent_list", _list(dec.values(), ".2f"))
    ch.glue("exponent_scales", ", ".join(dec))
    grow = {k: v for k, v in bs.items() if v["growing_share"] > 0.5}
    ch.glue("growing_scales", ", ".join(grow) if grow else "none")
    ch.glue("growth_list", _list([v["growth_factor_median"] for v in grow.values()], ".3g") if grow else "—")
    ch.glue("r_factor_list", _list([v["r_factor_median"] for v in grow.values()], ".3g") if grow else "—")
    ch.glue(
        "slope_grow_list",
        _list(
            [v["slope_all_pairs_median"] for v in grow.values() if v["slope_all_pairs_median"] is not None],
            ".2f",
        )
        if grow
        else "—",
    )
    ch.glue("decaying_scales", ", ".join(f"{s:g}" for s in summ["decaying_scales"]) or "none")
    return summ


def float_plateaus(rows) -> dict:
    """Where each dtype's curves bottom out: the median over runs that reached their floor of the smallest
    r."""
    out = {}
    for dname in DTYPES:
        m = [min(r[dname]["r"]) for r in rows if r[dname]["floor_at"] is not None]
        out[dname] = float(np.median(m)) if m else None
    return out


def record_floor(ch, rows: list[dict], p) -> None:
    """Record part (e): the float64 and float32 plateaus (only their order matters) and the median depth to
    the float32 floor by weight scale; glue the float32 floor."""
    plat = float_plateaus(rows)
    ch.value(
        "float64_plateau",
        plat["float64"],
        rtol=1.0,
        atol=1e-15,
        note="round-off level; only its order matters",
    )
    ch.value(
        "float32_plateau",
        plat["float32"],
        rtol=1.0,
        atol=1e-7,
        note="round-off level; only its order matters",
    )
    ch.value(
        "float32_floor_depth_by_scale",
        depth_to_floor(rows, "float32"),
        atol=1,
        note="median layer index; round-off may move a crossing by one",
    )
    ch.glue("floor32", float_floor(DTYPES["float32"], p.floor_mult))


# -- (c) the bound, a priori ------------------------------------------------------------------------
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


def record_bound(ch, rows: list[dict], b: dict) -> dict:
    """Record part (c): the reference network's per-layer a-priori gamma, beta, one-layer tightness and
    depth-bound gap; per scale the a-priori bound's tightness, kappa, gamma*'s share of layers it bounds and
    the depth prediction's record (:func:`by_scale`); overall the prediction's share of held-out
    (run, layer) pairs where it holds. Returns :func:`by_scale` for :func:`table_bound_by_scale`."""
    bs = by_scale(rows)
    summ = curves_summary(rows)
    ch.value(
        "ref_gamma_per_layer",
        [r["gamma"] for r in b["layers"]],
        rtol=1e-6,
        note="a-priori gamma: float64 norms of the attention and the input",
    )
    ch.value(
        "ref_gamma_min_per_layer",
        [r["gamma_min"] for r in b["layers"]],
        rtol=1e-6,
        note="the old, circular gamma (fitted on the output): float64 ratios of residuals above the floor",
    )
    ch.value(
        "ref_beta_per_layer", [r["beta"] for r in b["layers"]], rtol=1e-9, note="exact norms of the weights"
    )
    ch.value(
        "ref_log10_tightness",
        [math.log10(r["tightness"]) for r in b["layers"]],
        rtol=1e-6,
        atol=1e-6,
        note="log10 observed / a-priori one-layer bound, float64",
    )
    ch.value("ref_gamma_star", b["gamma_star"], rtol=1e-6, note="max over calibration forward passes")
    ch.value("ref_margin", b["margin"], rtol=1e-6, atol=1e-9, note="log10 sqrt(f) res0, float64")
    ch.value("ref_gamma_spread", b["gamma_spread"], rtol=1e-6, note="largest / smallest a-priori gamma")
    keep = (
        "kappa_median",
        "tightness_log10_median",
        "gamma_star_bounds_share",
        "prediction_holds_share",
        "prediction_informative_share",
        "prediction_gap_median",
        "certified",
        "log10_certified_input_scale_median",
    )
    ch.value(
        "bound_by_scale",
        {k: {kk: v[kk] for kk in keep} for k, v in bs.items()},
        rtol=1e-5,
        atol=1e-6,
        note="float64 logs, medians and shares; a count or share moves only if a run crosses",
    )
    ch.value(
        "prediction_pairs", summ["prediction_pairs"], atol=1, note="count of held-out (run, layer) pairs"
    )
    ch.value("prediction_holds_share", summ["prediction_holds_share"], atol=0.02, note="share of pairs")
    ch.value("gamma_star_bounds_share", summ["gamma_star_bounds_share"], atol=0.02, note="share of layers")
    ch.value("kappa_median", summ["kappa_median"], atol=0.02, note="median of per-run log-log slopes")
    if summ["kappa_growing"] is not None:
        ch.value("kappa_growing", summ["kappa_growing"], atol=0.02, note="pooled log-log slope")
    else:
        ch.glue("kappa_growing", math.nan)
    ch.value("certified_drawn", summ["certified_drawn"], atol=1, note="count")
    ch.value("certified_scaled", summ["certified_scaled"], atol=1, note="count")
    ch.value("certified_scaled_collapsed", summ["certified_scaled_collapsed"], atol=1, note="count")
    tight = [v["tightness_log10_median"] for v in bs.values() if v["tightness_log10_median"] is not None]
    ch.glue("tightness_min", -max(tight))
    ch.glue("tightness_max", -min(tight))
    ch.glue("ref_d", b["d"])
    ch.glue("ref_H", b["H"])
    ch.glue("ref_dqk", b["dqk"])
    ch.glue("ref_net_scale", b["scale"])
    ch.glue("old_certified", summ["old_certified"])
    return bs


def table_bound_by_scale(bs: dict) -> str:
    """Part (c)'s table, as Markdown, per weight scale (a dash where there is no value)."""
    head = (
        "| weight scale | growing (% runs) | exponent, decaying regime | all-pairs slope | κ (γ ~ res^κ) "
        "| one-layer bound, decades above | γ* bounds γ (% layers) | depth bound holds (% pairs) "
        "| informative (% pairs) | its gap, decades | certified runs | log10 certified input scale |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )

    def cell(v, fmt, mul=1.0):
        return "—" if v is None else format(mul * v, fmt)

    return head + "\n".join(
        f"| {k} | {cell(v['growing_share'], '.0f', 100)} | {cell(v['exponent_decaying_median'], '.2f')} | "
        f"{cell(v['slope_all_pairs_median'], '.2f')} | {cell(v['kappa_median'], '.2f')} | "
        f"{cell(v['tightness_log10_median'], '.2f', -1)} | "
        f"{cell(v['gamma_star_bounds_share'], '.0f', 100)} | "
        f"{cell(v['prediction_holds_share'], '.0f', 100)} | "
        f"{cell(v['prediction_informative_share'], '.0f', 100)} | "
        f"{cell(v['prediction_gap_median'], '.2f')} | {v['certified']} of {v['runs']} | "
        f"{cell(v['log10_certified_input_scale_median'], '.2f')} |"
        for k, v in bs.items()
    )


# -- (d) phase diagram ----------------------------------------------------------------------------
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


def record_phase(ch, ph: dict) -> None:
    """Record part (d): the counts of cells, collapsed, certified and certified-but-not-collapsed cells (a
    refutation if not 0: the certificate is no longer circular), per d_qk the largest certified and the
    largest collapsed weight scale and their ratio; glue lists for the prose."""
    checks.exact(ch, "phase_cells", ph["n_cells"], why="the parameters set it (the phase diagram's grid)")
    ch.value("phase_collapsed", ph["n_collapsed"], atol=1, note="count; a cell on the threshold may flip")
    ch.value("phase_certified", ph["n_certified"], atol=1, note="count; a cell on the threshold may flip")
    checks.exact(
        ch,
        "phase_certified_not_collapsed",
        ph["n_certified_not_collapsed"],
        why="the certificate is a bound: a certified cell collapses on any machine; not 0 is no rounding",
        note="count; not 0 would refute (the certificate's gamma is fitted on other inputs)",
    )
    ch.value(
        "phase_per_dqk",
        ph["per_dqk"],
        rtol=1e-3,
        atol=1e-9,
        note="interpolated scales in log space between grid points; float64 margins, exact norms",
    )
    ch.value(
        "phase_max_beta_factor_collapsed",
        ph["max_beta_factor_collapsed"],
        rtol=1e-6,
        note="exact norms of weights",
    )
    ch.value("phase_collapsed_beta_factor_ge1", ph["n_collapsed_beta_factor_ge1"], atol=1, note="count")
    pd = ph["per_dqk"]
    ch.glue("phase_dqk_list", ", ".join(pd))

    ch.glue("phase_scert_list", _censored_list(pd, "scale_certified", "certified_censored", "none"))
    ch.glue("phase_scoll_list", _censored_list(pd, "scale_collapsed", "collapsed_censored", "none"))
    ch.glue("phase_ratio_list", _censored_list(pd, "scale_ratio", "collapsed_censored"))
    ch.glue("phase_beta_ratio_list", _censored_list(pd, "beta_ratio", "collapsed_censored"))


def _censored_list(per_dqk: dict, key: str, censored: str, missing: str = "—") -> str:
    """``", "``-joined values ``v[key]`` of the phase diagram's rows: ``"≥ x"`` where ``v[censored]`` (the
    grid ended before the boundary), ``missing`` where there is no value."""
    return ", ".join(
        missing if v[key] is None else ("≥ " if v[censored] else "") + format(v[key], ".3g")
        for v in per_dqk.values()
    )


# -- figures ---------------------------------------------------------------------------------------
def fig_curves(rows, floor_mult):
    import matplotlib.pyplot as plt

    scales = sorted({r["scale"] for r in rows})
    fig, axes = plt.subplots(1, len(scales), figsize=(3.2 * len(scales), 3.4), sharey=True, squeeze=False)
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
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.7))
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
