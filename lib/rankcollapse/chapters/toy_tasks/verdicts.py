"""Chapter `toy-tasks`, verdicts: the rules of C2 (skips prevent the collapse of the learned circle
dynamics) and C5 (SANs with skips behave like ensembles of shallow paths) as text (``RULE_*``), their
decision functions (``verdict_*``, listed in ``VERDICTS``), their evidence (:func:`c5_evidence`), C2's
control across the counts' intervals (:func:`c2_across_interval`) and the ``judge_*`` that record each
verdict.
"""

from __future__ import annotations

import numpy as np

from ...book import checks
from ...core import explosion
from .experiments import COLLAPSE_SEP, LEARNED, RECOVER, TASK_NAMES, TASKS

C2_MIN_A = 0.2  # the previous C2 rule: pure attention had to collapse in this share of rollouts


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


C2_MAX_KA = (
    0.75  # C2: pure attention keeping the circle in this share of rollouts or more: nothing to prevent
)
C2_MARGIN = 0.25  # C2: the skip must keep the circle in at least this much larger a share to support
REGIMES = {
    "bert": "the authors' architecture (input LayerNorm, one post-LN attention layer of 2 heads, trained on "
    "the circle, rolled out on its own output)",
    "plain": "the LN-free architecture (the bare attention layer of 2 heads, no LayerNorm, trained on the "
    "circle, rolled out on its own output)",
}
RULE_C2 = (
    "judged on the circle kept, in two regimes: the authors' architecture (input LayerNorm, one post-LN "
    "attention layer) decides the verdict, and the LN-free architecture, the same rule on its networks, is "
    "its control; a rollout keeps the circle when it stays near it at the right speed (mean relative "
    "distance to the circle < 0.2, token separation > 0.5, angle travelled 0.5 to 2 times the true one, "
    "spread > half the true one); a collapsed rollout (the two tokens merged, mean separation over the last "
    f"quarter < {COLLAPSE_SEP} of the diameter) and a diverged one (exploded: {explosion.TREATMENT}) both "
    "fail to keep it, and a diverged rollout is never counted as prevention; with k_a and k_s the fractions "
    "of pure-attention and skip rollouts that kept the circle, each over every hidden size, seed and start "
    f"pair: inconclusive if fewer than 3 rollouts per variant or k_a >= {C2_MAX_KA} (pure attention keeps "
    f"the circle itself: nothing to prevent); supported if k_s >= k_a + {C2_MARGIN}; refuted if k_s <= k_a; "
    "inconclusive in between"
)
RULE_C2_OLD = (
    "on the authors' architecture, over every hidden size and seed, a rollout is collapsed when its two "
    f"tokens merge (mean separation over the last quarter < {COLLAPSE_SEP} of the diameter: the token "
    "matrix of rank one; divergence is not collapse); with a = the fraction of pure-attention rollouts "
    "collapsed and s = that of the skip variant, each over every network and start pair: inconclusive if "
    f"fewer than 3 rollouts per variant or a < {C2_MIN_A} (pure attention rarely collapses: nothing for "
    "the skip to prevent); supported if s <= a/4; refuted if s >= a/2; inconclusive in between (thresholds "
    "set after pilot runs, see the page)"
)


def _outcomes(c: dict) -> str:
    return (
        f"{c['kept']} of {c['n']} (collapsed {c['collapsed']}, diverged {c['diverged']}, other "
        f"{c.get('other', c['n'] - c['kept'] - c['collapsed'] - c['diverged'])})"
    )


def verdict_c2(evidence: dict) -> tuple[str, str]:
    """C2 from ``counts`` (:func:`circle_counts` of one architecture): ``attention`` and ``skip`` each with
    ``n``, ``kept``, ``collapsed``, ``diverged`` (and ``other``); ``regime`` names the architecture."""
    att, sk = evidence["counts"]["attention"], evidence["counts"]["skip"]
    regime = evidence.get("regime") or REGIMES.get(evidence.get("arch"), "this architecture")
    if min(att["n"], sk["n"]) < 3:
        return "inconclusive", (
            f"In {regime}, too few rollouts to decide ({att['n']} pure attention, {sk['n']} skip)."
        )
    ka, ks = att["kept"] / att["n"], sk["kept"] / sk["n"]
    text = (
        f"in {regime}, pure attention kept the circle in {_outcomes(att)} rollouts, the skip variant in "
        f"{_outcomes(sk)}; diverged rollouts count as not kept"
    )
    if ka >= C2_MAX_KA:
        return (
            "inconclusive",
            f"Pure attention keeps the circle itself, so there is nothing to prevent: {text}.",
        )
    if ks >= ka + C2_MARGIN:
        return "supported", f"The skip keeps the circle where pure attention does not: {text}."
    if ks <= ka:
        return "refuted", f"The skip keeps the circle no more often than pure attention: {text}."
    return (
        "inconclusive",
        f"The skip keeps the circle more often, but not by {C2_MARGIN:g} of the rollouts: {text}.",
    )


