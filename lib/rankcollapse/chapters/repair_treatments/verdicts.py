"""Chapter `repair-treatments`, verdicts: the rule of H2 (no added loss term repairs the collapse, though
the bounded one pushes hard) as text (:data:`RULE_H2`: the loss terms' pooled repair rate against the
largest rate the claim allows, :data:`H2_MAX_RATE`, by exact one-sided bounds), with the chapter's earlier
rules kept beside it (:data:`RULE_H2_ZERO`, the first; :data:`RULE_H2_FISHER`, the second) and why it
changed (:data:`RULE_H2_CHANGE`); the bounds and the rule's power (:func:`rate_bounds`,
:func:`support_count`, :func:`refute_count`, :func:`detectable_rate`); its evidence (:func:`h2_evidence`)
and its control's (:func:`control_evidence`: the reversed ramp, pooled as the loss terms are); its decision
functions (:func:`verdict_h2`, listed in :data:`VERDICTS`, :func:`verdict_h2_fisher`,
:func:`verdict_h2_zero`); the verdict across the counts' intervals and :func:`judge_h2`, which records it
beside its control with the check of the calibration (:data:`CALIB_CHECK`).
"""

from __future__ import annotations

import math

from scipy.stats import binom

from ...book import checks
from .experiments import loss_terms

CALIB_CHECK = 0.05  # the test of the calibration: every term adds its target within 5% at the switch


_THRESHOLD_NOTE = (
    "recovery judged by the book's stricter threshold (the 50-step median of the last block's srank reaches "
    "the collapse threshold plus recover_frac of the way to the healthy srank; the same rule under the "
    "paper's literal threshold, half the healthy srank, is recorded beside it and does not decide): "
)


# -- the rule that decides (issue #42): a pooled repair rate with exact bounds, against an allowed rate --
H2_MAX_RATE = 0.2  # the largest repair rate the claim allows: at most one loss-term branch in five recovers
H2_CONF = 0.95  # one-sided confidence of each exact (Clopper-Pearson) bound on the pooled rate
H2_POWER = 0.8  # the detectable rate: the smallest true rate the rule calls refuted this often

RULE_H2 = (
    "recovery judged by the book's stricter threshold (the 50-step median of the last block's srank reaches "
    "the collapse threshold plus recover_frac of the way to the healthy srank; the same rule under the "
    "paper's literal threshold, half the healthy srank, is recorded beside it and does not decide, and "
    "under it only the events whose literal threshold lies above the collapse threshold are judged). The "
    "repair rate is the share of loss-term branches that recover, pooled over every term and every event, "
    f"with exact one-sided {H2_CONF:.0%} (Clopper-Pearson) lower and upper bounds; the claim allows a rate "
    f"of at most {H2_MAX_RATE:g}. Refuted if the lower bound, less the untreated control's recovery rate, "
    f"exceeds {H2_MAX_RATE:g}; supported if the upper bound is at most {H2_MAX_RATE:g}, the untreated "
    "control was run, the reversed ramp (the positive control) recovers often enough that the same rule, "
    "pooled over its branches, calls it refuted, and the hinge-1x median rho is more than 3x the "
    "penalty-1x's; else inconclusive. The same rule is applied to the reversed ramp as the verdict's "
    "control"
)


FISHER_P = 0.05  # one-sided, per loss term, against the untreated control; no correction (stricter for H2)


RULE_H2_FISHER = _THRESHOLD_NOTE + (
    "supported if no loss term recovers in significantly more events than the untreated control "
    f"(one-sided Fisher exact test per term, p < {FISHER_P:g}), the untreated control was run, the reversed "
    "ramp recovers in at least half the events, and the hinge-1x median rho is more than 3x the "
    "penalty-1x's; refuted if some loss term recovers in more than half the events; else inconclusive"
)


RULE_H2_ZERO = _THRESHOLD_NOTE + (
    "supported if no loss-term branch recovers in any event, the reversed ramp recovers in at least half "
    "the events, and the hinge-1x median rho is more than 3x the penalty-1x's; refuted if some loss term "
    "recovers in more than half the events; else inconclusive"
)


