"""Chapter `skip`, verdicts: the rules of C2 (skip connections prevent the collapse) and Q1 (the
compounding sub-claim of the open lower-bound problem) as text (``RULE_*``, the previous Q1 rule
``RULE_Q1_OLD`` shown beside), their decision functions (``verdict_*``, listed in ``VERDICTS``), their
evidence (:func:`q1_evidence`, :func:`q1_compare`), C2's control across the counts' intervals
(:func:`c2_across_interval`) and the ``judge_*`` that record each verdict with its control (the same rule
on the networks without skip connections).
"""

from __future__ import annotations

import math

from ...book import checks
from ...core import explosion

COLLAPSE_TOL = 1e-6  # r(X_L) at or below this counts as collapsed in (b): ten orders above float64 round-off

C2_SUPPORT = 0.75  # C2: share of random networks keeping their rank at or above which it is supported
C2_REFUTE = 0.25  # C2: share at or below which it is refuted
RULE_C2 = (
    "judged per network family (the SAN+skip networks decide; the same constructions and random "
    "networks without skips are its control): every construction (zero values, uniform attention, "
    "residual-orthogonal family) must keep ||res(X_L)||/||res(X)|| = 1 up to its round-off scale at "
    "every depth and beta that stays in float range; at random initialisation (every weight scale of "
    "the grid) a network has exploded "
    f"when {explosion.TREATMENT.split('; ')[0].removeprefix('a network has exploded when ')}, is collapsed "
    "when it did not explode and ends with relative r(X_L) <= 1e-6, and keeps its rank otherwise; an "
    "exploded network is counted apart, never as a collapse prevented; with k the share of the family's "
    f"random networks that keep their rank: refuted if a construction fails or k <= {C2_REFUTE}; supported "
    f"if every construction holds and k >= {C2_SUPPORT}; inconclusive otherwise"
)
RULE_C2_OLD = (
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
RULE_Q1_OLD = (
    "an open problem cannot be settled by search: the smallest ratio found is achievable, so it bounds any "
    "valid lower bound from above but proves none; the verdict is 'inconclusive' by construction, with the "
    "frontier (smallest ratio found per depth and beta) as the evidence"
)


def verdict_c2(evidence: dict) -> tuple[str, str]:
    """C2 for one network family from ``family`` (its name), ``construct_all_exact``, ``construct_cases``
    and the random networks' ``networks`` (their count), ``kept``, ``collapsed``, ``exploded``."""
    fam = evidence.get("family", "SAN+skip networks")
    ok, n = evidence["construct_all_exact"], evidence["networks"]
    kept, col, exp = evidence["kept"], evidence["collapsed"], evidence["exploded"]
    cons = f"{'all' if ok else 'not all'} {evidence['construct_cases']} construction cases hold exactly"
    counts = (
        f"at random initialisation {kept} of {n} keep their rank, {col} collapse "
        f"(r(X_L) <= {COLLAPSE_TOL:g}) and {exp} explode (growth > {explosion.EXPLODE:g} per "
        f"{explosion.EXPLODE_DEPTH} layers, counted apart, not as prevention)"
    )
    text = f"For the {fam}: {cons}; {counts}"
    k = kept / n if n else 0.0
    if not n:
        return "inconclusive", f"For the {fam}: {cons}, and no random network was run (0 networks)."
    if not ok or k <= C2_REFUTE:
        return "refuted", f"{text}: no prevention."
    if k >= C2_SUPPORT:
        return "supported", f"{text}: the collapse is prevented."
    return "inconclusive", f"{text}: the networks split."


def old_verdict_c2(evidence: dict) -> tuple[str, str]:
    """C2's previous rule (:data:`RULE_C2_OLD`: an exploded network whose relative residual fell counted
    as collapsed), kept to show its verdict beside the new one. Reads ``construct_all_exact``,
    ``construct_cases``, ``san_collapsed``, ``skip_collapsed`` and ``networks_per_variant``."""
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
    unfounded = [c for c in cmp if c["best"] < c["mark"]]  # below the margin, from an unconverged rho0
    if unfounded:
        c = min(unfounded, key=lambda c: c["best"] / c["mark"])
        return "inconclusive", (
            f"{len(unfounded)} of {len(cmp)} deeper cells lie below compounding by the margin (the lowest "
            f"L = {c['L']}, beta <= {c['beta']:g}: {c['best']:.3g} against {c['compound']:.3g} compounded), "
            f"but the shallowest search they compound did not converge, so none refutes; {n_open} of "
            f"{len(evidence['cells'])} searches did not converge within the effort cap."
        )
    return "inconclusive", (
        f"No deeper network beat compounding by the margin, but {n_open} of {len(evidence['cells'])} "
        f"searches did not converge within the effort cap ({closest})."
    )


VERDICTS = {"C2": verdict_c2, "Q1": verdict_q1}


def c2_across_interval(ev: dict) -> dict:
    """:func:`verdict_c2` with the count of networks keeping their rank (out of the family's networks) moved
    through its exact 95% interval (:func:`rankcollapse.book.checks.across_interval`)."""
    counts = {"SAN+skip networks keeping their rank": (ev["kept"], ev["networks"], checks.at_key("kept"))}
    return checks.across_interval(verdict_c2, ev, counts)


C2_CONTROL_ON = (
    "the pure SANs: the same constructions and the same random networks (seeds, weight scales) without "
    "their skip connections"
)


def c2_family(cons: dict, curves: dict, skip: bool) -> dict:
    """C2's evidence for one family from :func:`record_constructions`' summary ``cons`` of its constructions
    and :func:`record_skip_curves`' ``curves``."""
    tag = "skip" if skip else "san"
    return {
        "family": "SAN+skip networks" if skip else "pure SANs (no skip)",
        "construct_all_exact": cons["exact_all"],
        "construct_cases": cons["cases"],
        "construct_worst_dev": cons["worst_dev"],
        "networks": curves["n_each"],
        "kept": curves[f"{tag}_kept"],
        "collapsed": curves[f"{tag}_collapsed_only"],
        "exploded": curves[f"{tag}_exploded"],
    }


def judge_c2(ch, cons: dict, curves: dict, cons_noskip: dict | None = None) -> str:
    """Record the C2 verdict (:func:`verdict_c2`) on the SAN+skip networks from part (a)'s constructions
    (``cons``, as returned by :func:`record_constructions`) and part (b)'s counts (``curves``, from
    :func:`record_skip_curves`), with its control (the same rule on the pure SANs: their constructions
    ``cons_noskip``, :func:`summarise_constructions` of the constructions without skips, and their random
    networks) and the previous rule's verdict beside; glue ``c2_constructions``, "All" or "Not all" (of the
    constructions hold exactly). Returns the verdict."""
    evidence = c2_family(cons, curves, True) | {
        "skip_r_L_min": curves["skip_r_L_min"],
        "skip_abs_ratio_min": curves["skip_abs_min"],
    }
    v, reason = verdict_c2(evidence)
    if cons_noskip is not None:
        vc, rc = verdict_c2(c2_family(cons_noskip, curves, False))
    else:
        vc, rc = "not run", "The constructions without skips were not run."
    old_ev = {
        "construct_all_exact": cons["exact_all"],
        "construct_cases": cons["cases"],
        "san_collapsed": curves["san_collapsed"],
        "skip_collapsed": curves["skip_collapsed"],
        "networks_per_variant": curves["n_each"],
    }
    old, old_reason = old_verdict_c2(old_ev)
    ch.glue("c2_reason", reason)
    ch.glue("c2_control_reason", rc)
    ch.value("c2_old_rule_verdict", old, note="the previous rule (exploded networks counted as collapsed)")
    ch.glue("c2_old_rule", RULE_C2_OLD)
    across = c2_across_interval(evidence)
    ch.glue("c2_interval", checks.interval_text(across))
    c2 = ch.verdict(
        "C2",
        v,
        claim="skip connections prevent the collapse (Claim 3.1: parameterisations with "
        "||res(X_L)|| >= ||res(X)|| exist for any depth and arbitrarily small beta; constructions and "
        "random initialisation, exploded networks counted apart)",
        rule=RULE_C2,
        evidence=evidence
        | {
            "reason": reason,
            "across_interval": across,
            "control": {"on": C2_CONTROL_ON, "verdict": vc, "reason": rc},
            "old_verdict": old,
            "old_reason": old_reason,
            "rule_old": RULE_C2_OLD,
            "old_evidence": old_ev,
        },
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


Q1_CONTROL_ON = (
    "pure self-attention: the same frontier search (input, depths, betas, seeds, candidates, effort) on "
    "networks without skip connections, where the residual is known to collapse with depth"
)


def judge_q1(ch, front: list[dict], ins: dict, p, front_noskip: list[dict] | None = None) -> str:
    """Record the Q1 verdict (:func:`verdict_q1`, the compounding sub-claim) from the frontier, with its
    control: the same rule on the frontier searched without skip connections (``front_noskip``, from
    :func:`rankcollapse.chapters.skip.experiments.frontier` with ``skip=False``; its cells kept in the
    evidence as ``control_cells``, a cell with no trusted value as None). Glue ``q1_reason``,
    ``q1_control_verdict`` and ``q1_control_reason``. Returns the verdict."""
    evidence = q1_evidence(front, p) | {"input_res_1inf": ins["res_1inf"]}
    v, reason = verdict_q1(evidence)
    if front_noskip is not None:
        ev_c = q1_evidence(front_noskip, p)
        vc, rc = verdict_q1(ev_c)
        control_cells = [
            c | {"best": c["best"] if math.isfinite(c["best"]) else None} for c in ev_c["cells"]
        ]
    else:
        vc, rc, control_cells = "not run", "The search without skips was not run.", []
    ch.glue("q1_reason", reason)
    ch.glue("q1_control_verdict", vc)
    ch.glue("q1_control_reason", rc)
    ch.glue("q1_old_rule", RULE_Q1_OLD)
    return ch.verdict(
        "Q1",
        v,
        claim="a tight lower bound on ||res(X_L)||/||res(X)|| with skip connections (open problem); "
        "sub-claim tested: on the search input, depth shrinks the residual no faster than compounding the "
        "shallowest network, rho(L, beta) >= rho(L0, beta)^(L/L0)",
        rule=RULE_Q1,
        evidence=evidence
        | {
            "reason": reason,
            "control": {"on": Q1_CONTROL_ON, "verdict": vc, "reason": rc},
            "control_cells": control_cells,
        },
    )
