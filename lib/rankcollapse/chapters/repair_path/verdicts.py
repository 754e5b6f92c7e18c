"""Chapter `repair-path`, verdicts: each claim's rule (H3, H4, H5, H7, W1), as its stated text
(``RULE_<ID>``), its decision function (``verdict_<id>``), the thresholds it names and the control it reads
(H7's never-collapsed controls, :func:`h7_pairs`; H3's open-path networks, :func:`h3_evidence`); the previous
rules shown beside (``OLD_RULE_<ID>``, ``old_verdict_<id>``; H3's first rule, ``FIRST_RULE_H3``), the
functions that record each verdict (``judge_<id>``), :data:`VERDICTS` and :data:`SMOKE_VERDICT_NOTES`.
"""

from __future__ import annotations

import numpy as np

from ...book import checks
from ...repair.controls import control_collapsed
from ...repair.recovery import median_around
from .experiments import detection_lag_alpha

# -- verdicts ----------------------------------------------------------------------------------------------
# Each rule is a pure function of its evidence, verdict_<id>(evidence) -> (verdict, one-line reason),
# stated (RULE_<ID>) before the results of issue #17's runs; tests/test_verdicts_repair_path.py reaches every
# outcome of each on synthetic evidence. Where a rule replaced the chapter's previous one, OLD_RULE_<ID> and
# old_verdict_<id> give the previous rule's verdict on the same run, recorded beside.
QK_CLOSED = 0.01  # H3: the collapsed networks' Q/K task gradient below this share of the healthy one's
QK_OPEN = 0.1  # H3: a control whose Q/K task gradient keeps at least this share has an open path
# H3 (issue #42): the hinge is averaged over all blocks, so block 1's weights feed every block's term and the
# last block's feed one; its first-to-last gradient ratio is large on any network, collapsed or not (13-20x
# on untrained depth-12 networks at alpha 1, 19-41x at alpha 0.3, 5-10x at depth 6, measured for the issue
# with the path open). The fade counts for the collapse only where the collapsed networks' ratio exceeds the
# open-path networks' by this factor, set with issue #42 (item 2) after the smoke run's ratios had been seen
FADE_MARGIN = 3
HINGE_FADE = 10  # H3's previous rule (issue #17): the hinge's first-to-last ratio at least this, no baseline
OPEN_GROUPS = ("healthy", "unsettled")  # H3's open-path networks (verdict_h3's ``open_fades`` keys)
OPEN_LABEL = {
    "healthy": "the healthy network of each event's seed at the event's step",
    "unsettled": "the same-depth drivers that did not settle and stayed uncollapsed",
}
# H5 (issue #42): the exact sign test's one-sided level, either way, and the power at which the smallest
# detectable effect is stated; the timing margin is measured in the run (h5_margin), no longer set here
H5_LEVEL = 0.05
H5_POWER = 0.8
H5_OLD_MARGIN = 50  # H5's previous rule: steps, citing a +-25-40-step within-seed spread (issue #17)
H5_FIRST_MARGIN = 20  # H5's first rule: steps
H7_SUPPORT, H7_REFUTE = 0.05, 0.01  # H7: nats of excess loss over the never-collapsed control

RULE_H3 = (
    "with r = the collapsed networks' median Q/K task gradient (median over blocks, then events) over the "
    "healthy networks', fade = the median over events of the hinge's gradient on the attention input in the "
    "first block over the last, and the same ratio of the same hinge (s0 = the healthy Q at that step) on "
    "networks with the path open: the healthy network of each event's seed at the event's step (alpha 1) "
    "and the same-depth drivers that did not settle and stayed uncollapsed (at their end, alpha_min); "
    "B = the larger of the two kinds' medians (a kind with no network left out). Refuted if r >= 1/3 or "
    "fade < 1; inconclusive if no open-path network was measured (the fade has no baseline); else, with the "
    "Q/K controls (per event seed, a network of depth control_depth driven through the same ramp to the "
    "same alpha_min; and the same-depth drivers that did not settle; one that collapsed, by its detector or "
    "a final 10-measurement median srank below the threshold, is no control) and c = each kind's median "
    "over its uncollapsed controls of their Q/K task gradient at alpha_min over the healthy network's of "
    f"the same seed: inconclusive if no control stayed uncollapsed, or if c < {QK_OPEN:g} for either kind "
    "(the small alpha alone closes the path, so the closure cannot be blamed on the collapse); supported "
    f"if r < {QK_CLOSED:g} and fade / B > {FADE_MARGIN:g} (the hinge fades more than its averaging over "
    "blocks makes it fade on an open path); else inconclusive"
)
OLD_RULE_H3 = (
    "with r = the collapsed networks' median Q/K task gradient (median over blocks, then events) over the "
    "healthy networks' and fade = the hinge's gradient in the first block over the last (medians over "
    "events): refuted if r >= 1/3 or fade < 1; else, with the control (per event seed, a network of "
    "depth control_depth driven through the same ramp to the same alpha_min; one that collapsed, by its "
    "detector or a final 10-measurement median srank below the threshold, is no control) and c = the median "
    "over the "
    "uncollapsed controls of their Q/K task gradient at alpha_min over the healthy network's of the same "
    f"seed: inconclusive if no control stayed uncollapsed, or if c < {QK_OPEN:g} (the small alpha alone "
    f"closes the path, so the closure cannot be blamed on the collapse); supported if r < {QK_CLOSED:g} and "
    f"fade >= {HINGE_FADE}; else inconclusive"
)
FIRST_RULE_H3 = (
    "supported if the collapsed networks' median Q/K task gradient is below 1/100 of the healthy one's and "
    "the hinge's gradient is at least 10x larger in the first block than in the last; refuted if the Q/K "
    "ratio is at least 1/3 or the hinge's gradient grows towards the last block; else inconclusive (no "
    "control)"
)
RULE_H3_CHANGE = (
    "The hinge is averaged over all blocks, so the first block's weights feed every block's term and the "
    "last block's feed only its own: its first-to-last gradient ratio is large on any network, collapsed or "
    f"not. The previous rule's fixed {HINGE_FADE}x lay below what networks with the path open show (issue "
    "#42), so its fade could not fail for want of a collapse. The fade now counts only where the collapsed "
    "networks' ratio exceeds the same ratio on open-path networks of the same depth by the factor "
    f"{FADE_MARGIN:g}, set after the smoke run's ratios had been seen (not the full run's); the same-depth "
    "drivers that did not settle join the Q/K "
    "control"
)
H3_CONTROL_ON = (
    "the open-path networks in place of the collapsed ones: the healthy network of each event's seed at the "
    "event's step and the same-depth drivers that did not settle"
)
QK_KINDS = {"shallower": "shallower controls", "same depth": "same-depth drivers that did not settle"}


def fade_of(first: float, last: float) -> float:
    """The hinge's gradient in the first block over the last (inf when the last is zero)."""
    return first / last if last > 0 else float("inf")


def _fade(ev: dict) -> float:
    return fade_of(ev["hinge_first"], ev["hinge_last"])


def _kind(c: dict) -> str:
    return c.get("kind", "shallower")