RULE_H2_CHANGE = (
    "H2's rule was changed twice after full runs had been seen. First, under the first rule (no loss-term "
    "branch recovers in any event) one recovered branch of about forty decided the verdict, and an AVX-512 "
    "host (seed 0 settled, its penalty-4x branch recovered: 1 of 35) and an AVX2 host (seed 0 did not "
    "settle: 0 of 40) disagreed; the second rule asked whether a loss term recovers more often than the "
    "untreated control, by a one-sided Fisher test per term. Second (issue #42), that test could not "
    "decide: with seven events and none untreated recovering, a term is significant only from 4 of 7, which "
    "is also where the rule's refutation (more than half the events) begins, so the Fisher branch never "
    "decided and "
    "'supported' meant 'no term recovered in 4 of 7' (a term repairing 40% of events was still called "
    "supported about 7 times in 10). The rule that decides now pools the terms' branches, bounds the "
    "repair rate exactly on both sides, and fixes the largest rate the claim allows, so it can say no, and "
    "states the smallest rate it would have detected. Both earlier rules' verdicts are recorded beside it."
)


PUSH_RATIO = 3.0  # "the bounded one pushes hard": the hinge's median rho over the penalty's, at 1x


def fisher_greater(k_treated: int, k_control: int, n: int) -> float:
    """One-sided Fisher exact p-value that ``k_treated`` of ``n`` treated events recovering is more than
    ``k_control`` of ``n`` control events: the hypergeometric chance, with the margins fixed, of at least
    ``k_treated`` of all recoveries falling in the treated arm. ``n`` >= 1 events per arm."""
    if n < 1 or not (0 <= k_treated <= n and 0 <= k_control <= n):
        raise ValueError(f"fisher_greater: need 0 <= k <= n and n >= 1, got {k_treated}, {k_control}, {n}")
    total = k_treated + k_control
    denom = math.comb(2 * n, total)
    tail = range(k_treated, min(total, n) + 1)
    return sum(math.comb(n, j) * math.comb(n, total - j) for j in tail) / denom


def min_significant(k_control: int, n: int, level: float = FISHER_P) -> int | None:
    """The fewest recoveries in ``n`` events that :func:`fisher_greater` calls more than ``k_control`` at
    ``level`` (None: not even ``n`` of ``n``)."""
    return next((k for k in range(n + 1) if fisher_greater(k, k_control, n) < level), None)


def _h2_text(evidence: dict) -> tuple[str, bool | None]:
    """The shared part of the H2 reasons, and whether the hinge pushes (None: not measured)."""
    n = evidence["events"]
    rec = evidence["recovered_by_term"]
    rev = evidence.get("reversed_ramp_recovered")
    un = evidence.get("untreated_recovered")
    rho = evidence.get("rho_median") or {}
    per = ", ".join(f"{t} {k} of {n}" for t, k in rec.items())
    arm = evidence.get("arm", "loss-term")  # the control's evidence names its own arm
    text = f"{sum(rec.values())} of {n * len(rec)} {arm} branches recovered ({per})"
    text += "; reversed ramp " + ("not run" if rev is None else f"{rev} of {n} events")
    text += "; untreated " + ("not run" if un is None else f"{un} of {n}")
    h, pn = rho.get("hinge-1x"), rho.get("penalty-1x")
    if h is not None and pn is not None and pn > 0:
        pushes = h > PUSH_RATIO * pn
        text += f"; hinge-1x median rho {h:.3g} = {h / pn:.3g}x the penalty-1x's {pn:.3g}"
    else:
        pushes = None
        text += "; the hinge-1x or penalty-1x rho not measured"
    return text, pushes


def _push_reason(pushes: bool | None) -> str:
    if pushes is None:
        return "the hinge's push was not shown"
    return f"the hinge's rho is not more than {PUSH_RATIO:g}x the penalty's"


def _h2_open(evidence: dict):
    """What both H2 rules share before they differ: (an early verdict, None) when there is nothing to judge
    or some loss term recovered in more than half the events; else (None, (n, rec, rev, where, text,
    pushes))."""
    n = evidence["events"]
    rec = evidence["recovered_by_term"]
    rev = evidence.get("reversed_ramp_recovered")
    where = f"{evidence.get('threshold', 'stricter')} threshold"
    if n == 0 or not rec:
        return ("inconclusive", f"nothing to judge: {n} events, {len(rec)} loss terms tried ({where})"), None
    text, pushes = _h2_text(evidence)
    over = [t for t, k in rec.items() if 2 * k > n]
    if over:
        return (
            "refuted",
            f"{', '.join(over)} recovered in more than half the events: {text} ({where})",
        ), None
    return None, (n, rec, rev, where, text, pushes)


