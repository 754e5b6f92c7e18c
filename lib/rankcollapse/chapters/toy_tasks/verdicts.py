"""Chapter `toy-tasks`, verdicts: the rules of C2 (skips prevent the collapse of the learned circle
dynamics) and C5 (SANs with skips behave like ensembles of shallow paths) as text (``RULE_*``), their
decision functions (``verdict_*``, listed in ``VERDICTS``), their evidence (:func:`c5_evidence`), C2's
control across the counts' intervals (:func:`c2_across_interval`) and the ``judge_*`` that record each
verdict.
"""

from __future__ import annotations

import numpy as np

from ...book import checks
from .experiments import COLLAPSE_SEP, LEARNED, RECOVER, TASK_NAMES, TASKS


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


C2_MIN_A = 0.2  # C2: pure attention must collapse in at least this share of rollouts to ask the question
RULE_C2 = (
    "on the authors' architecture, over every hidden size and seed, a rollout is collapsed when its two "
    f"tokens merge (mean separation over the last quarter < {COLLAPSE_SEP} of the diameter: the token "
    "matrix of rank one; divergence is not collapse); with a = the fraction of pure-attention rollouts "
    "collapsed and s = that of the skip variant, each over every network and start pair: inconclusive if "
    f"fewer than 3 rollouts per variant or a < {C2_MIN_A} (pure attention rarely collapses: nothing for "
    "the skip to prevent); supported if s <= a/4; refuted if s >= a/2; inconclusive in between (thresholds "
    "set after pilot runs, see the page)"
)


def verdict_c2(evidence: dict) -> tuple[str, str]:
    """C2 from ``counts`` (:func:`circle_counts` of the authors' architecture): ``attention`` and ``skip``
    each with ``n`` and ``collapsed`` (and ``diverged``, ``kept``)."""
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


def judge_c2(ch, counts: dict) -> str:
    """Record C2 (:func:`verdict_c2`) on the authors' architecture, the LN-free one's counts beside."""
    ev = {"arch": "bert", "counts": counts["bert"], "counts_plain": counts.get("plain")}
    v, reason = verdict_c2(ev)
    if "plain" in counts:
        c = counts["plain"]
        reason += (
            f" Without LayerNorm (plain), pure attention collapsed in {c['attention']['collapsed']} and "
            f"diverged in {c['attention']['diverged']} of {c['attention']['n']}."
        )
    ch.glue("c2_reason", reason)
    across = c2_across_interval(ev)
    ch.glue("c2_interval", checks.interval_text(across))
    return ch.verdict(
        "C2",
        v,
        claim="skip connections prevent the collapse of the learned circle dynamics (Fig. 3, the authors' "
        "architecture)",
        rule=RULE_C2,
        evidence=ev | {"reason": reason, "across_interval": across},
    )


def c2_across_interval(ev: dict) -> dict:
    """:func:`verdict_c2` with each variant's collapsed count (out of its rollouts) moved alone through its
    exact 95% interval (:func:`rankcollapse.book.checks.across_interval`)."""
    c = ev["counts"]
    counts = {
        f"{'pure attention' if v == 'attention' else v} collapsed": (
            c[v]["collapsed"],
            c[v]["n"],
            checks.at_key("counts", v, "collapsed"),
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
        return "inconclusive", f"No task was learned on enough seeds to ask{not_counted}."
    if not deep:
        return (
            "supported",
            f"Short paths carry the accuracy on every task: {', '.join(shallow)}{not_counted}.",
        )
    if not shallow:
        return "refuted", f"Every task needs paths longer than L/2: {', '.join(deep)}{not_counted}."
    return "inconclusive", (
        f"The tasks disagree: short paths suffice on {', '.join(shallow)}, but not on {', '.join(deep)}"
        f"{not_counted}."
    )


VERDICTS = {"C2": verdict_c2, "C5": verdict_c5}


def c5_evidence(rows: list[dict], arch: str) -> dict:
    rs = [r for r in rows if r["arch"] == arch]
    return {
        "L": rs[0]["L"],
        "arch": arch,
        "by_task": {
            t: {
                "seeds": [r["seed"] for r in rs if r["task"] == t],
                "full": [r["full"] for r in rs if r["task"] == t],
                "baseline": _mean([r["baseline"] for r in rs if r["task"] == t]),
                "learned": [r["learned"] for r in rs if r["task"] == t],
                "l90": [r["l90"] for r in rs if r["task"] == t],
            }
            for t in TASKS
        },
    }


def judge_c5(ch, rows: list[dict]) -> str:
    """Record C5 (:func:`verdict_c5`) on the authors' architecture; the LN-free one's reading beside."""
    ev = c5_evidence(rows, "bert")
    v, reason = verdict_c5(ev)
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
