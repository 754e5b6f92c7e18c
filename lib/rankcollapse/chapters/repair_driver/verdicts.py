"""Chapter `repair-driver`, verdicts: the rule of H1 (a weakened skip produces a settled, harmful collapse
that does not heal) as text (:data:`RULE_H1`; the rule it replaced, :data:`OLD_RULE_H1`, and the rule first
recorded, :data:`FIRST_RULE_H1`, shown beside it), its evidence (:func:`h1_evidence`), its decision
functions (:func:`verdict_h1`, listed in :data:`VERDICTS`; :func:`old_verdict_h1`, :func:`first_verdict_h1`),
its controls (:func:`control_evidence_h1`: the reversed-ramp branches from the same collapses;
:func:`healthy_evidence_h1`: the healthy networks), the verdict across the counts' intervals and
:func:`judge_h1`, which records it.
"""

from __future__ import annotations

from ...book import checks

RULE_H1 = (
    "a settled driver heals when its untreated branch (its saved collapse trained on branch_steps steps at "
    "alpha_min with no added term: the branch repair-treatments runs) recovers by the book's recovery rule "
    "(the recover_window-measurement median of the last block's srank reaches the threshold plus "
    "recover_frac of the way to the healthy network's srank at the switch step, within the branch), and is "
    "harmful when its probe loss at the collapse is nearer the unigram loss than the healthy network's at "
    "the same step; supported if more than half of the drivers settle, none of the settled heals and each "
    "is harmful; refuted if none settles, more than half of the settled heal, or none is harmful; else "
    "inconclusive"
)


# The rule H1 was decided by from c077626 until issue #42 (item 3). It was replaced after results had been
# seen (the smoke and full builds' drivers, and the full build's untreated branches: 0 of 7 recovered, a
# referee's reading): it read "does not heal" at the driver's end, shortly after the collapse settled,
# while the untreated branches of repair-treatments follow each collapse branch_steps further; and it could
# be refuted only when no driver settled (a heal or a harmless collapse gave at worst "inconclusive"). Its
# verdict is recorded beside the new one.
OLD_RULE_H1 = (
    "supported if more than half of the drivers settle; no settled one heals by the end of the "
    "driver (final srank, median of the last 10 measurements, stays below the threshold plus half the way "
    "to the healthy network's); and each is harmful (its probe loss is nearer the unigram loss than the "
    "healthy network's at the same step); refuted if none settles; else inconclusive"
)


# The rule H1 was first recorded under (commit efd8b36). It was replaced (c077626) after results had been
# seen: its heal test (final srank back above the threshold) sat on the knife-edge (full: 1.43 against 1.5),
# and its harm test counted a collapse 0.49 nats WORSE than the frequency table as not harmful. Because the
# replacement came after results, its verdict is recorded and shown too (issue #17).
FIRST_RULE_H1 = (
    "supported if more than half of the drivers settle, every settled one is still below the threshold at "
    "the end of the driver (no heal), its probe loss is within 0.2 nats of the unigram loss and more than "
    "0.2 nats above the healthy network's at the same step; refuted if none settles; else inconclusive"
)

RULE_H1_CHANGE = (
    "The rule it replaced read the heal at the end of the driver, shortly after the collapse settled, "
    "though each settled collapse is followed much further by its untreated branch, which repair-treatments "
    "runs and this chapter now loads; and it could be refuted only when no driver settled, so a collapse "
    "that heals or does no harm gave at worst inconclusive. The new rule reads the heal on the untreated "
    "branch by the recovery rule H2 reads (so H1 and H2 call the same branch healed), and refutes when more "
    "than half of the settled collapses heal or none is harmful. It was set after results had been seen "
    "(the drivers of the smoke and full builds, and their untreated branches in repair-treatments)"
)

FIRST_H1_NEAR = 0.2  # nats: "within 0.2 nats of the unigram loss", and the gap to healthy it asks for