def _h2_control_why(n: int, rev, pushes) -> list[str]:
    """The reasons both H2 rules give when the positive control or the terms' push is missing."""
    why = []
    if rev is None or 2 * rev < n:
        why.append("the reversed ramp, the positive control, recovered in fewer than half the events")
    if not pushes:
        why.append(_push_reason(pushes))
    return why


def verdict_h2_fisher(evidence: dict) -> tuple[str, str]:
    """H2 by :data:`RULE_H2_FISHER`, the chapter's second rule, kept beside :func:`verdict_h2`, from
    ``events``, ``recovered_by_term`` (events recovered per loss-term treatment),
    ``reversed_ramp_recovered`` (None: not run), ``untreated_recovered`` (None: not run), ``rho_median``
    (per loss term) and ``threshold`` (the name of the recovery threshold the counts use)."""
    early, ctx = _h2_open(evidence)
    if early:
        return early
    n, rec, rev, where, text, pushes = ctx
    un = evidence.get("untreated_recovered")
    if un is None:
        pvals = {}
    else:
        pvals = {t: fisher_greater(k, un, n) for t, k in rec.items()}
        lowest = min(pvals, key=pvals.get)
        text += f"; against the untreated, the lowest one-sided Fisher p is {lowest}'s {pvals[lowest]:.3g}"
    text += f" ({where})"
    beats = [t for t, pv in pvals.items() if pv < FISHER_P]
    if un is not None and not beats and rev is not None and 2 * rev >= n and pushes:
        head = "no loss term recovered more often than the untreated control, the reversed ramp did"
        return "supported", f"{head}: {text}"
    why = []
    if un is None:
        why.append("the untreated control was not run")
    if beats:
        why.append(
            f"{', '.join(beats)} recovered more often than the untreated (p < {FISHER_P:g}), in no more "
            "than half the events"
        )
    return "inconclusive", f"{'; '.join(why + _h2_control_why(n, rev, pushes))}: {text}"


def verdict_h2_zero(evidence: dict) -> tuple[str, str]:
    """H2 by :data:`RULE_H2_ZERO`, the chapter's first rule (any recovered loss-term branch stops
    'supported'), kept beside :func:`verdict_h2`; same evidence."""
    early, ctx = _h2_open(evidence)
    if early:
        return early
    n, rec, rev, where, text, pushes = ctx
    text += f" ({where})"
    if sum(rec.values()) == 0 and rev is not None and 2 * rev >= n and pushes:
        return "supported", f"no loss term repaired the collapse, the reversed ramp did: {text}"
    why = ["some loss-term branches recovered, in no more than half the events"] if sum(rec.values()) else []
    return "inconclusive", f"{'; '.join(why + _h2_control_why(n, rev, pushes))}: {text}"


def rate_bounds(k: int, n: int, conf: float = H2_CONF) -> tuple[float, float]:
    """Exact one-sided ``conf`` lower and upper bounds on a rate seen as ``k`` of ``n`` (each the
    Clopper-Pearson bound of the two-sided interval at ``2 conf - 1``): 0 for the lower at ``k`` = 0, 1 for
    the upper at ``k`` = ``n``."""
    return checks.binomial_interval(k, n, 2.0 * conf - 1.0)


def support_count(n: int, max_rate: float = H2_MAX_RATE) -> int | None:
    """The most recoveries among ``n`` pooled branches whose upper bound is at most ``max_rate`` (the rule
    can say 'supported' up to this count); None: not even 0 (too few branches to bound the rate)."""
    return next((k for k in range(n, -1, -1) if rate_bounds(k, n)[1] <= max_rate), None) if n else None


def refute_count(n: int, untreated_rate: float = 0.0, max_rate: float = H2_MAX_RATE) -> int | None:
    """The fewest recoveries among ``n`` pooled branches whose lower bound, less ``untreated_rate``, exceeds
    ``max_rate`` (the rule says 'refuted' from this count on); None: not even ``n`` of ``n``."""
    return next((k for k in range(1, n + 1) if rate_bounds(k, n)[0] - untreated_rate > max_rate), None)