def old_verdict_c2(evidence: dict) -> tuple[str, str]:
    """C2's previous rule (:data:`RULE_C2_OLD`: collapse counted, divergence not), kept to show its verdict
    on the same rollouts beside the new one."""
    att, sk = evidence["counts"]["attention"], evidence["counts"]["skip"]
    if min(att["n"], sk["n"]) < 3:
        return "inconclusive", f"Too few rollouts to decide ({att['n']} pure attention, {sk['n']} skip)."
    a, s = att["collapsed"] / att["n"], sk["collapsed"] / sk["n"]
    text = (
        f"pure attention collapsed in {att['collapsed']} of {att['n']} rollouts (diverged "
        f"{att['diverged']}, kept the circle {att['kept']}), the skip variant in {sk['collapsed']} of "
        f"{sk['n']} (diverged {sk['diverged']}, kept {sk['kept']})"
    )
    if a < C2_MIN_A:
        return (
            "inconclusive",
            f"Pure attention rarely collapses here, so there is nothing to prevent: {text}.",
        )
    if s <= a / 4:
        return "supported", f"The skip prevents the collapse: {text}."
    if s >= a / 2:
        return "refuted", f"The skip does not prevent the collapse: {text}."
    return "inconclusive", f"The skip makes the collapse rarer but not rare: {text}."


C2_CONTROL_ON = (
    "the LN-free architecture: the same circle, hidden sizes and start pairs, the bare attention layer "
    "without LayerNorm"
)


def judge_c2(ch, counts: dict) -> str:
    """Record C2 (:func:`verdict_c2`) on the authors' architecture, with its control (the same rule on the
    LN-free architecture's rollouts) and the previous rule's verdict on the same rollouts beside."""
    ev = {"arch": "bert", "regime": REGIMES["bert"], "counts": counts["bert"]}
    v, reason = verdict_c2(ev)
    if "plain" in counts:
        vc, rc = verdict_c2({"arch": "plain", "regime": REGIMES["plain"], "counts": counts["plain"]})
    else:
        vc, rc = "not run", "The LN-free architecture was not trained in this run (parameter archs)."
    control = {"on": C2_CONTROL_ON, "verdict": vc, "reason": rc}
    old, old_reason = old_verdict_c2(ev)
    ch.glue("c2_reason", reason)
    ch.glue("c2_control_reason", rc)
    ch.value(
        "c2_old_rule_verdict",
        old,
        note="the previous rule (collapse counted, divergence not) on these rollouts",
    )
    ch.glue("c2_old_rule", RULE_C2_OLD)
    ch.glue("c2_old_reason", old_reason)
    across = c2_across_interval(ev)
    ch.glue("c2_interval", checks.interval_text(across))
    return ch.verdict(
        "C2",
        v,
        claim="skip connections prevent the collapse of the learned circle dynamics (Fig. 3; the authors' "
        "architecture, judged on the circle kept; the LN-free architecture as control)",
        rule=RULE_C2,
        evidence=ev
        | {
            "reason": reason,
            "across_interval": across,
            "control": control,
            "old_verdict": old,
            "old_reason": old_reason,
            "rule_old": RULE_C2_OLD,
        },
    )


def c2_across_interval(ev: dict) -> dict:
    """:func:`verdict_c2` with each variant's kept count (out of its rollouts) moved alone through its exact
    95% interval (:func:`rankcollapse.book.checks.across_interval`)."""
    c = ev["counts"]
    counts = {
        f"{'pure attention' if v == 'attention' else v} kept": (
            c[v]["kept"],
            c[v]["n"],
            checks.at_key("counts", v, "kept"),
        )
        for v in ("attention", "skip")
    }
    return checks.across_interval(verdict_c2, ev, counts)


RULE_C5 = (
    f"on the authors' architecture, a network is learned when its full accuracy is >= {LEARNED} above the "
    "best input-blind predictor (sort: the position-only prior; hull: the majority label; memorisation: "
    f"0.5), and its l90 is the shortest maximal path length whose exact restricted network (attention and "
    f"LayerNorm scales of the forward pass held fixed) recovers {RECOVER:.0%} of the accuracy above that "
    "baseline; a task is shallow when l90 <= L/2 on most of its learned seeds; a task counts when at least "
    "2 of its seeds learned; supported if every counted task is shallow, refuted if none is, inconclusive "
    "if the tasks disagree (the reason names them) or no task counts"
)