CONTROL_ON = "the reversed-ramp branches from the same saved collapses, in the untreated branches' place"
HEALTHY_CONTROL_ON = (
    "the healthy networks of the same seeds (the skip never weakened), read by the drivers' detector"
)


def h1_evidence(p, settled: list[dict], info: dict, rows: list[dict], branch: str = "untreated") -> dict:
    """What the H1 rules read: per settled event (in seed order) the driver's final srank and the half-way
    heal level (the previous rules), its collapse loss against the unigram loss and the healthy network's at
    the same step, and its ``branch`` (``rows``: :func:`rankcollapse.chapters.repair_driver.experiments
    .branch_rows`) read by the recovery rule: its recovery threshold, steps to recover (None: never) and
    final srank."""
    by_seed = {r["seed"]: r for r in rows}
    br = [by_seed[e["seed"]] for e in settled]
    return {
        "drivers": len(p.seeds),
        "settled": len(settled),
        "threshold": p.threshold,
        "seeds": [e["seed"] for e in settled],
        "branch": branch,
        "branch_steps": p.branch_steps,
        "final_srank": [e["final_srank"] for e in settled],
        "heal_level": [p.threshold + 0.5 * (e["healthy_final_srank"] - p.threshold) for e in settled],
        "collapse_minus_unigram": [e["collapse_loss"] - info["unigram"] for e in settled],
        "collapse_minus_healthy": [e["collapse_loss"] - e["healthy_loss_same_step"] for e in settled],
        "rec_threshold": [r["rec_threshold"] for r in br],
        "healed_after": [r[branch]["recovered_after"] for r in br],
        "branch_final_srank": [r[branch]["final_srank"] for r in br],
    }


def control_evidence_h1(ev: dict, rows: list[dict]) -> dict:
    """H1's control (:data:`CONTROL_ON`): the same evidence with the reversed-ramp branches (the skip
    ramped back up at the driver's rate from each saved collapse) in the untreated branches' place."""
    by_seed = {r["seed"]: r for r in rows}
    br = [by_seed[s] for s in ev["seeds"]]
    return ev | {
        "branch": "reversed-ramp",
        "healed_after": [r["reversed-ramp"]["recovered_after"] for r in br],
        "branch_final_srank": [r["reversed-ramp"]["final_srank"] for r in br],
    }


def healthy_evidence_h1(p, settled_steps: dict) -> dict:
    """H1's second control (:data:`HEALTHY_CONTROL_ON`): the healthy networks in the drivers' place, each
    read by the drivers' detector (``settled_steps``: ``{seed: settled step or None}``,
    :func:`rankcollapse.chapters.repair_driver.experiments.healthy_settled`). A healthy network that settled
    has no branch or collapse loss to read (``unread``)."""
    k = sum(v is not None for v in settled_steps.values())
    return {
        "drivers": len(settled_steps),
        "who": "healthy networks",
        "settled": k,
        "threshold": p.threshold,
        "unread": k > 0,
    }


def _h1_counts(ev: dict) -> str:
    return f"{ev['settled']} of {ev['drivers']} {ev.get('who', 'drivers')} settled"


def _healed(ev: dict) -> int:
    return sum(a is not None for a in ev["healed_after"])


def _harmful(ev: dict) -> int:
    return sum(abs(u) < g for u, g in zip(ev["collapse_minus_unigram"], ev["collapse_minus_healthy"]))