def detectable_rate(
    n: int, untreated_rate: float = 0.0, max_rate: float = H2_MAX_RATE, power: float = H2_POWER
) -> float | None:
    """The smallest true repair rate that ``n`` pooled branches would have detected: the rate ``r`` at which
    the rule says 'refuted' (at least :func:`refute_count` recoveries, with the untreated control's
    recovery rate as seen) with probability ``power``, each branch recovering independently with
    probability ``r``. None when no count refutes."""
    k = refute_count(n, untreated_rate, max_rate)
    if k is None:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):  # P(at least k of n) rises with r: bisect to ~1e-18
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if binom.sf(k - 1, n, mid) >= power else (mid, hi)
    return hi


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def verdict_h2(evidence: dict) -> tuple[str, str]:
    """H2 by :data:`RULE_H2` from ``events``, ``recovered_by_term`` (events recovered per loss-term
    treatment; pooled), ``reversed_ramp_recovered`` (None: not run), ``untreated_recovered`` (None: not
    run), ``rho_median`` (per loss term) and ``threshold`` (the name of the recovery threshold the counts
    use)."""
    n = evidence["events"]
    rec = evidence["recovered_by_term"]
    where = f"{evidence.get('threshold', 'stricter')} threshold"
    if n == 0 or not rec:
        return "inconclusive", f"nothing to judge: {n} events, {len(rec)} loss terms tried ({where})"
    text, pushes = _h2_text(evidence)
    k, big_n = sum(rec.values()), n * len(rec)
    lo, hi = rate_bounds(k, big_n)
    un, rev = evidence.get("untreated_recovered"), evidence.get("reversed_ramp_recovered")
    u = None if un is None else un / n
    rate = (
        f"pooled repair rate {k} of {big_n} = {_pct(k / big_n)}, one-sided {H2_CONF:.0%} bounds "
        f"{_pct(lo)} to {_pct(hi)} (allowed: at most {_pct(H2_MAX_RATE)})"
    )
    text = f"{rate}; {text} ({where})"
    if u is not None and lo - u > H2_MAX_RATE:
        return (
            "refuted",
            f"the {evidence.get('arm', 'loss-term')} branches recover more often than the claim allows, "
            f"beyond the untreated control: {text}",
        )
    rev_refutes = rev is not None and u is not None and rate_bounds(rev, n)[0] - u > H2_MAX_RATE
    if hi <= H2_MAX_RATE and u is not None and rev_refutes and pushes:
        return "supported", f"the repair rate is bounded below what the claim allows: {text}"
    why = []
    if hi > H2_MAX_RATE:
        why.append(f"the upper bound {_pct(hi)} exceeds the allowed {_pct(H2_MAX_RATE)}")
    if u is None:
        why.append("the untreated control was not run")
    elif not rev_refutes:
        why.append(
            "the reversed ramp, the positive control, did not recover often enough for the same rule to "
            "refute on it"
        )
    if not pushes:
        why.append(_push_reason(pushes))
    return "inconclusive", f"{'; '.join(why)}: {text}"


def control_evidence(ev: dict) -> dict:
    """The evidence of H2's control: the reversed ramp's recoveries in place of the loss terms' (one
    'treatment', pooled over its branches as the terms are), the untreated control and everything else as
    in ``ev``; :func:`verdict_h2` on it should say 'refuted'."""
    rev = ev.get("reversed_ramp_recovered")
    return ev | {"arm": "reversed-ramp", "recovered_by_term": {} if rev is None else {"reversed-ramp": rev}}


VERDICTS = {"H2": verdict_h2}

SMOKE_VERDICT_NOTES: dict[str, str] = {
    "H2": (
        "the smoke miniature pools too few loss-term branches for the upper bound on the repair rate to "
        "fall to the allowed rate even when none recovers, so it cannot support H2; the full profile's "
        "branches can"
    ),
}


def literal_events(p, events: list[dict]) -> tuple[list[int], list[int]]:
    """The indices of the events judged under the paper's literal threshold (it lies above the collapse
    threshold ``p.threshold``) and of those shown but not judged (at or below it: a branch that never left
    the collapse would count as recovered there)."""
    keep = [i for i, e in enumerate(events) if e["rec_threshold_literal"] > p.threshold]
    return keep, [i for i in range(len(events)) if i not in keep]


