"""Synthetic evidence for every outcome of toy-tasks' verdict rules (C2 from the circle, C5 from the trained
SANs); tests/test_verdict_rules.py runs CASES. Edge cases of the rules below."""

from fakes import RecordingChapter
from rankcollapse.chapters.toy_tasks import verdicts as tk


def _counts(att_kept, skip_kept, n=48, skip_diverged=0):
    def c(k, diverged=0):
        return {"n": n, "kept": k, "collapsed": n - k - diverged, "diverged": diverged, "other": 0}

    return {
        "arch": "bert",
        "counts": {"attention": c(att_kept), "mlp": c(0), "skip": c(skip_kept, skip_diverged)},
    }


def _tasks(l90s, learned=None):
    out = {}
    for t, l90 in l90s.items():
        ok = learned[t] if learned else [x is not None for x in l90]
        out[t] = {"learned": ok, "l90": l90}
    return {"L": 6, "by_task": out}


CASES = {
    "C2": {
        "supported": _counts(10, 40),
        "refuted": _counts(20, 10),
        "inconclusive": _counts(10, 15),
    },
    "C5": {
        "supported": _tasks({"sort": [2, 2, 3], "hull": [1, 2, 2], "mem": [1, 1, 1]}),
        "refuted": _tasks({"sort": [5, 6, 6], "hull": [6, 6, 6], "mem": [4, 6, 5]}),
        "inconclusive": _tasks({"sort": [2, 2, 2], "hull": [6, 6, 6], "mem": [1, 1, 1]}),
    },
}


def test_c2_needs_a_circle_lost_to_keep_and_enough_rollouts():
    v, reason = tk.verdict_c2(_counts(40, 48))  # pure attention keeps the circle in 40 of 48
    assert v == "inconclusive" and "nothing to prevent" in reason
    v, _ = tk.verdict_c2(_counts(0, 2, n=2))
    assert v == "inconclusive"


def test_c2_diverged_rollouts_never_count_as_prevention():
    # the skip never merges its tokens but diverges everywhere: not one rollout kept the circle
    ev = _counts(5, 0, skip_diverged=48)
    assert ev["counts"]["skip"]["collapsed"] == 0
    v, reason = tk.verdict_c2(ev)
    assert v == "refuted" and "diverged 48" in reason
    # the previous rule read the same rollouts as prevention (kept beside the new one on the page)
    assert tk.old_verdict_c2(ev)[0] == "supported"
    # diverging rollouts added to a skip that keeps the circle in some: the kept share alone decides
    assert tk.verdict_c2(_counts(5, 20, skip_diverged=28))[0] == "supported"
    assert tk.verdict_c2(_counts(5, 8, skip_diverged=40))[0] == "inconclusive"


def test_c2_reason_names_the_regime():
    _, reason = tk.verdict_c2(_counts(10, 40))
    assert "authors' architecture" in reason
    _, reason = tk.verdict_c2(_counts(10, 40) | {"arch": "plain"})
    assert "LN-free" in reason


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
        c = {"n": n, "diverged": 0, "collapsed": 0}
        return {"arch": "bert", "counts": {"attention": c | {"kept": a}, "skip": c | {"kept": s}}}

    wide = tk.c2_across_interval(ev(0, 90, 100))  # 0 of 100 kept: reaches 3; 90 of 100 never falls to 28
    assert wide["verdict"] == "supported" and wide["holds"]
    few = tk.c2_across_interval(ev(0, 4, 9))  # 4 of 9 kept can fall to 1 of 9, below 0 + a quarter
    assert few["verdict"] == "supported" and not few["holds"] and "skip kept" in few["flips"]


def test_judge_c2_puts_its_control_into_the_evidence():
    ch = RecordingChapter()
    bert = _counts(2, 0, n=96, skip_diverged=90)["counts"]
    plain = _counts(0, 16, n=32, skip_diverged=16)["counts"]
    v = tk.judge_c2(ch, {"bert": bert, "plain": plain})
    got, ev = ch.verdicts["C2"]["verdict"], ch.verdicts["C2"]["evidence"]
    assert v == got == "refuted"
    c = ev["control"]
    assert (
        c["verdict"] == "supported" and "LN-free" in c["on"] and c["reason"] == ch.glued["c2_control_reason"]
    )
    assert ev["old_verdict"] == ch.values["c2_old_rule_verdict"]
    # without the LN-free networks the control is stated as not run, never left out
    ch = RecordingChapter()
    tk.judge_c2(ch, {"bert": bert})
    assert ch.verdicts["C2"]["evidence"]["control"]["verdict"] == "not run"