def open_baseline(open_fades: dict) -> tuple[float | None, dict]:
    """H3's open-path baseline: per kind of open-path network (:data:`OPEN_GROUPS`) with at least one
    network, the median of their hinge ratios, and the largest of those (None: no open-path network)."""
    meds = {g: float(np.median(v)) for g, v in open_fades.items() if len(v)}
    return (max(meds.values()) if meds else None), meds


def _qk_controls(ctl: list[dict]) -> tuple[dict, dict]:
    """Per kind of Q/K control present: (uncollapsed, all) counts, and the median Q/K ratio of the
    uncollapsed (None: none stayed uncollapsed)."""
    counts, meds = {}, {}
    for k in dict.fromkeys(_kind(c) for c in ctl):
        rows = [c for c in ctl if _kind(c) == k]
        ok = [c["qk_ratio"] for c in rows if not c["collapsed"]]
        counts[k] = (len(ok), len(rows))
        meds[k] = float(np.median(ok)) if ok else None
    return counts, meds


def _qk_control_text(ctl: list[dict], counts: dict, meds: dict) -> str:
    parts = []
    for k, (n_ok, n) in counts.items():
        depth = next(c["depth"] for c in ctl if _kind(c) == k)
        what = f"depth-{depth} {QK_KINDS.get(k, k)}"
        parts.append(
            f"the uncollapsed {what} ({n_ok} of {n}) keep Q/K at {meds[k]:.2g} of healthy"
            if n_ok
            else f"{n} of {n} {what} collapsed themselves"
        )
    return "; ".join(parts) if parts else "no Q/K control was run"


def verdict_h3(ev: dict) -> tuple[str, str]:
    """H3 (:data:`RULE_H3`) from ``qk_ratio`` (:func:`record_block_grads`), ``fades`` (the collapsed
    networks' hinge ratio, first block over last, one per event), ``open_fades`` (``{kind: [ratio per
    open-path network]}``, kinds :data:`OPEN_GROUPS`) and ``qk_controls`` (:func:`control_rows`: per
    control ``kind``, ``depth``, ``collapsed``, ``qk_ratio``)."""
    r = ev["qk_ratio"]
    fade = float(np.median(ev["fades"]))
    base, meds = open_baseline(ev["open_fades"])
    who = ev.get("judged", "collapsed")
    text = f"{who} Q/K gradient {r:.2g} of healthy, hinge {fade:.3g}x larger in the first block than last"
    if base is not None:
        opened = ", ".join(f"{g} {m:.3g}x" for g, m in meds.items())
        text += f" against {base:.3g}x on an open path ({opened}): {fade / base:.2g} of it"
    if r >= 1 / 3:
        return "refuted", f"the task gradient still reaches Q/K: {text}"
    if fade < 1:
        return "refuted", f"the hinge's gradient grows toward the collapsing blocks: {text}"
    if base is None:
        return "inconclusive", f"no open-path network measured, so the fade has no baseline: {text}"
    ctl = ev["qk_controls"]
    counts, cmeds = _qk_controls(ctl)
    ctext = f"{text}; {_qk_control_text(ctl, counts, cmeds)}"
    if not any(n_ok for n_ok, _ in counts.values()):
        return "inconclusive", f"no control: {ctext}"
    closed = [k for k, c in cmeds.items() if c is not None and c < QK_OPEN]
    if closed:
        return "inconclusive", f"the small alpha alone closes the path: {ctext}"
    if r < QK_CLOSED and fade > FADE_MARGIN * base:
        return (
            "supported",
            f"the path is closed by the collapse, not the small alpha, and the hinge fades more than on an "
            f"open path: {ctext}",
        )
    if r < QK_CLOSED:
        return (
            "inconclusive",
            f"the Q/K path is closed by the collapse, but the hinge fades no more than {FADE_MARGIN:g}x its "
            f"fade on an open path (its averaging over blocks): {ctext}",
        )
    return "inconclusive", f"the path is not closed far enough: {ctext}"


def old_verdict_h3(ev: dict) -> tuple[str, str]:
    """The previous H3 rule (:data:`OLD_RULE_H3`, issue #17): the fade read against a fixed
    :data:`HINGE_FADE` (from ``hinge_first``, ``hinge_last``, medians over events) and the Q/K control of
    shallower networks alone. Kept to show its verdict beside the new one."""
    r, fade = ev["qk_ratio"], _fade(ev)
    text = (
        f"collapsed Q/K gradient {r:.2g} of healthy, hinge {fade:.3g}x larger in the first block than last"
    )
    if r >= 1 / 3:
        return "refuted", f"the task gradient still reaches Q/K: {text}"
    if fade < 1:
        return "refuted", f"the hinge's gradient grows toward the collapsing blocks: {text}"
    ctl = [c for c in ev["qk_controls"] if _kind(c) == "shallower"]
    ok = [c for c in ctl if not c["collapsed"]]
    depth = ctl[0]["depth"] if ctl else "?"
    if not ok:
        return (
            "inconclusive",
            f"no control: {len(ctl)} of {len(ctl)} depth-{depth} controls collapsed themselves ({text})",
        )
    c = float(np.median([x["qk_ratio"] for x in ok]))
    ctext = (
        f"{text}; the uncollapsed depth-{depth} controls ({len(ok)} of {len(ctl)}) keep Q/K at {c:.2g} of "
        "healthy"
    )
    if c < QK_OPEN:
        return "inconclusive", f"the small alpha alone closes the path: {ctext}"
    if r < QK_CLOSED and fade >= HINGE_FADE:
        return "supported", f"the path is closed by the collapse, not the small alpha: {ctext}"
    return "inconclusive", f"the path is not closed far enough or the hinge does not fade enough: {ctext}"


def first_verdict_h3(ev: dict) -> str:
    """The first H3 rule (:data:`FIRST_RULE_H3`): no control, so a path closed by the small alpha itself
    counted for the collapse. Kept to show its verdict beside the new one."""
    r, fade = ev["qk_ratio"], _fade(ev)
    if r < QK_CLOSED and fade >= HINGE_FADE:
        return "supported"
    if r >= 1 / 3 or fade < 1:
        return "refuted"
    return "inconclusive"


def control_evidence_h3(ev: dict) -> dict | None:
    """The evidence of H3's control (:data:`H3_CONTROL_ON`): the open-path networks in the collapsed
    networks' place, their Q/K ratio (median over them of each one's median-over-blocks Q/K task gradient
    over its seed's healthy network's, ``open_qk_ratios``) and their hinge ratios pooled, judged against the
    same baseline and Q/K controls (``judged`` names them in the reason). None without an open-path
    network."""
    qks = [x for v in ev["open_qk_ratios"].values() for x in v]
    fades = [x for v in ev["open_fades"].values() for x in v]
    if not qks or not fades:
        return None
    return ev | {"qk_ratio": float(np.median(qks)), "fades": fades, "judged": "open-path networks'"}


