"""Synthetic evidence for every outcome of toy-tasks' verdict rules (C2 from the circle, C5 from the trained
SANs); tests/test_verdict_rules.py runs CASES. Edge cases of the rules below."""

from rankcollapse.chapters.toy_tasks import verdicts as tk


def _counts(att_collapsed, skip_collapsed, n=48):
    def c(k):
        return {"n": n, "collapsed": k, "diverged": 0, "kept": n - k, "other": 0}

    return {"counts": {"attention": c(att_collapsed), "mlp": c(0), "skip": c(skip_collapsed)}}


def _tasks(l90s, learned=None):
    out = {}
    for t, l90 in l90s.items():
        ok = learned[t] if learned else [x is not None for x in l90]
        out[t] = {"learned": ok, "l90": l90}
    return {"L": 6, "by_task": out}


CASES = {
    "C2": {
        "supported": _counts(30, 2),
        "refuted": _counts(30, 20),
        "inconclusive": _counts(30, 10),
    },
    "C5": {
        "supported": _tasks({"sort": [2, 2, 3], "hull": [1, 2, 2], "mem": [1, 1, 1]}),
        "refuted": _tasks({"sort": [5, 6, 6], "hull": [6, 6, 6], "mem": [4, 6, 5]}),
        "inconclusive": _tasks({"sort": [2, 2, 2], "hull": [6, 6, 6], "mem": [1, 1, 1]}),
    },
}


def test_c2_needs_a_collapse_to_prevent_and_enough_rollouts():
    v, reason = tk.verdict_c2(_counts(5, 0))  # pure attention collapses in 5 of 48: nothing to prevent
    assert v == "inconclusive" and "nothing to prevent" in reason
    v, _ = tk.verdict_c2(_counts(2, 0, n=2))
    assert v == "inconclusive"
    # divergence is not collapse: a skip variant that diverges everywhere but never merges supports C2
    ev = _counts(30, 0)
    ev["counts"]["skip"].update(diverged=48, kept=0)
    assert tk.verdict_c2(ev)[0] == "supported"


def test_c5_counts_only_tasks_learned_on_two_seeds():
    ev = _tasks(
        {"sort": [2, None, None], "hull": [6, 6, 6], "mem": [1, 1, 1]},
        learned={"sort": [True, False, False], "hull": [True] * 3, "mem": [True] * 3},
    )
    v, reason = tk.verdict_c5(ev)
    assert v == "inconclusive" and "not counted: sort" in reason
    nothing = _tasks({"sort": [None] * 3}, learned={"sort": [False] * 3})
    assert tk.verdict_c5(nothing)[0] == "inconclusive"
    # a task is shallow on most of its learned seeds: one deep seed of three does not make it deep
    assert tk.verdict_c5(_tasks({"sort": [2, 2, 6], "mem": [1, 1, 1]}))[0] == "supported"


def test_c2_across_the_counts_intervals_both_outcomes():
    def ev(a, s, n):
        c = {"n": n, "diverged": 0, "kept": 0}
        return {"arch": "bert", "counts": {"attention": c | {"collapsed": a}, "skip": c | {"collapsed": s}}}

    wide = tk.c2_across_interval(ev(90, 0, 100))  # 0 of 100: reaches 3; 90 of 100 never falls to 12
    assert wide["verdict"] == "supported" and wide["holds"]
    few = tk.c2_across_interval(ev(5, 0, 9))  # 0 of 9 reaches 3 of 9, above a quarter of 5 of 9
    assert few["verdict"] == "supported" and not few["holds"] and "skip collapsed" in few["flips"]
