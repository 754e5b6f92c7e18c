"""Chapter `collapse`: Theorems 2.2/2.3, the doubly exponential loss of rank in pure SANs.

Experiments (each returns plain data) and figures (each returns a matplotlib
figure) for ``chapters/collapse.md``. Generic pieces (float floor, exponent
regression, the bound along a trajectory) live in :mod:`rankcollapse.core.trajectory`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..book.params import Param, Schema
from ..core import bounds as B
from ..core.san import SAN, SANConfig, random_tokens
from ..core.trajectory import (
    bound_along_depth,
    exponent_fit,
    float_floor,
    floor_index,
    theorem_certifies,
    trajectory,
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
    from ..book.params import ParameterError

    for d in widths:
        for H in heads:
            if d // H < 1:
                raise ParameterError(
                    f"parameter 'heads' = {H} is not allowed with width {d}: d // H must be >= 1"
                )


# -- (a, b) curves ------------------------------------------------------------------------------
def curves(
    n, L, widths, heads, scales, seeds, bias, floor_mult, collapse_tol, seed, device, log=print
) -> list[dict]:
    """One row per (width, heads, scale, seed): the trajectory in float64 and float32, and the fit."""
    _check_heads(widths, heads)
    rows = []
    for d in widths:
        for H in heads:
            for s in scales:
                for i in range(seeds):
                    cfg = SANConfig(L, H, d, bias=bias, weight_scale=s)
                    row = {"d": d, "H": H, "scale": s, "seed": i, "dqk": cfg.dqk}
                    for dname, dt in DTYPES.items():
                        san = SAN.random(cfg, seed + 1000 * i, dtype=dt, device=device)
                        X = random_tokens(n, d, seed + 1000 * i + 1, dtype=dt, device=device)
                        tr = trajectory(san, X)
                        tr["floor_at"] = floor_index(tr["r"], float_floor(dt, floor_mult))
                        row[dname] = tr
                        if dname == "float64":
                            row["layers"] = B.layer_gammas(san, tr.pop("_hidden"))
                        else:
                            tr.pop("_hidden")
                    row["fit"] = exponent_fit(row["float64"]["res"], row["float64"]["floor_at"])
                    fa = row["float64"]["floor_at"]
                    row["cert"] = theorem_certifies(
                        [x for x in row["layers"] if fa is None or x["layer"] < fa],
                        row["float64"]["res"][0],
                        H,
                        cfg.dqk,
                    )
                    row["collapsed"] = row["float64"]["r"][-1] <= collapse_tol
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


def exponents_by_scale(rows) -> dict:
    """Per scale: median over runs of the fitted per-layer exponent (runs with a fit only)."""
    out = {}
    for s in sorted({r["scale"] for r in rows}):
        e = [r["fit"]["slope"] for r in rows if r["scale"] == s and r["fit"]["slope"] is not None]
        out[str(s)] = float(np.median(e)) if e else None
    return out


def local_exponents(rows) -> list[float]:
    """Every layer's local exponent log(res_l / res_{l-1}) / ... : slope between consecutive pairs.

    For layer l (both l-2..l above the floor),
    ``(log res_l - log res_{l-1}) / (log res_{l-1} - log res_{l-2})`` is undefined; instead we use
    ``log res_l / log res_{l-1}`` on residuals normalised by ``res_0``
    (so a linear rate q gives l/(l-1) -> 1 and a cubic rate gives -> 3).
    """
    out = []
    for r in rows:
        res, fa = r["float64"]["res"], r["float64"]["floor_at"]
        top = fa if fa is not None else len(res)
        for l in range(2, top):
            a, b = math.log(res[l - 1] / res[0]), math.log(res[l] / res[0])
            if a < -1.0:  # only once the residual has dropped by e: the small-residual regime
                out.append(b / a)
    return out


def c1_summary(rows) -> dict:
    """What the C1 verdict is decided on: collapse and fitted exponents, over all runs and the certified
    ones."""
    cert = [r for r in rows if r["cert"]["certified"]]
    e_cert = [r["fit"]["slope"] for r in cert if r["fit"]["slope"] is not None]
    e_all = [r["fit"]["slope"] for r in rows if r["fit"]["slope"] is not None]
    return {
        "runs": len(rows),
        "collapsed": sum(r["collapsed"] for r in rows),
        "certified": len(cert),
        "certified_collapsed": sum(r["collapsed"] for r in cert),
        "exponent_certified_median": float(np.median(e_cert)) if e_cert else None,
        "exponent_certified_min": float(min(e_cert)) if e_cert else None,
        "exponent_certified_max": float(max(e_cert)) if e_cert else None,
        "exponent_all_median": float(np.median(e_all)) if e_all else None,
        "fits_certified": len(e_cert),
    }


def c1_verdict(s: dict) -> str:
    """supported: every certified run collapses and their median exponent lies in [2, 4];
    refuted: a certified run does not collapse, or that median is below 1.5 (a linear rate);
    inconclusive: otherwise (also when no run is certified or has a fit)."""
    if s["certified"] and s["certified_collapsed"] < s["certified"]:
        return "refuted"
    e = s["exponent_certified_median"]
    if e is None:
        return "inconclusive"
    if e < 1.5:
        return "refuted"
    return "supported" if 2.0 <= e <= 4.0 else "inconclusive"


def _list(values, fmt: str) -> str:
    """A glued list of numbers, e.g. ``"8, 5, 3"``."""
    return ", ".join(format(v, fmt) for v in values)


def record_curves(ch, rows: list[dict], p) -> None:
    """Record part (a): the number of runs, the median depth to the float64 floor by weight scale and the
    number of collapsed runs; glue the float64 floor and the per-scale depths and scales as lists."""
    floor_depth = depth_to_floor(rows)
    ch.value("runs", len(rows))
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
    """Record part (b): the median fitted per-layer exponent by weight scale, over the certified runs and
    over all runs, and the number of certified runs; glue the per-scale medians (scales with a fit) and
    their scales as lists. Returns the C1 summary (:func:`c1_summary`), which the verdict reads."""
    summ = c1_summary(rows)
    by_scale = exponents_by_scale(rows)
    ch.value(
        "exponent_by_scale",
        by_scale,
        rtol=0.02,
        atol=0.02,
        note="least-squares slopes of float64 logs; stable to round-off, 2% for BLAS differences",
    )
    ch.value(
        "exponent_certified_median",
        summ["exponent_certified_median"],
        rtol=0.02,
        note="median of fitted slopes",
    )
    ch.value("exponent_all_median", summ["exponent_all_median"], rtol=0.02, note="median of fitted slopes")
    ch.value("certified_runs", summ["certified"], atol=1, note="count")
    fitted = {k: v for k, v in by_scale.items() if v is not None}
    ch.glue("exponent_list", _list(fitted.values(), ".2f"))
    ch.glue("exponent_scales", ", ".join(fitted))
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


# -- (c) the bound -------------------------------------------------------------------------------
def bound_rows(rows, ref_scale) -> dict:
    """The reference configuration (scale closest to ``ref_scale``, widest, most heads, seed 0): per layer
    beta, smallest gamma, and the Theorem 2.2 bound with one gamma for all layers against the actual
    residual."""
    cands = [r for r in rows if r["seed"] == 0]
    s = min({r["scale"] for r in cands}, key=lambda x: abs(x - ref_scale))
    ref = max((r for r in cands if r["scale"] == s), key=lambda r: (r["d"], r["H"]))
    res = ref["float64"]["res"]
    fa = ref["float64"]["floor_at"]
    top = fa if fa is not None else len(res)
    layers = [row for row in ref["layers"] if row["layer"] < top]
    b = bound_along_depth(layers, res[0], ref["H"], ref["dqk"])
    return {
        "d": ref["d"],
        "H": ref["H"],
        "scale": s,
        "dqk": ref["dqk"],
        "res": res[:top],
        "layers": layers,
        **b,
    }


def bound_summary(rows) -> dict:
    """Per scale, over runs: the depth bound (one beta, one gamma) at the last layer above the floor, in
    orders of magnitude above the actual residual (median), and the share of runs where it is vacuous
    (above res(X_0))."""
    out = {}
    for s in sorted({r["scale"] for r in rows}):
        gaps, vac = [], []
        for r in rows:
            if r["scale"] != s:
                continue
            res, fa = r["float64"]["res"], r["float64"]["floor_at"]
            top = fa if fa is not None else len(res)
            layers = [x for x in r["layers"] if x["layer"] < top]
            if not layers:
                continue
            b = bound_along_depth(layers, res[0], r["H"], r["dqk"])
            gaps.append(b["log10_bound"][-1] - math.log10(res[top - 1]))
            vac.append(b["log10_bound"][-1] >= math.log10(res[0]))
        out[str(s)] = {
            "log10_gap_median": float(np.median(gaps)) if gaps else None,
            "vacuous_share": float(np.mean(vac)) if vac else None,
        }
    return out


def gamma_table(rows) -> dict:
    """Per scale: median over runs and layers (above the floor) of gamma_min, and of beta."""
    out = {}
    for s in sorted({r["scale"] for r in rows}):
        g, bt = [], []
        for r in rows:
            if r["scale"] != s:
                continue
            fa = r["float64"]["floor_at"]
            for row in r["layers"]:
                if (fa is None or row["layer"] < fa) and row["gamma_min"] == row["gamma_min"]:
                    g.append(row["gamma_min"])
                    bt.append(row["beta"])
        out[str(s)] = {
            "gamma_median": float(np.median(g)) if g else None,
            "beta_median": float(np.median(bt)) if bt else None,
        }
    return out


def record_bound(ch, rows: list[dict], b: dict) -> dict:
    """Record part (c): for the reference network ``b`` (:func:`bound_rows`) the per-layer smallest gamma
    and beta, the factor, the bound's distance above the actual residual per layer and the spread of gamma;
    over all runs the median smallest gamma and the bound's gap and vacuous share by weight scale. Glue the
    reference network's description (``ref_d``, ``ref_H``, ``ref_dqk``, ``ref_net_scale``) and its gap after
    the first and the last layer above the floor. Returns ``{"bound": bound_summary, "gamma": gamma_table}``
    for :func:`table_bound_by_scale`."""
    gt = gamma_table(rows)
    ch.value(
        "ref_gamma_per_layer",
        [r["gamma_min"] for r in b["layers"]],
        rtol=1e-6,
        note="float64 norms, ratios of residuals above the floor",
    )
    ch.value(
        "ref_beta_per_layer", [r["beta"] for r in b["layers"]], rtol=1e-9, note="exact norms of the weights"
    )
    ch.value("ref_factor", b["factor"], rtol=1e-6, note="float64")
    ch.value(
        "ref_log10_bound_over_actual",
        [bb - float(np.log10(a)) for bb, a in zip(b["log10_bound"], b["res"])],
        rtol=1e-6,
        atol=1e-6,
        note="log10 of bound / actual, float64",
    )
    ch.value("ref_gamma_spread", b["gamma_spread"], rtol=1e-6, note="largest / smallest gamma over layers")
    ch.value(
        "gamma_median_by_scale",
        {k: v["gamma_median"] for k, v in gt.items()},
        rtol=1e-6,
        note="float64 medians",
    )
    bs = bound_summary(rows)
    ch.value("bound_by_scale", bs, rtol=1e-6, atol=1e-6, note="float64 logs and shares")
    ch.glue("ref_d", b["d"])
    ch.glue("ref_H", b["H"])
    ch.glue("ref_dqk", b["dqk"])
    ch.glue("ref_net_scale", b["scale"])
    ch.glue("ref_last_gap", b["log10_bound"][-1] - float(np.log10(b["res"][-1])))
    ch.glue("ref_first_gap", b["log10_bound"][1] - float(np.log10(b["res"][1])))
    return {"bound": bs, "gamma": gt}


def table_bound_by_scale(by_scale: dict) -> str:
    """Part (c)'s table, as Markdown: per weight scale, the depth bound's median gap above the actual
    residual at the last layer above the floor, its vacuous share, and the median smallest gamma (scales
    without a value show a dash)."""
    bs, gt = by_scale["bound"], by_scale["gamma"]
    head = (
        "| weight scale | bound above actual (orders, median) | vacuous (% of runs) | median smallest γ |\n"
        "|---|---|---|---|\n"
    )

    def cell(v, fmt):
        return "—" if v is None else format(v, fmt)

    return head + "\n".join(
        f"| {k} | {cell(v['log10_gap_median'], '.2f')} | "
        f"{cell(None if v['vacuous_share'] is None else 100 * v['vacuous_share'], '.0f')} | "
        f"{cell(gt[k]['gamma_median'], '.1e')} |"
        for k, v in bs.items()
    )


# -- (d) phase diagram ----------------------------------------------------------------------------
def phase_diagram(
    n, L, d, H, scales, dqks, seeds, bias, collapse_tol, floor_mult, seed, device, log=print
) -> dict:
    """Observed collapse and the theorem's certificate over (weight scale, d_qk), float64.

    Per cell (median over seeds): ``r(X_L)``, collapsed (``r(X_L) <= collapse_tol``),
    ``4 beta H / sqrt(d_qk)`` with beta the largest over layers (the gamma-free part of the condition), the
    smallest gamma valid for every layer, and whether Theorem 2.2 with those beta and gamma certifies that
    the residual goes to zero.
    """
    floor = float_floor(torch.float64, floor_mult)
    cells = []
    for q in dqks:
        for s in scales:
            rL, coll, cert, fac, gam = [], [], [], [], []
            for i in range(seeds):
                cfg = SANConfig(L, H, d, d_qk=q, bias=bias, weight_scale=s)
                san = SAN.random(cfg, seed + 1000 * i, device=device)
                X = random_tokens(n, d, seed + 1000 * i + 1, device=device)
                tr = trajectory(san, X)
                hidden = tr.pop("_hidden")
                fa = floor_index(tr["r"], floor)
                layers = [row for row in B.layer_gammas(san, hidden) if fa is None or row["layer"] < fa]
                rL.append(max(tr["r"][-1], floor))
                coll.append(tr["r"][-1] <= collapse_tol)
                beta_max = max(B.beta(san, l) for l in range(L))
                fac.append(4 * beta_max * H / math.sqrt(q))
                c = theorem_certifies(layers, tr["res"][0], H, q)
                cert.append(c["certified"])
                gam.append(c["gamma"])
            cells.append(
                {
                    "scale": s,
                    "dqk": q,
                    "r_L": float(np.median(rL)),
                    "collapsed": sum(coll) * 2 > seeds,
                    "certified": sum(cert) * 2 > seeds,
                    "beta_factor": float(np.median(fac)),
                    "gamma": float(np.median(gam)),
                }
            )
        log(f"phase diagram d_qk={q} done")
    n_coll = sum(c["collapsed"] for c in cells)
    n_cert = sum(c["certified"] for c in cells)
    coll_f = [c["beta_factor"] for c in cells if c["collapsed"]]
    return {
        "cells": cells,
        "n_cells": len(cells),
        "n_collapsed": n_coll,
        "n_certified": n_cert,
        "n_certified_not_collapsed": sum(c["certified"] and not c["collapsed"] for c in cells),
        "max_beta_factor_collapsed": max(coll_f) if coll_f else None,
        "min_beta_factor_collapsed": min(coll_f) if coll_f else None,
        "n_collapsed_beta_factor_ge1": sum(f >= 1 for f in coll_f),
    }


def record_phase(ch, ph: dict) -> None:
    """Record part (d): the phase diagram's counts of cells, collapsed, certified and certified but not
    collapsed cells (which must stay 0), their ratio, and the gamma-free factor among the collapsed cells."""
    ch.value("phase_cells", ph["n_cells"])
    ch.value("phase_collapsed", ph["n_collapsed"], atol=1, note="count; a cell on the threshold may flip")
    ch.value("phase_certified", ph["n_certified"], atol=1, note="count; a cell on the threshold may flip")
    ch.value(
        "phase_certified_not_collapsed",
        ph["n_certified_not_collapsed"],
        atol=0,
        note="must stay 0 if the theorem holds",
    )
    ch.value(
        "phase_wider",
        ph["n_collapsed"] / max(ph["n_certified"], 1),
        rtol=0.2,
        note="ratio of counts; one flipped cell moves it",
    )
    ch.value(
        "phase_max_beta_factor_collapsed",
        ph["max_beta_factor_collapsed"],
        rtol=1e-6,
        note="exact norms of weights",
    )
    ch.value("phase_collapsed_beta_factor_ge1", ph["n_collapsed_beta_factor_ge1"], atol=1, note="count")


def judge_c1(ch, summ: dict, ph: dict) -> str:
    """Record the C1 verdict (:func:`c1_verdict` on the summary of parts (a, b)), with the phase diagram's
    counts as evidence; returns the verdict."""
    v = c1_verdict(summ)
    return ch.verdict(
        "C1",
        v,
        claim="pure SANs lose rank doubly exponentially (cubic rate per layer)",
        rule=(
            "supported if every run that Theorem 2.2 certifies (beta from the weights, smallest valid "
            "gamma) collapses to r(X_L) <= collapse_tol and the median fitted per-layer exponent of those "
            "runs lies in [2, 4]; refuted if a certified run does not collapse or that median is below 1.5 "
            "(a linear rate); inconclusive otherwise"
        ),
        evidence={
            k: summ[k]
            for k in (
                "runs",
                "collapsed",
                "certified",
                "certified_collapsed",
                "exponent_certified_median",
                "exponent_certified_min",
                "exponent_certified_max",
                "exponent_all_median",
            )
        }
        | {
            "phase_collapsed": ph["n_collapsed"],
            "phase_certified": ph["n_certified"],
            "phase_cells": ph["n_cells"],
        },
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
                    ax.plot(range(len(ref)), ref, "k--", lw=1, label="linear rate (first-layer ratio)")
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
        xs, ys = [], []
        for r in (x for x in rows if x["scale"] == s):
            res, fa = r["float64"]["res"], r["float64"]["floor_at"]
            top = fa if fa is not None else len(res)
            for l in range(1, top):
                xs.append(math.log10(res[l - 1]))
                ys.append(math.log10(res[l]))
        ax.scatter(xs, ys, s=8, color=f"C{k}", label=f"scale {s:g}", alpha=0.7)
    lo, hi = ax.get_xlim()
    ax.plot([lo, hi], [lo, hi], "k:", lw=1, label="slope 1")
    ax.set_xlabel("log10 ‖res(X_{l-1})‖₁,∞")
    ax.set_ylabel("log10 ‖res(X_l)‖₁,∞")
    ax.legend(fontsize=7)
    ax = axes[1]
    for k, s in enumerate(scales):
        e = [r["fit"]["slope"] for r in rows if r["scale"] == s and r["fit"]["slope"] is not None]
        ax.scatter([s] * len(e), e, color=f"C{k}", s=14)
    ax.axhline(3, color="k", ls="--", lw=1, label="theory: 3")
    ax.axhline(1, color="grey", ls=":", lw=1, label="linear rate: 1")
    ax.set_xscale("log")
    ax.set_xlabel("weight scale")
    ax.set_ylabel("fitted per-layer exponent")
    ax.minorticks_off()
    ax.set_xticks(scales)
    ax.set_xticklabels([f"{s:g}" for s in scales])
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_bound(b):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    ls = [row["layer"] for row in b["layers"]]
    ax = axes[0]
    ax.semilogy(ls, [row["gamma_min"] for row in b["layers"]], "o-", label="smallest γ (per layer)")
    ax.semilogy(ls, [row["beta"] for row in b["layers"]], "s-", label="β from the weights")
    ax.semilogy(ls, [row["factor"] for row in b["layers"]], "^-", label="4γβH/√d_qk")
    ax.axhline(1, color="grey", ls=":", lw=1)
    ax.set_xlabel("layer")
    ax.legend(fontsize=7)
    ax.set_xticks(ls)
    ax.set_title(f"d={b['d']}, H={b['H']}, d_qk={b['dqk']}, scale {b['scale']:g}", fontsize=9)
    ax = axes[1]
    L = range(len(b["res"]))
    ax.plot(L, np.log10(b["res"]), "ko-", label="actual ‖res(X_l)‖₁,∞")
    ax.plot(L, b["log10_bound"], "r^--", label="Thm 2.2 bound, one γ for all layers")
    ax.plot(list(L)[1:], b["log10_onestep"], "bs:", label="one-layer bound from the actual res(X_{l-1})")
    ax.set_xlabel("layer l")
    ax.set_ylabel("log10")
    ax.legend(fontsize=7)
    ax.set_ylim(min(np.log10(b["res"])) - 5, max(max(np.log10(b["res"])) + 5, 5))
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
    ax.set_title(f"d={d}, H={H}: C = collapsed, * = certified by Thm 2.2", fontsize=9)
    return fig