RULE_H4 = (
    "with f = the median Q/K task gradient right after switching to the first probe alpha over that at the "
    "collapse, alpha_col = the median over events of alpha at the driver's first crossing of the collapse "
    "threshold, and alpha_rec = the smallest held switch alpha at which at least half the events recover "
    "within the branch: refuted if f < 2; inconclusive (unreachable refutation) if no held alpha lies at or "
    "below 1.5 alpha_col, or if no held alpha recovers half the events; refuted if alpha_rec <= 1.5 "
    "alpha_col; supported if f >= 5 and alpha_rec >= 3 alpha_col; else inconclusive. The reversed ramp's "
    "recovery alpha is reported, not decisive (most of it is response and detection lag)"
)
OLD_RULE_H4 = (
    "supported if switching to the first probe alpha raises the median Q/K gradient at least 5x before any "
    "update and the reversed ramp recovers in at least half the events, every one at an alpha at least 3x "
    "the alpha of collapse; refuted if the rise is under 2x or some recovery happens below 1.5x the alpha "
    "of collapse; else inconclusive"
)


def verdict_h4(ev: dict) -> tuple[str, str]:
    """H4 from ``reopen_factor``, ``alpha_col`` and ``held`` (``[[alpha, recovered, events], ...]``)."""
    f, acol = ev["reopen_factor"], ev["alpha_col"]
    held = sorted(ev["held"])
    grid = ", ".join(f"{a:g}: {r} of {n}" for a, r, n in held)
    if f < 2:
        return "refuted", f"the switch barely reopens the path: Q/K gradient up {f:.3g}x"
    if not held or held[0][0] > 1.5 * acol * (1 + 1e-9):  # 0.03 against 1.5 x 0.02: round-off is no margin
        lo = held[0][0] if held else float("nan")
        return (
            "inconclusive",
            f"unreachable refutation: the lowest held alpha {lo:g} lies above 1.5x the alpha of collapse "
            f"{acol:.3g} (recovered per held alpha: {grid})",
        )
    rec = [a for a, r, n in held if n and 2 * r >= n]
    if not rec:
        return (
            "inconclusive",
            f"no held alpha recovers half the events, so the recovery scale is not located ({grid}; alpha "
            f"of collapse {acol:.3g})",
        )
    arec = rec[0]
    text = (
        f"Q/K gradient up {f:.3g}x at the switch; recovery in at least half the events from alpha {arec:g}, "
        f"{arec / acol if acol > 0 else float('inf'):.3g}x the alpha of collapse {acol:.3g} ({grid})"
    )
    if arec <= 1.5 * acol:
        return "refuted", f"the rank recovers near the collapse scale: {text}"
    if f >= 5 and arec >= 3 * acol:
        return "supported", f"the path reopens at once, the rank only far above the collapse scale: {text}"
    return "inconclusive", f"recovery neither near nor far above the collapse scale: {text}"


H4_CONTROL_KINDS = ("shallower", "same depth")  # reopen_control_rows' kinds that reach alpha_min
H4_CONTROL_ON = (
    "the networks driven through the same ramp to the same alpha_min that did not collapse (H3's shallower "
    "Q/K controls and the same-depth drivers that did not settle), switched to the first probe alpha: their "
    "reopening factor in place of the collapsed networks' (the held switches, which only a collapsed "
    "network has, unchanged)"
)


def reopen_factor_of(rows: list[dict], kinds) -> tuple[float | None, int, int]:
    """The reopening factor of :data:`RULE_H4` over the uncollapsed networks of ``kinds`` among ``rows``
    (:func:`reopen_control_rows`): the median Q/K task gradient right after the switch to the first probe
    alpha over the median at alpha_min; with (uncollapsed, all) counts. None: no uncollapsed network."""
    rows_k = [r for r in rows if r["kind"] in kinds]
    ok = [r for r in rows_k if not r["collapsed"]]
    if not ok:
        return None, 0, len(rows_k)
    lo = float(np.median([r["qk_min"] for r in ok]))
    hi = float(np.median([r["qk_switched"] for r in ok]))
    return (hi / lo if lo > 0 else float("inf")), len(ok), len(rows_k)


def control_evidence_h4(ev: dict, rows: list[dict]) -> dict | None:
    """The evidence of H4's control (:data:`H4_CONTROL_ON`): ``ev`` with the reopening factor of the
    networks that reached alpha_min uncollapsed (:func:`reopen_factor_of`, kinds :data:`H4_CONTROL_KINDS`)
    in the collapsed networks' place. None without such a network."""
    f, _, _ = reopen_factor_of(rows, H4_CONTROL_KINDS)
    return None if f is None else ev | {"reopen_factor": f}


def old_verdict_h4(ev: dict) -> str:
    """The previous H4 rule (:data:`OLD_RULE_H4`) on ``reopen_factor``, ``ratios`` (the reversed ramp's
    recovery alpha over the alpha of collapse, per recovered event) and ``events``: the ramp's recovery alpha
    was mostly response lag and a recovery below 3x the 0.02 floor could not be detected in time, so half of
    it could not fail. Kept to show its verdict beside the new one."""
    f, ratios = ev["reopen_factor"], [x for x in ev["ratios"] if x is not None]
    if f < 2 or (ratios and min(ratios) < 1.5):
        return "refuted"
    if f >= 5 and len(ratios) * 2 >= ev["events"] and ratios and min(ratios) >= 3:
        return "supported"
    return "inconclusive"


RULE_H5 = (
    "over every delay alpha whose undelayed held switch recovered in a share of events strictly between 0 "
    "and 1 (recovery uncertain; none: inconclusive), one pair per event and such alpha: the switch after "
    "the longest delay against the undelayed one. The timing margin M is measured in the run: per event and "
    "such alpha, the undelayed switch is run again from the saved collapse continued untreated for one "
    "measurement interval (10 steps) more (a replicate), and M = the largest difference in steps to "
    "recovery between a replicate and its original, over those that recovered both times (none: "
    "inconclusive, M is not measured). A pair is slower if it recovered undelayed but not after the delay, "
    "or both recovered and the delayed one took more than M steps longer; faster if the reverse; the same "
    "within M steps; no outcome if neither recovered. With m = the pairs with an outcome and k = the slower "
    "ones ('the same' counts as not slower, with 'faster'), and X ~ Binomial(m, 1/2) (the exact sign test): "
    f"supported if P(X >= k) <= {H5_LEVEL:g} (more than half the pairs slowed, at one-sided level "
    f"{H5_LEVEL:g}); refuted if P(X <= k) <= {H5_LEVEL:g} (a slowing of half the pairs or more is excluded "
    "at the same level); else inconclusive (with fewer than 5 pairs with an outcome neither can be reached)"
)
H5_CONTROL_ON = (
    "the replicate pairs: each replicate read as the delayed switch against its original (a delay of one "
    "measurement interval, at which no slowing is expected), a pair that recovered both times against the "
    "margin measured on the other replicate pairs"
)
RULE_H5_CHANGE = (
    "The previous rule decided at one alpha (full: 0.15, three events with an outcome, where an exact sign "
    "test cannot go below p = 0.125) and its 50-step margin cited a run-to-run spread (+-25-40 steps) that "
    "the build measured nowhere. The rule now pools every alpha where recovery is uncertain, decides with "
    "an exact sign test at a stated level, and measures its margin in the run on replicates of the "
    "undelayed switch. It was changed with issue #42, after the previous rule's verdicts (smoke and full) "
    "had been seen"
)


