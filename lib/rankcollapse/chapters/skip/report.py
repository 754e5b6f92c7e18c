"""Chapter `skip`, report: the records of parts (a), (b) and (c) (``record_*``: values, counts and glued
numbers for the prose, with the summary of the curves they read; the frontier without skips, Q1's control,
in :func:`record_frontier_noskip`) and the frontier's table (:func:`table_frontier`, with or without
skips).
"""

from __future__ import annotations

import math

import numpy as np

from ...book import checks
from ...core import explosion
from .verdicts import C2_REFUTE, C2_SUPPORT, COLLAPSE_TOL, q1_compare, q1_evidence


def kept_lines(n: int) -> tuple[float, ...]:
    """The counts of networks kept, out of ``n``, between which C2's verdict changes: half a network above
    the largest count C2 refutes on (share <= C2_REFUTE) and half below the smallest it supports on (share
    >= C2_SUPPORT)."""
    return (math.floor(C2_REFUTE * n + 1e-9) + 0.5, math.ceil(C2_SUPPORT * n - 1e-9) - 0.5) if n else ()


def summarise_constructions(cons: list[dict]) -> dict:
    """What the C2 verdict reads of a set of constructions: ``exact_all`` (every checkable case equal to 1
    up to its round-off scale), ``cases`` (the checkable ones), ``worst_dev``."""
    fams = ("zero values", "uniform attention", "residual-orthogonal values")
    in_range = [r for r in cons if r["family"] in fams and r["checkable"]]
    return {
        "exact_all": all(r["exact"] for r in in_range),
        "cases": len(in_range),
        "worst_dev": max((abs(r["ratio"] - 1) for r in in_range), default=float("nan")),
    }


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
    # one treatment of exploding networks (rankcollapse.core.explosion): counted apart, never as a collapse
    # prevented, nor as a collapse
    fam = {}
    for tag, skip in (("san", False), ("skip", True)):
        rs = [r for r in curves if r["skip"] == skip]
        fam[f"{tag}_exploded"] = sum(r["exploded"] for r in rs)
        fam[f"{tag}_collapsed_only"] = sum((not r["exploded"]) and r["r"][-1] <= COLLAPSE_TOL for r in rs)
        fam[f"{tag}_kept"] = len(rs) - fam[f"{tag}_exploded"] - fam[f"{tag}_collapsed_only"]
        for k in ("exploded", "collapsed_only", "kept"):
            # C2 reads the share kept against its two lines: at most C2_REFUTE refuted, at least C2_SUPPORT
            lines = kept_lines(n_each) if k == "kept" else ()
            checks.count(
                ch, f"{tag}_{k}", fam[f"{tag}_{k}"], of=n_each, limits=lines, note=f"random networks: {k}"
            )
        ch.glue(
            f"{tag}_exploded_scales",
            ", ".join(f"{s:g}" for s in sorted({r["scale"] for r in rs if r["exploded"]})) or "none",
        )
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
    ch.glue("explode", explosion.EXPLODE)
    ch.glue("explode_depth", explosion.EXPLODE_DEPTH)
    ch.glue("explode_per_layer", explosion.EXPLODE ** (1 / explosion.EXPLODE_DEPTH))
    skip_cs = {k.split("_")[1]: v for k, v in cs.items() if k.startswith("skip")}
    ch.glue("skip_r_L_medians", ", ".join(f"{v['r_L_median']:.2g}" for v in skip_cs.values()))
    ch.glue("skip_scales", ", ".join(skip_cs))
    return {
        **fam,
        "san_collapsed": san_collapsed,
        "skip_collapsed": skip_collapsed,
        "n_each": n_each,
        "skip_r_L_min": min(r["r"][-1] for r in curves if r["skip"]),
        "skip_abs_min": skip_abs_min,
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


def _trusted(v: float) -> float | None:
    return v if math.isfinite(v) else None


def record_frontier_noskip(ch, front_noskip: list[dict], p) -> None:
    """Record Q1's control, the frontier searched without skip connections: the smallest trusted ratio per
    cell (None where no candidate kept a trusted value: below its round-off scale or out of the float
    range); count the shallowest cells that converged, the deeper cells below the refutation mark of Q1's
    rule and the cells with no trusted value; glue how far the shallowest searches' best fell between the
    first and last effort level (the smallest such factor over the betas)."""
    key = [f"L{r['L']}_beta{r['beta']:g}" for r in front_noskip]
    ch.value(
        "frontier_noskip",
        dict(zip(key, (_trusted(r["best"]) for r in front_noskip))),
        rtol=0.3,
        atol=1e-3,
        note="optimiser output on pure attention, most cells far below 1e-3 and not converged: recorded to "
        "show it is small, any value below 1e-3 matches; None: no trusted value",
    )
    L0 = min(r["L"] for r in front_noskip)
    base = [r for r in front_noskip if r["L"] == L0]
    cmp = q1_compare(q1_evidence(front_noskip, p))
    checks.count(
        ch,
        "noskip_base_converged",
        sum(r["converged"] for r in base),
        of=len(base),
        note="shallowest searches without skips that reached their plateau (Q1 refutes only from one)",
    )
    checks.count(
        ch,
        "noskip_below_mark",
        sum(c["best"] < c["mark"] for c in cmp),
        of=len(cmp),
        note="deeper cells without skips below ((1 - tol) rho0)^(L/L0), whether or not rho0 converged",
    )
    checks.count(
        ch,
        "noskip_untrusted",
        sum(not math.isfinite(r["best"]) for r in front_noskip),
        of=len(front_noskip),
        note="cells without skips with no trusted value (every candidate below its round-off scale)",
    )
    ch.glue("noskip_deeper", len(cmp))
    ch.glue("noskip_n_base", len(base))
    ch.glue("noskip_L0", L0)
    falls = [r["levels"][0]["best"] / r["levels"][-1]["best"] for r in base if r["levels"][-1]["best"] > 0]
    ch.glue("noskip_base_fall_min", min(falls) if falls else float("nan"))
    ch.glue("noskip_base_max", max(r["best"] for r in base))
    trusted = [r["best"] for r in front_noskip if r["L"] > L0 and math.isfinite(r["best"])]
    ch.glue("noskip_deep_min", min(trusted) if trusted else float("nan"))


def table_frontier(front: list[dict]) -> str:
    """Part (c)'s table, as Markdown: per cell the best found, where it came from, the effort used and
    whether the search converged ("none trusted" where no candidate kept a trusted value, as may happen
    without skips)."""
    head = (
        "| depth L | β ≤ | smallest ratio found | found by | random restarts' best | effort (steps × "
        "restarts) | converged |\n|---|---|---|---|---|---|---|\n"
    )

    def num(v):
        return f"{v:.3g}" if math.isfinite(v) else "none trusted"

    def src(r):
        return r["best_from"] if math.isfinite(r["best"]) else "—"

    return head + "\n".join(
        f"| {r['L']} | {r['beta']:g} | {num(r['best'])} | {src(r)} | {num(r['adversarial_random'])} | "
        f"{r['effort']} | {'yes' if r['converged'] else '**no**'} |"
        for r in front
    )
