"""Chapter `collapse`'s claim C1 (pure SANs lose rank doubly exponentially): its rule text
(:data:`RULE_C1`), its decision (:func:`verdict_c1`), its evidence (:func:`c1_evidence`), the previous,
circular rule shown beside it (:data:`RULE_C1_OLD`, :func:`old_verdict_c1`), :data:`VERDICTS` and
:func:`judge_c1`, which records the verdict.
"""

from __future__ import annotations

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


def c1_control_evidence(cs: dict) -> dict:
    """The evidence dict of :func:`verdict_c1` on C1's control, from
    :func:`rankcollapse.chapters.collapse.experiments.skip_control_summary`: the curves' networks with a
    skip connection around every attention layer (no phase diagram)."""
    nc = cs["certified_drawn"] + cs["certified_scaled"]
    ok = cs["certified_drawn_collapsed"] + cs["certified_scaled_collapsed"]
    return {
        "exponent_decaying_median": cs["exponent_decaying_median"],
        "decaying_fits": cs["decaying_fits"],
        "decaying_scales": cs["decaying_scales"],
        "kappa_median": cs["kappa_median"],
        "certified": nc,
        "certified_not_collapsed": nc - ok,
        "runs": cs["runs"],
        "collapsed": cs["collapsed"],
        "scaled_r_kept_median": cs["scaled_r_kept_median"],
    }


CONTROL_C1 = (
    "the curves' networks (same weights, same held-out and calibration inputs) with a skip connection "
    "around every attention layer, X <- X + SA(X), at random initialisation"
)


def judge_c1(ch, summ: dict, ph: dict, ctl: dict) -> str:
    """Build C1's evidence (:func:`c1_evidence`), decide it (:func:`verdict_c1`) and record it beside its
    control: the same rule on the skip networks of ``ctl``
    (:func:`rankcollapse.chapters.collapse.experiments.skip_control_summary`, evidence
    :func:`c1_control_evidence`), under ``evidence["control"]``. Glue the old rule's verdict on the same
    runs as ``old_rule_verdict``, the control's verdict and reason as ``c1_control_verdict`` and
    ``c1_control_reason``. Returns the verdict."""
    ev = c1_evidence(summ, ph)
    v, reason = verdict_c1(ev)
    cev = c1_control_evidence(ctl)
    cv, creason = verdict_c1(cev)
    ch.glue("old_rule_verdict", ev["old_rule_verdict"])
    ch.glue("verdict_reason", reason)
    ch.glue("c1_control_verdict", cv)
    ch.glue("c1_control_reason", creason)
    control = {"on": CONTROL_C1, "verdict": cv, "reason": creason, "evidence": cev}
    return ch.verdict(
        "C1",
        v,
        claim="pure SANs lose rank doubly exponentially (cubic rate per layer)",
        rule=RULE_C1,
        evidence=ev | {"reason": reason, "control": control},
    )