def h5_outcome(t0: int | None, tmax: int | None, margin: float, *, beyond: bool = True) -> str:
    """One pair's reading: ``slower``, ``faster``, ``same`` or ``none``. ``beyond``: a difference counts
    only beyond ``margin`` (:data:`RULE_H5`); else from ``margin`` on (the previous rule)."""
    if t0 is None and tmax is None:
        return "none"
    if tmax is None:
        return "slower"
    if t0 is None:
        return "faster"
    d = tmax - t0
    if (d > margin) if beyond else (d >= margin):
        return "slower"
    if (-d > margin) if beyond else (-d >= margin):
        return "faster"
    return "same"


def h5_margin(replicates: list[dict]) -> int | None:
    """H5's timing margin: the largest difference in steps to recovery between a replicate (``trep``) and
    its original (``t0``) over the pairs that recovered both times; None: no such pair."""
    d = [abs(r["trep"] - r["t0"]) for r in replicates if r["t0"] is not None and r["trep"] is not None]
    return max(d) if d else None


def sign_thresholds(m: int, level: float = H5_LEVEL) -> tuple[int | None, int | None]:
    """The exact sign test over ``m`` pairs: the fewest slower pairs with P(X >= k) <= ``level`` (the rule
    says 'supported' from there) and the most with P(X <= k) <= ``level`` ('refuted' up to there), X ~
    Binomial(m, 1/2); None where no count reaches it."""
    from scipy.stats import binom

    sup = next((k for k in range(m + 1) if binom.sf(k - 1, m, 0.5) <= level), None) if m else None
    ref = next((k for k in range(m, -1, -1) if binom.cdf(k, m, 0.5) <= level), None) if m else None
    return sup, ref


def detectable_share(m: int, level: float = H5_LEVEL, power: float = H5_POWER) -> float | None:
    """The smallest effect the rule detects over ``m`` pairs with an outcome: the true share of slowed
    pairs at which it says 'supported' (at least :func:`sign_thresholds`' count) with probability
    ``power``, each pair slowed independently; None when no count supports (m < 5 at 0.05)."""
    from scipy.stats import binom

    k = sign_thresholds(m, level)[0]
    if k is None:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):  # P(at least k of m) rises with the share: bisect
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if binom.sf(k - 1, m, mid) >= power else (mid, hi)
    return hi


def h5_counts(ev: dict) -> dict:
    """:func:`verdict_h5`'s reading of its pairs: the margin ``M`` (:func:`h5_margin`), the per-pair
    outcomes (a pair's own ``margin`` where it carries one, as the control's do), their counts, ``m``, the
    sign test's one-sided p-values either way and its thresholds."""
    from scipy.stats import binom

    M = h5_margin(ev["replicates"])
    kinds = [
        "none" if M is None else h5_outcome(x["t0"], x["tmax"], x.get("margin", M)) for x in ev["pairs"]
    ]
    k, m = kinds.count("slower"), sum(x != "none" for x in kinds)
    sup, ref = sign_thresholds(m)
    return {
        "margin": M,
        "outcomes": kinds,
        "slower": k,
        "faster": kinds.count("faster"),
        "same": kinds.count("same"),
        "none": kinds.count("none"),
        "m": m,
        "p_slower": float(binom.sf(k - 1, m, 0.5)) if m else None,
        "p_not_slower": float(binom.cdf(k, m, 0.5)) if m else None,
        "support_from": sup,
        "refute_up_to": ref,
        "detectable_share": detectable_share(m),
    }


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def verdict_h5(ev: dict) -> tuple[str, str]:
    """H5 (:data:`RULE_H5`) from ``alphas`` (the delay alphas where recovery is uncertain), ``fractions``
    (per delay alpha ``[recovered, events]`` undelayed), ``longest_delay``, ``pairs`` (per event and alpha:
    ``t0``, ``tmax``, steps to recovery undelayed and after the longest delay, None: none within the
    branch; the control's carry their own ``margin``) and ``replicates`` (``t0``, ``trep``: the original's
    and the replicate's steps to recovery). ``judged`` names what the pairs are, for the reason."""
    fr = ", ".join(f"{a}: {r} of {n}" for a, (r, n) in ev["fractions"].items())
    if not ev["alphas"]:
        return (
            "inconclusive",
            f"recovery is certain or impossible at every delay alpha (undelayed switches recovered: {fr})",
        )
    c = h5_counts(ev)
    nrep = sum(r["t0"] is not None and r["trep"] is not None for r in ev["replicates"])
    al = ", ".join(f"{a:g}" for a in ev["alphas"])
    if c["margin"] is None:
        return (
            "inconclusive",
            f"the timing margin is not measured: none of {len(ev['replicates'])} replicates at alpha {al} "
            "recovered both times",
        )
    who = ev.get("judged", f"after {ev['longest_delay']} further collapsed steps")
    within = (
        "within the margin of the other replicate pairs"
        if "judged" in ev
        else f"within M = {c['margin']} steps (the largest of {nrep} replicate differences)"
    )
    text = (
        f"at alpha {al}, {who}: {c['slower']} of {c['m']} pairs with an outcome slower, {c['faster']} "
        f"faster, {c['same']} the same {within} ({c['none']} recovered neither time)"
    )
    if c["support_from"] is None:
        return (
            "inconclusive",
            f"too few pairs with an outcome for the sign test to reach {H5_LEVEL:g} either way: {text}",
        )
    text += (
        f"; sign test one-sided p = {c['p_slower']:.3g} for slowing, {c['p_not_slower']:.3g} against "
        f"(supported from {c['support_from']} slower, refuted up to {c['refute_up_to']}; detects a slowed "
        f"share of {_pct(c['detectable_share'])} with {H5_POWER:.0%} power)"
    )
    if c["p_slower"] <= H5_LEVEL:
        return "supported", f"the delay slows recovery in more than half the pairs: {text}"
    if c["p_not_slower"] <= H5_LEVEL:
        return "refuted", f"a slowing of half the pairs or more is excluded: {text}"
    return "inconclusive", f"the pairs neither show nor exclude a slowing of most recoveries: {text}"


def control_evidence_h5(ev: dict) -> dict | None:
    """The evidence of H5's control (:data:`H5_CONTROL_ON`): the replicate pairs in place of the delayed
    ones, each replicate as the 'delayed' switch (``tmax`` = ``trep``) against its original, a pair that
    recovered both times read against the margin of the other replicate pairs (:func:`h5_margin` without
    it; when it is the only one, with it, so it reads 'the same'), so no pair sets its own margin. None
    without a replicate."""
    reps = ev["replicates"]
    if not reps:
        return None
    pairs = []
    for i, r in enumerate(reps):
        x = {"seed": r["seed"], "alpha": r["alpha"], "t0": r["t0"], "tmax": r["trep"]}
        if r["t0"] is not None and r["trep"] is not None:
            others = h5_margin(reps[:i] + reps[i + 1 :])
            x["margin"] = abs(r["trep"] - r["t0"]) if others is None else others
        pairs.append(x)
    return ev | {
        "pairs": pairs,
        "longest_delay": ev.get("replicate_shift", 10),
        "judged": f"each replicate ({ev.get('replicate_shift', 10)} steps later) against its original",
    }