def h2_evidence(p, events: list[dict], summary: dict, literal: bool = False) -> dict:
    """The evidence of :func:`verdict_h2` from :func:`summarise`: recoveries under the stricter threshold
    over every event, or (``literal``) under the paper's half the healthy srank over the events whose
    literal threshold lies above the collapse threshold (:func:`literal_events`; the others are listed in
    ``excluded_seeds`` with their thresholds)."""
    terms = loss_terms(p)
    rr, un = summary.get("reversed-ramp"), summary.get("untreated")
    ev = {
        "threshold": "paper's literal" if literal else "book's stricter",
        "rho_median": {t: summary[t]["rho_median"] for t in terms},
    }
    if not literal:
        return ev | {
            "events": len(events),
            "recovered_by_term": {t: summary[t]["recovered"] for t in terms},
            "reversed_ramp_recovered": rr["recovered"] if rr else None,
            "untreated_recovered": un["recovered"] if un else None,
        }
    keep, out = literal_events(p, events)

    def _k(s):
        return sum(s["rows"][i]["recovered_after_literal"] is not None for i in keep) if s else None

    return ev | {
        "events": len(keep),
        "recovered_by_term": {t: _k(summary[t]) for t in terms},
        "reversed_ramp_recovered": _k(rr),
        "untreated_recovered": _k(un),
        "excluded_seeds": {str(events[i]["seed"]): events[i]["rec_threshold_literal"] for i in out},
    }


def h2_across_interval(ev: dict) -> dict:
    """:func:`verdict_h2` with each recovery count it reads (every term's, the untreated control's, the
    reversed ramp's, each out of the events) moved alone through its exact 95% interval
    (:func:`rankcollapse.book.checks.across_interval`)."""
    n = ev["events"]
    counts = {t: (k, n, checks.at_key("recovered_by_term", t)) for t, k in ev["recovered_by_term"].items()}
    if ev["untreated_recovered"] is not None:
        counts["untreated"] = (ev["untreated_recovered"], n, checks.at_key("untreated_recovered"))
    if ev["reversed_ramp_recovered"] is not None:
        rev = ev["reversed_ramp_recovered"]
        counts["reversed ramp"] = (rev, n, checks.at_key("reversed_ramp_recovered"))
    return checks.across_interval(verdict_h2, ev, counts)


H2_CONTROL_ON = (
    "the reversed ramp from the same saved collapses (the positive control), pooled over its branches"
)


def power_text(ev: dict) -> str:
    """What the decided evidence's pooled branches could show, for the page: the counts at which the rule
    says 'supported' and 'refuted', and the smallest rate it would have detected
    (:func:`detectable_rate`)."""
    n, terms, un = ev["events"], len(ev["recovered_by_term"]), ev.get("untreated_recovered")
    big_n = n * terms
    if big_n == 0:
        return "with no loss-term branch, nothing could be detected"
    u = (un or 0) / n
    ks, kr, r = support_count(big_n), refute_count(big_n, u), detectable_rate(big_n, u)
    sup = (
        "no count of recoveries could support H2 (even 0 leaves the upper bound above the allowed rate)"
        if ks is None
        else f"H2 is supported at up to {ks} recoveries"
    )
    ref = (
        "no count could refute it"
        if kr is None
        else f"refuted from {kr}; the smallest repair rate the run would have detected (refuted with "
        f"probability {H2_POWER:.0%}) is {_pct(r)}, against the {_pct(H2_MAX_RATE)} the claim allows"
    )
    return f"with {n} events × {terms} loss terms = {big_n} branches, {sup}, {ref}"


def judge_h2_lines(ch, ev: dict, lo: float, hi: float) -> None:
    """Record what :func:`verdict_h2` reads against its lines, each held to its side of them (NaN where the
    rule has nothing to read): the pooled rate's one-sided upper bound ``hi`` (supported only at or below
    :data:`H2_MAX_RATE`), its lower bound ``lo`` less the untreated control's rate (refuted above it), the
    reversed ramp's lower bound less the same (the positive control must exceed it), and the hinge's median
    rho over the penalty's (the push, read against :data:`PUSH_RATIO`)."""
    n, un, rev = ev["events"], ev.get("untreated_recovered"), ev.get("reversed_ramp_recovered")
    u = None if un is None or not n else un / n
    nan = float("nan")
    rho = ev.get("rho_median") or {}
    h, pn = rho.get("hinge-1x"), rho.get("penalty-1x")
    for name, v, lines, what in (
        ("h2_upper_bound", hi, (H2_MAX_RATE,), "the pooled repair rate's one-sided upper bound"),
        (
            "h2_lower_minus_untreated",
            nan if u is None else lo - u,
            (H2_MAX_RATE,),
            "the pooled repair rate's one-sided lower bound less the untreated control's rate",
        ),
        (
            "h2_reversed_lower_minus_untreated",
            nan if u is None or rev is None else rate_bounds(rev, n)[0] - u,
            (H2_MAX_RATE,),
            "the reversed ramp's one-sided lower bound less the untreated control's rate (the positive "
            "control)",
        ),
        (
            "h2_hinge_over_penalty",
            h / pn if h is not None and pn else nan,
            (PUSH_RATIO,),
            "the hinge-1x median rho over the penalty-1x's (the push)",
        ),
    ):
        checks.against(
            ch,
            name,
            v,
            limits=lines,
            glue=False,
            note=f"{what}; RULE_H2 reads it against {lines[0]:g}",
        )
    checks.fragile_text(ch, "h2_upper_bound")