def verdict_h1(ev: dict) -> tuple[str, str]:
    """H1 by :data:`RULE_H1` on :func:`h1_evidence`."""
    n, k = ev["drivers"], ev["settled"]
    if k == 0:
        return "refuted", f"0 of {n} {ev.get('who', 'drivers')} settled into a collapse"
    if ev.get("unread"):
        return "inconclusive", f"{_h1_counts(ev)}, with no branch or collapse loss to read"
    healed, harmful = _healed(ev), _harmful(ev)
    cu, chl = ev["collapse_minus_unigram"], ev["collapse_minus_healthy"]
    fs, rt = ev["branch_final_srank"], ev["rec_threshold"]
    text = (
        f"{_h1_counts(ev)}, {healed} of {k} recovered in the {ev['branch']} branch ({ev['branch_steps']} "
        f"steps; final srank {min(fs):.2f}-{max(fs):.2f} against recovery thresholds "
        f"{min(rt):.2f}-{max(rt):.2f}), {harmful} of {k} harmful (collapse loss {min(cu):+.2f} to "
        f"{max(cu):+.2f} nats from the unigram loss, {min(chl):+.2f} to {max(chl):+.2f} above the healthy "
        "network's)"
    )
    if 2 * healed > k:
        return "refuted", f"more than half of the settled collapses heal: {text}"
    if harmful == 0:
        return "refuted", f"no settled collapse is harmful: {text}"
    if 2 * k > n and healed == 0 and harmful == k:
        return "supported", text
    return "inconclusive", text


def old_verdict_h1(ev: dict) -> tuple[str, str]:
    """H1 by :data:`OLD_RULE_H1` (the rule it replaced: the heal read at the driver's end) on the same
    evidence."""
    n, k = ev["drivers"], ev["settled"]
    if k == 0:
        return "refuted", f"0 of {n} drivers settled into a collapse"
    healed = sum(f >= h for f, h in zip(ev["final_srank"], ev["heal_level"]))
    cu, chl = ev["collapse_minus_unigram"], ev["collapse_minus_healthy"]
    harmful = _harmful(ev)
    text = (
        f"{_h1_counts(ev)}, {healed} of {k} healed half-way back by the driver's end, {harmful} of {k} "
        f"harmful (collapse loss {min(cu):+.2f} to {max(cu):+.2f} nats from the unigram loss, "
        f"{min(chl):+.2f} to {max(chl):+.2f} above the healthy network's)"
    )
    if 2 * k > n and healed == 0 and harmful == k:
        return "supported", text
    return "inconclusive", text


def first_verdict_h1(ev: dict) -> tuple[str, str]:
    """H1 by :data:`FIRST_RULE_H1` (the rule first recorded) on the same evidence."""
    n, k = ev["drivers"], ev["settled"]
    if k == 0:
        return "refuted", f"0 of {n} drivers settled into a collapse"
    healed = sum(f >= ev["threshold"] for f in ev["final_srank"])
    cu, chl = ev["collapse_minus_unigram"], ev["collapse_minus_healthy"]
    near = sum(abs(u) < FIRST_H1_NEAR for u in cu)
    gap = sum(g > FIRST_H1_NEAR for g in chl)
    text = (
        f"{_h1_counts(ev)}, {healed} of {k} back above the threshold, {near} of {k} within "
        f"{FIRST_H1_NEAR:g} nats of the unigram loss ({min(cu):+.2f} to {max(cu):+.2f}), {gap} of {k} more "
        f"than {FIRST_H1_NEAR:g} above healthy"
    )
    if 2 * k > n and healed == 0 and near == k and gap == k:
        return "supported", text
    return "inconclusive", text


VERDICTS = {"H1": verdict_h1}


_H1_LISTS = (
    "final_srank",
    "heal_level",
    "collapse_minus_unigram",
    "collapse_minus_healthy",
    "rec_threshold",
    "healed_after",
    "branch_final_srank",
)


