"""Chapter `repair-driver`, verdicts: the rule of H1 (a weakened skip produces a settled, harmful collapse
that does not heal) as text (:data:`RULE_H1`, with the rule first recorded, :data:`OLD_RULE_H1`, shown
beside it), its evidence (:func:`h1_evidence`), its decision functions (:func:`verdict_h1`, listed in
:data:`VERDICTS`, and :func:`old_verdict_h1`), the verdict across the counts' intervals and
:func:`judge_h1`, which records it.
"""

from __future__ import annotations

from ...book import checks

RULE_H1 = (
    "supported if more than half of the drivers settle; no settled one heals by the end of the "
    "driver (final srank, median of the last 10 measurements, stays below the threshold plus half the way "
    "to the healthy network's); and each is harmful (its probe loss is nearer the unigram loss than the "
    "healthy network's at the same step); refuted if none settles; else inconclusive"
)


# The rule H1 was first recorded under (commit efd8b36). It was replaced (c077626) after results had been
# seen: its heal test (final srank back above the threshold) sat on the knife-edge (full: 1.43 against 1.5),
# and its harm test counted a collapse 0.49 nats WORSE than the frequency table as not harmful. Because the
# replacement came after results, both verdicts are recorded and shown (issue #17).
OLD_RULE_H1 = (
    "supported if more than half of the drivers settle, every settled one is still below the threshold at "
    "the end of the driver (no heal), its probe loss is within 0.2 nats of the unigram loss and more than "
    "0.2 nats above the healthy network's at the same step; refuted if none settles; else inconclusive"
)


OLD_H1_NEAR = 0.2  # nats: "within 0.2 nats of the unigram loss", and the gap to healthy it asks for


def h1_evidence(p, settled: list[dict], info: dict) -> dict:
    """What both H1 rules read: per settled event its final srank (and the half-way heal level), and its
    collapse loss against the unigram loss and the healthy network's at the same step."""
    return {
        "drivers": len(p.seeds),
        "settled": len(settled),
        "threshold": p.threshold,
        "final_srank": [e["final_srank"] for e in settled],
        "heal_level": [p.threshold + 0.5 * (e["healthy_final_srank"] - p.threshold) for e in settled],
        "collapse_minus_unigram": [e["collapse_loss"] - info["unigram"] for e in settled],
        "collapse_minus_healthy": [e["collapse_loss"] - e["healthy_loss_same_step"] for e in settled],
    }


def _h1_counts(ev: dict) -> str:
    return f"{ev['settled']} of {ev['drivers']} drivers settled"


def verdict_h1(ev: dict) -> tuple[str, str]:
    """H1 by :data:`RULE_H1` on :func:`h1_evidence`."""
    n, k = ev["drivers"], ev["settled"]
    if k == 0:
        return "refuted", f"0 of {n} drivers settled into a collapse"
    healed = sum(f >= h for f, h in zip(ev["final_srank"], ev["heal_level"]))
    cu, chl = ev["collapse_minus_unigram"], ev["collapse_minus_healthy"]
    harmful = sum(abs(u) < g for u, g in zip(cu, chl))
    text = (
        f"{_h1_counts(ev)}, {healed} of {k} healed half-way back, {harmful} of {k} harmful (collapse loss "
        f"{min(cu):+.2f} to {max(cu):+.2f} nats from the unigram loss, {min(chl):+.2f} to {max(chl):+.2f} "
        "above the healthy network's)"
    )
    if 2 * k > n and healed == 0 and harmful == k:
        return "supported", text
    return "inconclusive", text


def old_verdict_h1(ev: dict) -> tuple[str, str]:
    """H1 by :data:`OLD_RULE_H1` (the rule first recorded) on the same evidence."""
    n, k = ev["drivers"], ev["settled"]
    if k == 0:
        return "refuted", f"0 of {n} drivers settled into a collapse"
    healed = sum(f >= ev["threshold"] for f in ev["final_srank"])
    cu, chl = ev["collapse_minus_unigram"], ev["collapse_minus_healthy"]
    near = sum(abs(u) < OLD_H1_NEAR for u in cu)
    gap = sum(g > OLD_H1_NEAR for g in chl)
    text = (
        f"{_h1_counts(ev)}, {healed} of {k} back above the threshold, {near} of {k} within "
        f"{OLD_H1_NEAR:g} nats of the unigram loss ({min(cu):+.2f} to {max(cu):+.2f}), {gap} of {k} more "
        f"than {OLD_H1_NEAR:g} above healthy"
    )
    if 2 * k > n and healed == 0 and near == k and gap == k:
        return "supported", text
    return "inconclusive", text


VERDICTS = {"H1": verdict_h1}


_H1_LISTS = ("final_srank", "heal_level", "collapse_minus_unigram", "collapse_minus_healthy")


def h1_across_interval(ev: dict) -> dict:
    """:func:`verdict_h1` with each count it reads moved alone through its exact 95% interval
    (:func:`rankcollapse.book.checks.across_interval`): the settled drivers (out of all; the seen events
    repeated or dropped in order), and among the settled the healed and the harmful ones (out of the
    settled; an event made healed sits at its heal level, one made unhealed below it; one made harmful is
    nearer the unigram loss than its gap to healthy, one made harmless is not)."""
    k, n = ev["settled"], ev["drivers"]
    healed = sum(f >= h for f, h in zip(ev["final_srank"], ev["heal_level"]))
    harmful = sum(abs(u) < g for u, g in zip(ev["collapse_minus_unigram"], ev["collapse_minus_healthy"]))

    def settle(e: dict, j: int) -> None:
        e["settled"] = j
        for key in _H1_LISTS:
            e[key] = [e[key][i % k] for i in range(j)]

    def heal(e: dict, j: int) -> None:
        e["final_srank"] = [h if i < j else h - 1.0 for i, h in enumerate(e["heal_level"])]

    def harm(e: dict, j: int) -> None:
        e["collapse_minus_unigram"] = [0.0 if i < j else 1.0 for i in range(k)]
        e["collapse_minus_healthy"] = [1.0 if i < j else 0.0 for i in range(k)]

    counts = {"settled drivers": (k, n, settle)} if k else {}
    counts |= {"healed": (healed, k, heal), "harmful": (harmful, k, harm)}
    return checks.across_interval(verdict_h1, ev, counts)


def judge_h1(ch, p, settled: list[dict], info: dict) -> str:
    """Verdict H1 by :data:`RULE_H1`, with the verdict of :data:`OLD_RULE_H1` (the rule first recorded)
    on the same evidence recorded beside it and glued for the page."""
    ev = h1_evidence(p, settled, info)
    v, reason = verdict_h1(ev)
    ov, oreason = old_verdict_h1(ev)
    ch.value("h1_old_rule_verdict", ov, note="H1 under the rule first recorded (OLD_RULE_H1)")
    ch.glue("h1_old_reason", oreason)
    ch.glue("h1_reason", reason)
    across = h1_across_interval(ev)
    ch.glue("h1_interval", checks.interval_text(across))
    ch.glue("h1_old_rule", OLD_RULE_H1)
    ch.glue("h1_rule", RULE_H1)
    return ch.verdict(
        "H1",
        v,
        claim="a weakened skip produces a settled, harmful collapse that does not heal",
        rule=RULE_H1,
        evidence=ev
        | {
            "reason": f"{reason}; under the rule first recorded: {ov} ({oreason})",
            "old_rule_verdict": ov,
            "across_interval": across,
        },
    )