def judge_h2(ch, p, events: list[dict], summary: dict) -> str:
    """Record whether the 1x medians of rho follow the paper's order penalty < cosine < hinge; H2 by
    :data:`RULE_H2` under the paper's literal threshold (over the events where it lies above the collapse
    threshold) as a value (``h2_verdict_literal``, its reason glued as ``h2_reason_literal``); and H2 by
    :data:`RULE_H2` under the stricter threshold, which decides (reason ``h2_reason``), beside its control
    (the same rule on the reversed ramp, :func:`control_evidence`: ``h2_control_verdict``,
    ``h2_control_reason``) and the two earlier rules' verdicts. Glues the pooled rate's bounds, the allowed
    rate, the detectable rate (also recorded, ``h2_detectable_rate``) and the rule's power
    (``h2_power``). Returns the deciding verdict."""
    terms = loss_terms(p)
    rho = {t: summary[t]["rho_median"] for t in terms}
    order = (
        all(rho.get(k) is not None for k in ("penalty-1x", "cosine-1x", "hinge-1x"))
        and rho["penalty-1x"] < rho["cosine-1x"] < rho["hinge-1x"]
    )
    ch.value(
        "rho_order_penalty_cosine_hinge",
        order,
        note="the paper's ordering penalty < cosine < hinge (1x medians)",
    )
    lit = h2_evidence(p, events, summary, literal=True)
    v_lit, why_lit = verdict_h2(lit)
    # the literal reading is secondary (the stricter threshold decides) and moved between kernel variants at
    # smoke (avx2: refuted, the others inconclusive): recorded through the counts it reads, glued as a word
    ch.glue("h2_verdict_literal", v_lit)
    ch.value(
        "h2_literal_counts",
        {
            "events": lit["events"],
            "recovered_by_term": lit["recovered_by_term"],
            "untreated_recovered": lit["untreated_recovered"],
        },
        note="the counts H2's rule reads under the paper's literal threshold (recovery at half the healthy "
        "srank), over the events where that lies above the collapse threshold",
    )
    ch.glue("h2_reason_literal", why_lit)
    ch.glue("h2_literal_judged", lit["events"])
    ex = lit["excluded_seeds"]
    ch.glue(
        "h2_literal_excluded",
        "no event's literal threshold lies at or below the collapse threshold"
        if not ex
        else f"{len(ex)} of {len(events)} events (seed{'s' if len(ex) > 1 else ''} "
        + ", ".join(f"{s} at {t:.2f}" for s, t in ex.items())
        + f") {'has' if len(ex) == 1 else 'have'} a literal threshold at or below the collapse threshold "
        f"{p.threshold:g}: shown in the table, not judged",
    )
    ev = h2_evidence(p, events, summary)
    v, reason = verdict_h2(ev)
    ch.glue("h2_reason", reason)
    ctl = control_evidence(ev)
    v_ctl, why_ctl = verdict_h2(ctl)
    ch.glue("h2_control_verdict", v_ctl)
    ch.glue("h2_control_reason", why_ctl)
    across = h2_across_interval(ev)
    ch.glue("h2_interval", checks.interval_text(across))
    v_zero, why_zero = verdict_h2_zero(ev)
    v_fisher, why_fisher = verdict_h2_fisher(ev)
    # shown, not checked: the verdicts that changed with the machine or the rule (RULE_H2_CHANGE) cannot be
    # recorded as values that must hold elsewhere; they stay in the verdict's evidence
    ch.glue("h2_verdict_first_rule", v_zero)
    ch.glue("h2_reason_first_rule", why_zero)
    ch.glue("h2_verdict_fisher_rule", v_fisher)
    ch.glue("h2_reason_fisher_rule", why_fisher)
    ch.glue("h2_rule_change", RULE_H2_CHANGE)
    n, big_n = ev["events"], ev["events"] * len(terms)
    k = sum(ev["recovered_by_term"].values())
    u = (ev["untreated_recovered"] or 0) / n if n else 0.0
    lo, hi = rate_bounds(k, big_n) if big_n else (0.0, 1.0)
    det = detectable_rate(big_n, u) if big_n else None
    ch.glue("h2_max_rate_pct", 100 * H2_MAX_RATE)
    ch.glue("h2_conf_pct", 100 * H2_CONF)
    ch.glue("h2_power_pct", 100 * H2_POWER)
    ch.glue("h2_branches", big_n)
    ch.glue("h2_rate_pct", 100 * k / big_n if big_n else float("nan"))
    ch.glue("h2_lower_pct", 100 * lo)
    ch.glue("h2_upper_pct", 100 * hi)
    ch.value(
        "h2_detectable_rate",
        det,
        rtol=0.1,
        note="the smallest repair rate the pooled loss-term branches would have detected (refuted with "
        f"probability {H2_POWER:g}), from the number of branches and the untreated control's recovery rate",
        glue=False,
    )
    ch.glue("h2_detectable_pct", "–" if det is None else f"{100 * det:.0f}%")
    judge_h2_lines(ch, ev, lo, hi)
    ch.glue("h2_power", power_text(ev))
    cal_ok = all(summary[t]["calib_error"] <= CALIB_CHECK for t in terms)
    return ch.verdict(
        "H2",
        v,
        claim="no added loss term repairs the collapse, though the bounded one pushes hard",
        rule=RULE_H2,
        evidence=ev
        | {
            "rho_order_penalty_cosine_hinge": order,
            "calibration_within_5pct": cal_ok,
            "max_rate": H2_MAX_RATE,
            "pooled": {"recovered": k, "branches": big_n, "lower": lo, "upper": hi, "conf": H2_CONF},
            "detectable_rate": det,
            "power": power_text(ev),
            "control": {"on": H2_CONTROL_ON, "verdict": v_ctl, "reason": why_ctl},
            "literal": lit | {"verdict": v_lit, "reason": why_lit},
            "first_rule": {"rule": RULE_H2_ZERO, "verdict": v_zero, "reason": why_zero},
            "fisher_rule": {"rule": RULE_H2_FISHER, "verdict": v_fisher, "reason": why_fisher},
            "across_interval": across,
            "rule_change": RULE_H2_CHANGE,
            "reason": reason,
        },
    )