OLD_RULE_H5 = (
    "at the delay alpha whose undelayed held switch recovered in a share of events strictly between 0 "
    "and 1 and closest to 1/2 (ties: the lower alpha; none: inconclusive, recovery is certain or "
    "impossible at every delay alpha), per event, the switch after the longest delay against the undelayed "
    "one: slower if it recovered undelayed but not after the delay, or both recovered and the delayed one "
    f"took at least {H5_OLD_MARGIN} steps longer; faster if the reverse; the same within {H5_OLD_MARGIN} "
    "steps; no outcome if neither recovered. With m = the events with an outcome: inconclusive if m < 2; "
    "supported if none is faster and more than half of the m are slower; refuted if no more are slower "
    "than faster and more than half of the m are faster or the same; else inconclusive"
)


def old_verdict_h5(ev: dict) -> tuple[str, str]:
    """The previous H5 rule (:data:`OLD_RULE_H5`, issue #17) from ``alpha`` (None: no delay alpha neither
    certain nor impossible), ``fractions``, ``longest_delay`` and ``events`` (``t0``, ``tmax``): one alpha,
    a cited 50-step margin. Kept to show its verdict beside the new one."""
    fr = ", ".join(f"{a}: {r} of {n}" for a, (r, n) in ev["fractions"].items())
    if ev["alpha"] is None:
        return (
            "inconclusive",
            f"recovery is certain or impossible at every delay alpha (undelayed switches recovered: {fr})",
        )
    kinds = [h5_outcome(e["t0"], e["tmax"], H5_OLD_MARGIN, beyond=False) for e in ev["events"]]
    m = sum(k != "none" for k in kinds)
    n_s, n_f, n_e = kinds.count("slower"), kinds.count("faster"), kinds.count("same")
    text = (
        f"at alpha {ev['alpha']:g} after {ev['longest_delay']} further collapsed steps, {n_s} of {m} events "
        f"with a recovery slower, {n_f} faster, {n_e} the same within {H5_OLD_MARGIN} steps "
        f"({len(kinds) - m} recovered neither time)"
    )
    if m < 2:
        return "inconclusive", f"too few events with a recovery: {text}"
    if n_f == 0 and 2 * n_s > m:
        return "supported", f"the delay slows recovery: {text}"
    if n_s <= n_f and 2 * (n_f + n_e) > m:
        return "refuted", f"the delay does not slow recovery: {text}"
    return "inconclusive", f"the delay's effect is mixed: {text}"


FIRST_RULE_H5 = (
    "at alpha = 0.3 (else the largest delayed alpha), per event: steps to recovery after the longest delay "
    "minus undelayed (no recovery = branch length + 10); supported if no event recovers 20 or more steps "
    "faster after the delay and more than half recover 20 or more steps slower (or not at all); refuted if "
    "more than half recover 20 or more steps faster; inconclusive otherwise or if no switch at that alpha "
    "recovered"
)


def first_verdict_h5(eff: dict, margin: int = H5_FIRST_MARGIN) -> str:
    """The chapter's first H5 rule (:data:`FIRST_RULE_H5`) on :func:`delay_effect` at :func:`h5_alpha`: its
    alpha could sit where recovery is certain or impossible, and its 20-step margin was set without a
    measured spread. Kept to show its verdict beside the new one."""
    ev = eff["events"]
    if not ev or not eff["any_recovered"]:
        return "inconclusive"
    slower = sum(e["diff"] >= margin for e in ev)
    faster = sum(e["diff"] <= -margin for e in ev)
    if faster == 0 and 2 * slower > len(ev):
        return "supported"
    if 2 * faster > len(ev):
        return "refuted"
    return "inconclusive"


RULE_H7 = (
    "over the switch branches at the h7_control_alphas that recovered within the branch (held, and "
    "delayed where the control reaches their end), each beside its control: the same model and seed ramped "
    "only down to that alpha and held there, never collapsed (one whose detector settled, or whose final "
    "10-measurement median srank lies below the threshold, is no control, and its branches leave the "
    "test); excess = the branch's final probe loss minus the control's at the same step; "
    f"supported if the median excess exceeds {H7_SUPPORT:g} nats, refuted if it is below {H7_REFUTE:g} "
    "nats, inconclusive in between or when no recovered branch has a control"
)
OLD_RULE_H7 = (
    "over the switch branches (held and delayed) that recovered: supported if the median final probe-loss "
    "gap to the healthy network (alpha = 1) at the same step exceeds 0.05 nats, refuted if below 0.01; "
    "inconclusive if none recovered (the alpha held after the switch was not controlled for)"
)


def verdict_h7(ev: dict) -> tuple[str, str]:
    """H7 from ``pairs`` (per recovered branch with a valid control: ``excess`` and ``gap_healthy``, nats),
    ``recovered`` (recovered branches at the control alphas) and ``alphas``."""
    ex = [x["excess"] for x in ev["pairs"]]
    al = ", ".join(f"{a:g}" for a in ev["alphas"])
    if not ex:
        return (
            "inconclusive",
            f"no recovered switch at alpha {al} has a never-collapsed control ({ev['recovered']} recovered)",
        )
    m = float(np.median(ex))
    gh = float(np.median([x["gap_healthy"] for x in ev["pairs"]]))
    who = ev.get("judged", "recovered switches")
    text = (
        f"median excess over the control held at the same alpha {m:.3f} nats (range {min(ex):.3f} to "
        f"{max(ex):.3f}) over {len(ex)} of {ev['recovered']} {who} at alpha {al}; against the "
        f"healthy network {gh:.3f}"
    )
    if m > H7_SUPPORT:
        return "supported", f"the loss stays above the control: {text}"
    if m < H7_REFUTE:
        return "refuted", f"the loss returns to the control's: {text}"
    return "inconclusive", f"a small excess: {text}"


def old_verdict_h7(gaps: list[float]) -> str:
    """The previous H7 rule (:data:`OLD_RULE_H7`) on the recovered branches' gaps to the healthy network."""
    if not gaps:
        return "inconclusive"
    g = float(np.median(gaps))
    return "supported" if g > 0.05 else "refuted" if g < 0.01 else "inconclusive"


H7_NULL_ON = (
    "a null pairing with no collapse history: per control alpha and event seed, the never-collapsed control "
    "of the next event seed (cyclically) at the same alpha, at its end and on this seed's probe batch, in "
    "place of a recovered switch, against this seed's own control at the same step"
)
H7_NULL_JUDGED = "null pairs (another seed's never-collapsed network against this seed's control)"

W1_CONTROL_ON = (
    "a constructed positive control: the healthy network of each event's seed with every weight matrix of "
    "every block cut to rank one by its SVD, at alpha 1, in the collapsed network's place, measured the "
    "same way"
)


def control_evidence_w1(ev: dict, rank_one: dict) -> dict:
    """The evidence of W1's control (:data:`W1_CONTROL_ON`): ``ev`` with the rank-one networks' ratios to
    the healthy ones (``rank_one``: ``w_vs_healthy``, ``token_vs_healthy``, :func:`record_rank_one`) in the
    collapsed networks' place."""
    return ev | {
        "w_collapsed_vs_healthy": rank_one["w_vs_healthy"],
        "token_collapsed_vs_healthy": rank_one["token_vs_healthy"],
        "judged": "rank-one",
    }