def verdict_c5(evidence: dict) -> tuple[str, str]:
    """C5 from ``L`` and ``by_task``: per task the seeds' ``learned`` and ``l90`` (None when not
    learned)."""
    L, half = evidence["L"], evidence["L"] / 2
    regime = evidence.get("regime") or "trained SANs with skips"
    shallow, deep, skipped = [], [], []
    for task, t in evidence["by_task"].items():
        l90 = [x for x, ok in zip(t["l90"], t["learned"]) if ok]
        name = TASK_NAMES.get(task, task)
        if len(l90) < 2:
            skipped.append(f"{name} ({len(l90)} of {len(t['learned'])} seeds learned)")
            continue
        n_sh = sum(x <= half for x in l90)
        desc = f"{name} (l90 {', '.join(map(str, l90))} of L = {L})"
        (shallow if 2 * n_sh > len(l90) else deep).append(desc)
    not_counted = f"; not counted: {', '.join(skipped)}" if skipped else ""
    if not shallow and not deep:
        return "inconclusive", f"In {regime}, no task was learned on enough seeds to ask{not_counted}."
    if not deep:
        return (
            "supported",
            f"In {regime}, short paths carry the accuracy on every task: {', '.join(shallow)}{not_counted}.",
        )
    if not shallow:
        return (
            "refuted",
            f"In {regime}, every task needs paths longer than L/2: {', '.join(deep)}{not_counted}.",
        )
    return "inconclusive", (
        f"In {regime}, the tasks disagree: short paths suffice on {', '.join(shallow)}, but not on "
        f"{', '.join(deep)}{not_counted}."
    )


VERDICTS = {"C2": verdict_c2, "C5": verdict_c5}


C5_REGIMES = {
    "bert": "trained SANs of the authors' architecture (post-LN, skips, no MLP, L = {L})",
    "plain": "trained LN-free SANs (skips, no MLP, a final LayerNorm, L = {L})",
}
C5_CONTROL_ON = (
    "the convex-hull networks alone: the same trained networks of the authors' architecture, restricted to "
    "the task on which the longest paths carry the accuracy (a part of the claim's own evidence, so a weak "
    "control)"
)


def c5_evidence(rows: list[dict], arch: str, tasks=TASKS) -> dict:
    """C5's evidence from the path-effectiveness rows of one architecture (``tasks``: the tasks judged)."""
    rs = [r for r in rows if r["arch"] == arch]
    return {
        "L": rs[0]["L"],
        "arch": arch,
        "regime": C5_REGIMES[arch].format(L=rs[0]["L"]),
        "by_task": {
            t: {
                "seeds": [r["seed"] for r in rs if r["task"] == t],
                "full": [r["full"] for r in rs if r["task"] == t],
                "baseline": _mean([r["baseline"] for r in rs if r["task"] == t]),
                "learned": [r["learned"] for r in rs if r["task"] == t],
                "l90": [r["l90"] for r in rs if r["task"] == t],
            }
            for t in tasks
        },
    }


def judge_c5(ch, rows: list[dict]) -> str:
    """Record C5 (:func:`verdict_c5`) on the authors' architecture, with its control (the same rule on the
    convex-hull networks alone, :data:`C5_CONTROL_ON`); the LN-free one's reading beside."""
    ev = c5_evidence(rows, "bert")
    v, reason = verdict_c5(ev)
    vc, rc = verdict_c5(c5_evidence(rows, "bert", tasks=("hull",)))
    ev["control"] = {"on": C5_CONTROL_ON, "verdict": vc, "reason": rc}
    ch.glue("c5_control_reason", rc)
    if any(r["arch"] == "plain" for r in rows):
        vp, rp = verdict_c5(c5_evidence(rows, "plain"))
        ch.value("c5_plain_reading", vp, note="the same rule on the LN-free SANs")
        ch.glue("c5_plain_reason", rp)
        ev["plain"] = {"verdict": vp, "reason": rp}
    ch.glue("c5_reason", reason)
    return ch.verdict(
        "C5",
        v,
        claim="SANs with skips behave like ensembles of shallow paths (trained networks, the authors' "
        "architecture, Fig. 4)",
        rule=RULE_C5,
        evidence=ev | {"reason": reason},
    )