def h1_across_interval(ev: dict) -> dict:
    """:func:`verdict_h1` with each count it reads moved alone through its exact 95% interval
    (:func:`rankcollapse.book.checks.across_interval`): the settled drivers (out of all; the seen events
    repeated or dropped in order), and among the settled the healed and the harmful ones (out of the
    settled; an event made healed recovers in its branch, one made unhealed does not; one made harmful is
    nearer the unigram loss than its gap to healthy, one made harmless is not)."""
    k, n = ev["settled"], ev["drivers"]
    healed = _healed(ev) if k else 0
    harmful = _harmful(ev) if k else 0

    def settle(e: dict, j: int) -> None:
        e["settled"] = j
        for key in _H1_LISTS:
            e[key] = [e[key][i % k] for i in range(j)]

    def heal(e: dict, j: int) -> None:
        e["healed_after"] = [10 if i < j else None for i in range(k)]

    def harm(e: dict, j: int) -> None:
        e["collapse_minus_unigram"] = [0.0 if i < j else 1.0 for i in range(k)]
        e["collapse_minus_healthy"] = [1.0 if i < j else 0.0 for i in range(k)]

    counts = {"settled drivers": (k, n, settle)} if k else {}
    counts |= {"healed": (healed, k, heal), "harmful": (harmful, k, harm)}
    return checks.across_interval(verdict_h1, ev, counts)


def judge_h1(ch, p, settled: list[dict], info: dict, rows: list[dict], healthy_settled: dict) -> str:
    """Verdict H1 by :data:`RULE_H1` beside its control (the same rule on the reversed-ramp branches,
    :func:`control_evidence_h1`) and its second control (the healthy networks, :func:`healthy_evidence_h1`);
    the verdicts of :data:`OLD_RULE_H1` (the rule it replaced) and :data:`FIRST_RULE_H1` (the rule first
    recorded) on the same evidence recorded beside it and glued for the page."""
    ev = h1_evidence(p, settled, info, rows)
    v, reason = verdict_h1(ev)
    ov, oreason = old_verdict_h1(ev)
    fv, freason = first_verdict_h1(ev)
    if settled:
        cv, creason = verdict_h1(control_evidence_h1(ev, rows))
    else:
        cv, creason = "not run", "no driver settled, so no branch was run"
    hv, hreason = verdict_h1(healthy_evidence_h1(p, healthy_settled))
    ch.value(
        "h1_old_rule_verdict",
        ov,
        note="H1 under the rule the current one replaced (OLD_RULE_H1: the heal read at the driver's end)",
    )
    ch.value("h1_first_rule_verdict", fv, note="H1 under the rule first recorded (FIRST_RULE_H1)")
    ch.glue("h1_old_reason", oreason)
    ch.glue("h1_first_reason", freason)
    ch.glue("h1_reason", reason)
    if ev["settled"]:
        k = ev["settled"]
        checks.count(
            ch,
            "h1_harmful",
            _harmful(ev),
            of=k,
            limits=(0.5, k - 0.5),
            note="settled collapses nearer the unigram loss than the healthy network's loss; H1 reads it "
            "against none and all",
        )
    checks.fragile_text(ch, "settled_count")
    across = h1_across_interval(ev)
    ch.glue("h1_interval", checks.interval_text(across))
    ch.glue("h1_rule", RULE_H1)
    ch.glue("h1_old_rule", OLD_RULE_H1)
    ch.glue("h1_first_rule", FIRST_RULE_H1)
    ch.glue("h1_first_near", FIRST_H1_NEAR)
    ch.glue("h1_rule_change", RULE_H1_CHANGE)
    ch.glue("h1_control_verdict", cv)
    ch.glue("h1_control_reason", creason)
    ch.glue("h1_healthy_control_verdict", hv)
    ch.glue("h1_healthy_control_reason", hreason)
    return ch.verdict(
        "H1",
        v,
        claim="a weakened skip produces a settled, harmful collapse that does not heal",
        rule=RULE_H1,
        evidence=ev
        | {
            "control": {"on": CONTROL_ON, "verdict": cv, "reason": creason},
            "healthy_control": {"on": HEALTHY_CONTROL_ON, "verdict": hv, "reason": hreason},
            "reason": f"{reason}; under the rule it replaced: {ov} ({oreason})",
            "old_rule": OLD_RULE_H1,
            "old_rule_verdict": ov,
            "old_rule_reason": oreason,
            "first_rule": {"rule": FIRST_RULE_H1, "verdict": fv, "reason": freason},
            "rule_change": RULE_H1_CHANGE,
            "across_interval": across,
        },
    )