RULE_W1 = (
    "supported if training lowers the healthy network's weight stable rank below 0.7 of initial (median "
    "over matrices) while the collapsed network's token srank is below 0.7 of the healthy one's but its "
    "weight stable rank stays within 0.5-2x the healthy one's; refuted if the collapsed network's token "
    "srank is below 0.7 of the healthy one's and its weight stable rank is also below 0.5 of the healthy "
    "one's; else inconclusive"
)


def verdict_w1(ev: dict) -> tuple[str, str]:
    """W1 from the ratios of :func:`record_weight_ranks`."""
    wi, wc, tc = ev["w_healthy_vs_init"], ev["w_collapsed_vs_healthy"], ev["token_collapsed_vs_healthy"]
    who = ev.get("judged", "collapsed")
    text = (
        f"healthy weights at {wi:.2f} of their initial stable rank; {who} weights {wc:.2f}x the healthy "
        f"ones' while the {who} tokens' srank is {tc:.2f} of the healthy ones'"
    )
    if wi < 0.7 and tc < 0.7 and 0.5 <= wc <= 2.0:
        return "supported", f"the token rank collapses while the weight rank does not: {text}"
    if tc < 0.7 and wc < 0.5:
        return "refuted", f"the weight rank collapses with the token rank: {text}"
    return "inconclusive", f"no clean separation: {text}"


SMOKE_VERDICT_NOTES: dict[str, str] = {}  # smoke and full agree on every claim (H3 and H5 both inconclusive)
VERDICTS = {"H3": verdict_h3, "H4": verdict_h4, "H5": verdict_h5, "H7": verdict_h7, "W1": verdict_w1}


def h3_evidence(at_collapse: dict, ctl: list[dict], open_rows: list[dict]) -> dict:
    """H3's evidence: :func:`record_block_grads`' summaries with the collapsed networks' hinge ratio per
    event (``fades``), the open-path networks' (:func:`open_path_rows`; ``open_fades`` and their Q/K ratios
    ``open_qk_ratios`` per kind, a same-depth driver that collapsed after all left out of both) and the Q/K
    controls (``qk_controls``: the shallower controls of :func:`control_rows` and the same-depth drivers that
    did not settle)."""
    ok = [o for o in open_rows if not o["collapsed"]]
    return {
        "qk_ratio": at_collapse["qk_ratio"],
        "qk_collapsed": at_collapse["qk_collapsed"],
        "qk_healthy": at_collapse["qk_healthy"],
        "numerically_zero_blocks": at_collapse["numerically_zero_blocks"],
        "hinge_first": at_collapse["hinge_first"],
        "hinge_last": at_collapse["hinge_last"],
        "fades": list(at_collapse["fades"].values()),
        "fade_seeds": list(at_collapse["fades"]),
        "open_fades": {g: [o["fade"] for o in ok if o["kind"] == g] for g in OPEN_GROUPS},
        "open_qk_ratios": {g: [o["qk_ratio"] for o in ok if o["kind"] == g] for g in OPEN_GROUPS},
        "open_seeds": {g: [o["seed"] for o in ok if o["kind"] == g] for g in OPEN_GROUPS},
        "qk_controls": ctl + [o["qk_control"] for o in open_rows if o["kind"] == "unsettled"],
    }


def judge_h3(ch, at_collapse: dict, ctl: list[dict], open_rows: list[dict]) -> str:
    """H3 (:func:`verdict_h3`) on :func:`h3_evidence`, beside its control (the same rule with the
    open-path networks in the collapsed ones' place, :func:`control_evidence_h3`); the previous rule's
    verdict and reason (:func:`old_verdict_h3`, recorded as ``h3_old_rule_verdict``) and the first rule's
    (:func:`first_verdict_h3`, glued as ``h3_first_rule_verdict``, kept in the evidence) beside."""
    ev = h3_evidence(at_collapse, ctl, open_rows)
    v, reason = verdict_h3(ev)
    old, old_reason = old_verdict_h3(ev)
    first = first_verdict_h3(ev)
    cev = control_evidence_h3(ev)
    if cev is None:
        cv, creason = "not run", "no open-path network was measured"
    else:
        cv, creason = verdict_h3(cev)
    ch.value(
        "h3_old_rule_verdict",
        old,
        note="the previous H3 rule (issue #17: the fade against a fixed 10x, the shallower control alone) "
        "on the same runs",
    )
    ch.glue("h3_reason", reason)
    ch.glue("h3_old_rule_reason", old_reason)
    ch.glue("h3_first_rule_verdict", first)
    ch.glue("h3_control_verdict", cv)
    ch.glue("h3_control_reason", creason)
    ch.glue("h3_rule_change", RULE_H3_CHANGE)
    return ch.verdict(
        "H3",
        v,
        claim="the task gradient no longer reaches query and key; the term's gradient fades before "
        "the collapsing blocks",
        rule=RULE_H3,
        evidence=ev
        | {
            "fade_margin": FADE_MARGIN,
            "control": {"on": H3_CONTROL_ON, "verdict": cv, "reason": creason},
            "old_rule": OLD_RULE_H3,
            "old_rule_verdict": old,
            "old_rule_reason": old_reason,
            "first_rule": {"rule": FIRST_RULE_H3, "verdict": first},
            "rule_change": RULE_H3_CHANGE,
            "reason": reason,
        },
    )


def judge_h4(ch, p, events: list[dict], reopening: dict, hy: list[dict], sw: dict) -> str:
    """H4 (:func:`verdict_h4`) on the reopening factor, the drivers' alpha at first crossing and the held
    switches; the reversed ramp's recovery alphas ride along, and the previous rule's verdict
    (:func:`old_verdict_h4`) is recorded beside; beside its control (:func:`h4_control`) where ``reopening``
    carries ``control_rows`` (:func:`record_reopen_control`)."""
    acol = float(np.median([h["alpha_collapse"] for h in hy]))
    ev = {
        "reopen_factor": reopening["reopen_factor"],
        "alpha_col": acol,
        "alpha_collapse": [h["alpha_collapse"] for h in hy],
        "held": [[a, sw[a]["recovered"], sw[a]["events"]] for a in p.switch_alphas],
        "reversed_ramp_alpha_recover": [h["alpha_recover"] for h in hy],
        "reversed_ramp_detection_lag_alpha": detection_lag_alpha(p),
    }
    v, reason = verdict_h4(ev)
    old = old_verdict_h4(
        {"reopen_factor": ev["reopen_factor"], "ratios": [h["ratio"] for h in hy], "events": len(events)}
    )
    ch.value("h4_old_rule_verdict", old, note="the previous H4 rule (the reversed ramp) on the same runs")
    judge_h4_lines(ch, ev)
    ch.glue("h4_reason", reason)
    across = h4_across_interval(ev)
    ch.glue("h4_interval", checks.interval_text(across))
    ctl = h4_control(ch, ev, reopening.get("control_rows"))
    return ch.verdict(
        "H4",
        v,
        claim="restoring the skip reopens the path at once; rank recovers only far above the collapse scale",
        rule=RULE_H4,
        evidence=ev
        | {"old_rule": OLD_RULE_H4, "old_rule_verdict": old, "reason": reason, "across_interval": across}
        | ctl,
    )


