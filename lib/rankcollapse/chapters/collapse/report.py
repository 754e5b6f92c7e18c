"""What chapter `collapse` records: the values of parts (a) to (e) with their tolerances and the glued
numbers of the prose (``record_*``), and part (c)'s table (:func:`table_bound_by_scale`).
"""

from __future__ import annotations

import math

from ...book import checks
from ...core.trajectory import float_floor
from .experiments import (
    DTYPES,
    by_scale,
    curves_summary,
    depth_to_floor,
    float_plateaus,
    skip_control_summary,
)


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
    """Part (c)'s tables, as Markdown, per weight scale (a dash where there is no value): two tables, so that
    each fits the page's column: the residual and the attention's deviation first, then the bounds."""

    def cell(v, fmt, mul=1.0):
        return "—" if v is None else format(mul * v, fmt)

    first = (
        "*The residual and the attention, by weight scale:*\n\n"
        "| weight scale | growing (% runs) | exponent, decaying regime | all-pairs slope | κ (γ ~ res^κ) "
        "| one-layer bound, decades above |\n" + "|---" * 6 + "|\n"
    ) + "\n".join(
        f"| {k} | {cell(v['growing_share'], '.0f', 100)} | {cell(v['exponent_decaying_median'], '.2f')} | "
        f"{cell(v['slope_all_pairs_median'], '.2f')} | {cell(v['kappa_median'], '.2f')} | "
        f"{cell(v['tightness_log10_median'], '.2f', -1)} |"
        for k, v in bs.items()
    )
    second = (
        "*The bounds, by weight scale:*\n\n"
        "| weight scale | γ* bounds γ (% layers) | depth bound holds (% pairs) | informative (% pairs) "
        "| its gap, decades | certified runs | log10 certified input scale |\n" + "|---" * 7 + "|\n"
    ) + "\n".join(
        f"| {k} | {cell(v['gamma_star_bounds_share'], '.0f', 100)} | "
        f"{cell(v['prediction_holds_share'], '.0f', 100)} | "
        f"{cell(v['prediction_informative_share'], '.0f', 100)} | "
        f"{cell(v['prediction_gap_median'], '.2f')} | {v['certified']} of {v['runs']} | "
        f"{cell(v['log10_certified_input_scale_median'], '.2f')} |"
        for k, v in bs.items()
    )
    return first + "\n\n" + second


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


def record_skip_control(ch, ctl: list[dict]) -> dict:
    """Record C1's control (the curves' networks with skips, :func:`skip_control`): its runs, collapsed
    runs, decaying-segment exponent and kappa (medians), certified runs (as drawn and scaled) and how many
    of them collapse, and the median share of r kept by the scaled runs; glue them for the prose. Returns
    :func:`skip_control_summary` (C1's judge reads it)."""
    cs = skip_control_summary(ctl)
    checks.exact(ch, "ctl_runs", cs["runs"], why="the parameters set it (the curves' configurations)")
    n = cs["runs"]
    checks.count(ch, "ctl_collapsed", cs["collapsed"], of=n, note="skip runs with r(X_L) <= collapse_tol")
    checks.count(ch, "ctl_decaying_fits", cs["decaying_fits"], of=n, note="runs with a decaying segment")
    for k in ("exponent_decaying_median", "kappa_median"):
        if cs[k] is not None:
            ch.value(f"ctl_{k}", cs[k], atol=0.02, note="median of per-run log-log slopes")
        else:
            ch.glue(f"ctl_{k}", math.nan)
    checks.count(ch, "ctl_certified_drawn", cs["certified_drawn"], of=n, note="certified as drawn")
    checks.count(ch, "ctl_certified_scaled", cs["certified_scaled"], of=n, note="certified once scaled")
    checks.count(
        ch,
        "ctl_certified_collapsed",
        cs["certified_drawn_collapsed"] + cs["certified_scaled_collapsed"],
        of=cs["certified_drawn"] + cs["certified_scaled"],
        note="certified skip runs that collapse; the skip keeps the residual far above collapse_tol",
    )
    if cs["scaled_r_kept_median"] is not None:
        ch.value(
            "ctl_scaled_r_kept_median",
            cs["scaled_r_kept_median"],
            rtol=0.02,
            note="r(X_L) / r(X_0) of the scaled skip runs, median",
        )
    else:
        ch.glue("ctl_scaled_r_kept_median", math.nan)
    return cs