def test_judge_c5_puts_its_control_into_the_evidence():
    rows = [
        {
            "arch": "bert",
            "task": t,
            "seed": s,
            "L": 6,
            "full": 0.9,
            "baseline": 0.5,
            "learned": True,
            "l90": l,
        }
        for t, l in (("sort", 2), ("hull", 6), ("mem", 1))
        for s in range(3)
    ]
    ch = RecordingChapter()
    assert tk.judge_c5(ch, rows) == "inconclusive"
    c = ch.verdicts["C5"]["evidence"]["control"]
    assert c["verdict"] == "refuted" and "convex-hull" in c["on"] and "convex hull" in c["reason"]


def test_diverged_rollouts_are_never_kept():
    import math

    import torch

    from rankcollapse.chapters.toy_tasks import experiments as ex

    n, T = 1000, 40
    t = torch.arange(T + 1, dtype=torch.float64)
    ang = 2 * math.pi * t / n
    circ = torch.stack(
        [torch.stack([ang.cos(), ang.sin()], -1), -torch.stack([ang.cos(), ang.sin()], -1)], 1
    )
    traj = ex.RADIUS * circ  # the true rollout: kept
    assert ex.trajectory_metrics(traj, n)["cls"] == "kept"
    # the same rollout leaving ten radii once, or overflowing, is diverged and never kept
    out = traj.clone()
    out[T // 2, 0] *= 11
    nan = traj.clone()
    nan[-3:] = float("nan")
    for x in (out, nan):
        m = ex.trajectory_metrics(x, n)
        assert m["diverged"] and m["cls"] == "diverged" and not m["kept"]


# -- counts that move between machines: stated as proportions, and the sentences read across them ---------
def _circle_counts(att_kept=50, att_col=48, skip_col=6, plain_div=80, plain_col=0):
    def c(kept, col, div, n=144):
        return {"n": n, "kept": kept, "collapsed": col, "diverged": div, "other": n - kept - col - div}

    return {
        "bert": {
            "attention": c(att_kept, att_col, 0),
            "mlp": c(32, 34, 0),
            "skip": c(30, skip_col, 92),
        },
        "plain": {
            "attention": c(0, plain_col, plain_div, 96),
            "mlp": c(0, 38, 58, 96),
            "skip": c(10, 0, 80, 96),
        },
    }


def test_circle_spread_names_moved_counts_with_their_binomial_interval():
    from rankcollapse.chapters.toy_tasks.report import circle_spread_text

    tol = {"circle_collapsed_bert_mlp": 14.0, "circle_kept_bert_mlp": 1.0}
    text = circle_spread_text(_circle_counts(), tol)
    assert "attention + MLP collapsed 34 of 144 (95% interval 17%–31%), recorded ±14" in text
    assert "kept 32 of 144" not in text  # held to one rollout: not moved
    assert "keeps its reading" in text
    assert "No record" in circle_spread_text(_circle_counts(), {})


def test_circle_spread_says_when_a_sentence_does_not_hold_across_a_count():
    from rankcollapse.chapters.toy_tasks.report import circle_spread_text, sentences_across

    # the skip merged 2 of 144: its 95% interval reaches 0, where the sentence would read "apart"
    counts = _circle_counts(skip_col=2)
    flips = sentences_across(counts, {("bert", "skip", "collapsed"): (0, 7)})
    assert flips["circle_skip_md"][0][3:] == (0, "apart")
    text = circle_spread_text(counts, {"circle_collapsed_bert_skip": 2.0})
    assert "Not every sentence above holds" in text and "circle_skip_md" in text
    # far from every line, nothing changes
    assert sentences_across(_circle_counts(), {("bert", "skip", "collapsed"): (4, 8)}) == {}