def judge_h4_lines(ch, ev: dict) -> None:
    """Record the alphas :func:`verdict_h4` reads against multiples of the alpha of collapse, each over it
    and held to its side of the rule's lines (NaN where the rule does not read it): the lowest held alpha
    (the refutation is reachable at or below 1.5, with the rule's round-off allowance), and the smallest held
    alpha at which half the events recover (refuted at or below 1.5, supported from 3)."""
    acol, held = ev["alpha_col"], sorted(ev["held"])
    nan = float("nan")
    rec = [a for a, r, n in held if n and 2 * r >= n]
    lowest = held[0][0] / acol if held and acol > 0 else nan
    arec = rec[0] / acol if rec and acol > 0 else nan
    checks.against(
        ch,
        "h4_lowest_held_vs_collapse",
        lowest,
        limits=(1.5 * (1 + 1e-9),),
        glue=False,
        note="the lowest held alpha over the alpha of collapse; H4's refutation is reachable at or below "
        "1.5 (with its 1e-9 round-off allowance)",
    )
    checks.against(
        ch,
        "h4_recovery_vs_collapse",
        arec,
        limits=(1.5, 3.0),
        glue=False,
        note="the smallest held alpha recovering half the events over the alpha of collapse; H4 reads it "
        "against 1.5 and 3",
    )
    checks.fragile_text(ch, "h4_lowest_held_vs_collapse")


def h4_control(ch, ev: dict, rows: list[dict] | None) -> dict:
    """H4's control (:func:`control_evidence_h4` on :func:`reopen_control_rows`' ``rows``) judged by
    :func:`verdict_h4`, glued (``h4_control_verdict``, ``h4_control_reason``) and returned as evidence
    (``control``; the networks' gradients and the healthy networks' reopening factor beside). Empty without
    ``rows``."""
    if rows is None:
        return {}
    cev = control_evidence_h4(ev, rows)
    if cev is None:
        cv, creason = "not run", "no network reached alpha_min uncollapsed"
    else:
        cv, creason = verdict_h4(cev)
    ch.glue("h4_control_verdict", cv)
    ch.glue("h4_control_reason", creason)
    return {
        "control": {"on": H4_CONTROL_ON, "verdict": cv, "reason": creason},
        "control_rows": rows,
        "control_reopen_factor": None if cev is None else cev["reopen_factor"],
        "healthy_reopen_factor": reopen_factor_of(rows, ("healthy",))[0],
    }


def h4_across_interval(ev: dict) -> dict:
    """:func:`verdict_h4` with each held alpha's recovery count (out of its events) moved alone through its
    exact 95% interval (:func:`rankcollapse.book.checks.across_interval`)."""
    counts = {
        f"recovered at held alpha {a:g}": (r, n, checks.at_key("held", i, 1))
        for i, (a, r, n) in enumerate(ev["held"])
    }
    return checks.across_interval(verdict_h4, ev, counts)


def h7_control_collapsed(p, c: dict, alpha: float) -> bool:
    """Whether H7's control at ``alpha`` collapsed (:func:`rankcollapse.repair.controls.control_collapsed`);
    at alpha = 1 (the healthy network, whose detector is armed from step 0 and may have settled on the early
    dip it heals from) by its final srank alone."""
    if alpha == 1.0:
        h = c["hist"]
        return median_around(h, h["m_step"][-1]) < p.threshold
    return control_collapsed(c, p.threshold)


def h7_pairs(p, sw: dict, rows: list[dict], controls: dict) -> dict:
    """H7's evidence: every recovered switch branch (held, and delayed) at the ``h7_control_alphas`` whose
    control stayed uncollapsed and reaches its end, with its excess over the control and gap to the healthy
    network; the controls' own state (collapsed, final srank); the previous rule's gaps (every recovered
    held or delayed branch against the healthy network)."""
    h7 = controls["h7"]
    bad = {(s, a) for s, by in h7.items() for a, c in by.items() if h7_control_collapsed(p, c, a)}
    pairs, recovered = [], 0
    cand = [
        (r["seed"], a, 0, r)
        for a in p.h7_control_alphas
        for r in sw[a]["rows"]
        if r["recovered_after"] is not None
    ]
    cand += [
        (r["seed"], r["alpha"], r["delay"], r)
        for r in rows
        if r["delay"] > 0 and r["alpha"] in p.h7_control_alphas and r["recovered_after"] is not None
    ]
    for s, a, d, r in cand:
        recovered += 1
        if (s, a) in bad or r["control_gap"] is None or r["loss_gap"] is None:
            continue
        pairs.append(
            {"seed": s, "alpha": a, "delay": d, "excess": r["control_gap"], "gap_healthy": r["loss_gap"]}
        )
    old_gaps = [
        r["loss_gap"] for a in p.switch_alphas for r in sw[a]["rows"] if r["recovered_after"] is not None
    ]
    old_gaps += [
        r["loss_gap"]
        for r in rows
        if r["delay"] > 0 and r["recovered_after"] is not None and r["loss_gap"] is not None
    ]
    ctl = [
        {
            "seed": s,
            "alpha": a,
            "collapsed": (s, a) in bad,
            "final_srank": median_around(c["hist"], c["hist"]["m_step"][-1]),
            "steps": c["step"],
        }
        for s, by in h7.items()
        for a, c in by.items()
    ]
    return {
        "alphas": list(p.h7_control_alphas),
        "pairs": pairs,
        "recovered": recovered,
        "controls": ctl,
        "old_gaps": old_gaps,
    }


def h7_null_evidence(p, null_rows: list[dict], controls: dict) -> dict:
    """The evidence of H7's control (:data:`H7_NULL_ON`) in :func:`verdict_h7`'s form: the null pairs of
    :func:`h7_null_rows` whose two controls stayed uncollapsed (:func:`h7_control_collapsed`, as for the
    recovered switches) and with an ``excess`` (``recovered``: the pairs of two uncollapsed controls)."""
    h7 = controls["h7"]
    bad = {(s, a) for s, by in h7.items() for a, c in by.items() if h7_control_collapsed(p, c, a)}
    ok = [r for r in null_rows if (r["seed"], r["alpha"]) not in bad and (r["other"], r["alpha"]) not in bad]
    pairs = [
        {k: r[k] for k in ("seed", "other", "alpha", "step", "excess", "gap_healthy")} | {"delay": 0}
        for r in ok
        if r["excess"] is not None and r["gap_healthy"] is not None
    ]
    return {
        "alphas": list(p.h7_control_alphas),
        "pairs": pairs,
        "recovered": len(ok),
        "judged": H7_NULL_JUDGED,
    }