# -- Figure 6 middle: how rho changes along the line to the healthy network, beside a random direction ------
F6M_FACTOR = 2.0  # a change factor above this reads "rises", below its inverse "falls", between "flat"

RULE_F6M = (
    "For each 1x loss term and each direction from the saved collapse (the straight line towards the "
    "healthy network of the same seed; a Gaussian direction over all parameters of the same length), the "
    "change factor is the median over events of rho at t = 1 over rho at t = 0 (rho at a point: the median "
    "over the first batches the branches measure rho on, alpha held at alpha_min). It reads 'rises' where "
    f"the factor exceeds {F6M_FACTOR:g}, 'falls' where it lies below 1/{F6M_FACTOR:g}, and 'stays within a "
    f"factor {F6M_FACTOR:g}' between. The line differs from the random direction (its control, the same "
    "rule on the same events at the same distance) for a term where the two readings differ. Fixed before "
    "the first record of the figure"
)


def shape_word(factor: float) -> str:
    """The reading of :data:`RULE_F6M` for one change factor rho(t = 1) / rho(t = 0)."""
    if factor > F6M_FACTOR:
        return "rises"
    if factor < 1.0 / F6M_FACTOR:
        return "falls"
    return f"stays within a factor {F6M_FACTOR:g}"


def read_line(factors: dict) -> dict:
    """:data:`RULE_F6M` on ``{"line": {term: factor}, "random": {term: factor}}`` (median change factors):
    per term the reading along each direction and whether the line's differs from the random
    direction's."""
    out = {}
    for t, f in factors["line"].items():
        a, b = shape_word(f), shape_word(factors["random"][t])
        out[t] = {"line": a, "random": b, "differs": a != b}
    return out