def judge_h7(ch, p, sw: dict, rows: list[dict], controls: dict) -> str:
    """H7 (:func:`verdict_h7`) on :func:`h7_pairs`; the previous rule's verdict (:func:`old_verdict_h7`, the
    gap to the healthy network over every recovered branch) recorded beside; beside its control where
    ``controls`` carries the null pairing (``h7_null``, :func:`record_h7_null`): the same rule on
    :func:`h7_null_evidence`."""
    ev = h7_pairs(p, sw, rows, controls)
    v, reason = verdict_h7(ev)
    old = old_verdict_h7(ev["old_gaps"])
    ch.value(
        "h7_old_rule_verdict", old, note="the previous H7 rule (gap to the healthy network) on the same runs"
    )
    ch.glue("h7_reason", reason)
    ctl = {}
    if controls.get("h7_null") is not None:  # the null pairing (h7_null_rows), judged by the same rule
        nev = h7_null_evidence(p, controls["h7_null"], controls)
        cv, creason = (
            verdict_h7(nev) if nev["pairs"] else ("not run", "no null pair has two uncollapsed controls")
        )
        ch.glue("h7_control_verdict", cv)
        ch.glue("h7_control_reason", creason)
        ctl = {"control": {"on": H7_NULL_ON, "verdict": cv, "reason": creason}, "null_pairs": nev["pairs"]}
    return ch.verdict(
        "H7",
        v,
        claim="the loss stays above a healthy network's after the rank recovers",
        rule=RULE_H7,
        evidence=ev | {"old_rule": OLD_RULE_H7, "old_rule_verdict": old, "reason": reason} | ctl,
    )


def h5_evidence(h5: dict) -> dict:
    """H5's evidence from :func:`h5_effects`: the rule's alphas and pairs, the replicates, and the previous
    rule's evidence (``old``: its alpha and per-event times) and the first rule's reading (``first``)."""
    prev = h5["previous"]
    return {
        "alphas": list(h5["alphas"]),
        "fractions": {f"{a:g}": list(x) for a, x in h5["fractions"].items()},
        "longest_delay": h5["longest_delay"],
        "pairs": [dict(x) for x in h5["pairs"]],
        "replicates": [{k: r[k] for k in ("seed", "alpha", "t0", "trep")} for r in h5["replicates"]],
        "replicate_shift": h5["replicate_shift"],
        "old": {
            "alpha": h5["alpha"],
            "fractions": {f"{a:g}": list(x) for a, x in h5["fractions"].items()},
            "longest_delay": prev["longest_delay"] if prev else None,
            "events": [{"seed": e["seed"], "t0": e["t0"], "tmax": e["tmax"]} for e in prev["events"]]
            if prev
            else [],
            "spearman_delay_time": prev["spearman"] if prev else None,
        },
    }


def judge_h5(ch, h5: dict) -> str:
    """H5 (:func:`verdict_h5`) on :func:`h5_evidence`, beside its control (the same rule on the replicate
    pairs, :func:`control_evidence_h5`; 'not run' without a replicate); the measured margin, the pooled
    counts read against the sign test's thresholds and the smallest detectable effect recorded or glued; the
    previous rule's verdict and reason (:func:`old_verdict_h5`) and the first rule's
    (:func:`first_verdict_h5`, at :func:`h5_alpha` with a 20-step margin) glued and kept in the evidence."""
    ev = h5_evidence(h5)
    v, reason = verdict_h5(ev)
    c = h5_counts(ev)
    cev = control_evidence_h5(ev)
    if cev is None:
        cv, creason = "not run", "no replicate was trained (no delay alpha where recovery is uncertain)"
        cc = None
    else:
        cv, creason = verdict_h5(cev)
        cc = h5_counts(cev)
    old, old_reason = old_verdict_h5(ev["old"])
    first = first_verdict_h5(h5["first"])
    sup, ref = c["support_from"], c["refute_up_to"]  # both or neither (the test is symmetric)
    checks.count(
        ch,
        "h5_pairs_slower",
        c["slower"],
        of=c["m"],
        limits=[sup - 0.5, ref + 0.5] if sup is not None and ref is not None else (),
        note="H5: pooled pairs (events x uncertain delay alphas) slower after the longest delay, of those "
        "with an outcome; trained",
    )
    ch.glue("h5_pairs_m", c["m"])
    ch.glue("h5_pairs_n", len(ev["pairs"]))
    ch.glue("h5_pairs_faster", c["faster"])
    ch.glue("h5_pairs_same", c["same"])
    ch.glue("h5_pairs_none", c["none"])
    ch.glue("h5_support_from", "none" if c["support_from"] is None else str(c["support_from"]))
    ch.glue("h5_refute_up_to", "none" if c["refute_up_to"] is None else str(c["refute_up_to"]))
    ch.glue(
        "h5_detectable_text",
        "none (fewer than 5 pairs with an outcome: no count reaches the level)"
        if c["detectable_share"] is None
        else f"{_pct(c['detectable_share'])} of the pairs slowed",
    )
    ch.glue("h5_level", H5_LEVEL)
    ch.glue("h5_power", f"{H5_POWER:.0%}")
    ch.glue("h5_reason", reason)
    ch.glue("h5_control_verdict", cv)
    ch.glue("h5_control_reason", creason)
    ch.glue("h5_old_rule_verdict", old)
    ch.glue("h5_old_rule_reason", old_reason)
    ch.glue("h5_first_rule_verdict", first)
    ch.glue("h5_rule_change", RULE_H5_CHANGE)
    # the previous and the first H5 rules' verdicts: shown, not checked, because they change with the
    # floating-point kernels at full (both are kept in the H5 evidence)
    return ch.verdict(
        "H5",
        v,
        claim="the longer a network stays collapsed, the slower or rarer its recovery",
        rule=RULE_H5,
        evidence={k: x for k, x in ev.items() if k != "old"}
        | {
            "counts": c,
            "control": {"on": H5_CONTROL_ON, "verdict": cv, "reason": creason, "counts": cc},
            "old_rule": OLD_RULE_H5,
            "old_rule_evidence": ev["old"],
            "old_rule_verdict": old,
            "old_rule_reason": old_reason,
            "first_rule": {"rule": FIRST_RULE_H5, "alpha": h5["first"]["alpha"], "verdict": first},
            "rule_change": RULE_H5_CHANGE,
            "reason": reason,
        },
    )


def judge_w1(ch, weights: dict, trace_ratios: dict) -> str:
    """W1 (:func:`verdict_w1`) on :func:`record_weight_ranks`' ratios, with :func:`record_trace`'s beside;
    beside its control where ``weights`` carries the rank-one networks' ratios (``rank_one``,
    :func:`record_rank_one`): the same rule with them in the collapsed networks' place."""
    ev = {k: x for k, x in {**weights, **trace_ratios}.items() if k != "rank_one"}
    v, reason = verdict_w1(ev)
    ch.glue("w1_reason", reason)
    ctl = {}
    if weights.get("rank_one") is not None:  # the constructed positive control (record_rank_one)
        cv, creason = verdict_w1(control_evidence_w1(ev, weights["rank_one"]))
        ch.glue("w1_control_verdict", cv)
        ch.glue("w1_control_reason", creason)
        ctl = {
            "control": {"on": W1_CONTROL_ON, "verdict": cv, "reason": creason},
            "rank_one": weights["rank_one"],
        }
    return ch.verdict(
        "W1",
        v,
        claim="weight-matrix rank collapse and token rank collapse are different phenomena",
        rule=RULE_W1,
        evidence=ev | {"reason": reason} | ctl,
    )
