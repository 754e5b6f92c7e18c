"""Synthetic evidence for every outcome of repair-path's verdict rules (H3, H4, H5, H7, W1);
tests/test_verdict_rules.py runs CASES. Edge cases of the rules below: a collapsed control, a refutation the
held grid cannot reach, no delay alpha where recovery is neither certain nor impossible."""

from rankcollapse.chapters.repair_path import experiments as rpx
from rankcollapse.chapters.repair_path import verdicts as rpv


def _h3(qk_ratio=1e-6, first=0.3, last=0.005, control=((0.5, False), (0.4, False))):
    return {
        "qk_ratio": qk_ratio,
        "qk_collapsed": qk_ratio * 0.05,
        "qk_healthy": 0.05,
        "numerically_zero_blocks": 12,
        "hinge_first": first,
        "hinge_last": last,
        "control": [
            {"seed": s, "depth": 6, "collapsed": c, "final_srank": 1.2 if c else 2.8, "qk_ratio": r}
            for s, (r, c) in enumerate(control)
        ],
    }


def _h4(factor=1e7, acol=0.02, held=((0.03, 0, 6), (0.1, 1, 6), (0.2, 4, 6), (0.6, 6, 6))):
    return {"reopen_factor": factor, "alpha_col": acol, "held": [list(h) for h in held]}


def _h5(alpha=0.2, pairs=((60, 150), (80, None), (None, None), (70, 200)), fractions=None):
    return {
        "alpha": alpha,
        "fractions": fractions or {"0.15": [1, 4], "0.2": [3, 4], "0.25": [4, 4]},
        "longest_delay": 500,
        "events": [{"seed": s, "t0": a, "tmax": b} for s, (a, b) in enumerate(pairs)],
    }


def _h7(excess=(0.2, 0.15, 0.1), recovered=None):
    pairs = [
        {"seed": i, "alpha": 0.3, "delay": 0, "excess": x, "gap_healthy": x + 0.24}
        for i, x in enumerate(excess)
    ]
    return {
        "alphas": [0.3, 0.6],
        "pairs": pairs,
        "recovered": len(pairs) if recovered is None else recovered,
    }


def _w1(wi=0.3, wc=0.9, tc=0.4):
    return {
        "w_healthy_vs_init": wi,
        "w_collapsed_vs_healthy": wc,
        "token_collapsed_vs_healthy": tc,
        "trace_token_ratio": 0.5,
        "trace_weight_ratio": 0.9,
    }


CASES = {
    "H3": {
        "supported": _h3(),
        "refuted": _h3(qk_ratio=0.5),
        "inconclusive": _h3(control=((0.01, False), (0.02, False))),  # the small alpha closes the path too
    },
    "H4": {
        "supported": _h4(),
        "refuted": _h4(held=((0.03, 4, 6), (0.1, 6, 6))),  # recovery at 1.5x the alpha of collapse
        "inconclusive": _h4(acol=0.1, held=((0.1, 0, 6), (0.2, 3, 6), (0.6, 6, 6))),  # 2x: in between
    },
    "H5": {
        "supported": _h5(),
        "refuted": _h5(pairs=((60, 70), (80, 40), (None, None), (90, 100))),
        "inconclusive": _h5(pairs=((60, 150), (80, 20), (None, None), (70, 200))),
    },
    "H7": {
        "supported": _h7(),
        "refuted": _h7(excess=(0.0, -0.02, 0.005)),
        "inconclusive": _h7(excess=(0.04, 0.03, 0.05)),
    },
    "W1": {
        "supported": _w1(),
        "refuted": _w1(wc=0.3),
        "inconclusive": _w1(wi=0.9),
    },
}


def test_h3_a_collapsed_control_is_no_control():
    v, reason = rpv.verdict_h3(_h3(control=((0.5, True), (0.4, True))))
    assert v == "inconclusive" and "no control" in reason and "2 of 2" in reason
    # one collapsed control of two: the other one decides
    assert rpv.verdict_h3(_h3(control=((0.001, True), (0.4, False))))[0] == "supported"
    # the hinge must fade; a hinge that grows toward the last block refutes whatever the control
    assert rpv.verdict_h3(_h3(first=0.01, last=0.02))[0] == "refuted"
    assert rpv.verdict_h3(_h3(first=0.05, last=0.01))[0] == "inconclusive"  # fades 5x, not 10x
    # the previous rule had no control: a path closed by the small alpha alone counted as supported
    ev = _h3(control=((0.01, False),))
    assert rpv.verdict_h3(ev)[0] == "inconclusive" and rpv.old_verdict_h3(ev) == "supported"


def test_h4_unreachable_refutation_and_no_recovery():
    v, reason = rpv.verdict_h4(_h4(held=((0.1, 0, 6), (0.3, 6, 6))))  # lowest 0.1 > 1.5 x 0.02
    assert v == "inconclusive" and "unreachable refutation" in reason
    v, reason = rpv.verdict_h4(_h4(held=((0.03, 0, 6), (0.3, 2, 6))))  # none recovers half
    assert v == "inconclusive" and "half" in reason
    # a collapse first crossed at alpha = 0: no held alpha can lie at or below 1.5x it
    assert "unreachable" in rpv.verdict_h4(_h4(acol=0.0))[1]
    assert rpv.verdict_h4(_h4(factor=1.5))[0] == "refuted"  # the switch does not reopen the path
    assert rpv.verdict_h4(_h4(factor=3))[0] == "inconclusive"  # reopens, but less than 5x
    # alpha_rec is the smallest held alpha recovering at least half (3 of 6 counts)
    assert "from alpha 0.2" in rpv.verdict_h4(_h4(held=((0.03, 0, 6), (0.2, 3, 6), (0.6, 6, 6))))[1]
    old = {"reopen_factor": 1e7, "ratios": [40.0, 36.0], "events": 2}
    assert rpv.old_verdict_h4(old) == "supported"
    assert rpv.old_verdict_h4(old | {"ratios": [None, None]}) == "inconclusive"


def test_h5_alpha_choice_and_outcomes():
    fr = {0.1: (0, 6), 0.15: (2, 6), 0.2: (4, 6), 0.3: (6, 6)}
    assert rpx.choose_h5_alpha(fr) == 0.15  # 2/6 and 4/6 are equally far from 1/2: the lower alpha
    assert rpx.choose_h5_alpha({0.1: (0, 2), 0.3: (2, 2)}) is None
    assert rpx.choose_h5_alpha({0.1: (1, 2), 0.3: (2, 2)}) == 0.1
    v, reason = rpv.verdict_h5(_h5(alpha=None, fractions={"0.1": [0, 2], "0.3": [2, 2]}))
    assert v == "inconclusive" and "certain or impossible" in reason
    assert rpv.h5_outcome(100, None) == "slower"  # no longer recovers: rarer
    assert rpv.h5_outcome(None, 300) == "faster"
    assert rpv.h5_outcome(None, None) == "none"
    assert rpv.h5_outcome(100, 149) == "same" and rpv.h5_outcome(100, 150) == "slower"
    assert rpv.h5_outcome(150, 100) == "faster"
    # events that recovered neither time carry no outcome; one event with a recovery decides nothing
    v, reason = rpv.verdict_h5(_h5(pairs=((60, 200), (None, None), (None, None))))
    assert v == "inconclusive" and "too few" in reason and "1 of 1" in reason
    # one faster event blocks support
    assert rpv.verdict_h5(_h5(pairs=((60, 200), (70, 200), (200, 60))))[0] == "inconclusive"


def test_old_h5_rule_kept():
    eff = {"events": [{"diff": 25}, {"diff": 30}], "any_recovered": True}
    assert rpv.old_verdict_h5(eff) == "supported"  # 20-step margin: inside the run-to-run spread
    assert rpv.verdict_h5(_h5(pairs=((100, 125), (100, 130))))[0] == "refuted"  # 50-step margin: the same


def test_h7_without_a_control_and_old_rule():
    v, reason = rpv.verdict_h7(_h7(excess=(), recovered=2))
    assert v == "inconclusive" and "2 recovered" in reason
    assert "2 of 3" in rpv.verdict_h7(_h7(excess=(0.2, 0.1), recovered=3))[1]
    assert rpv.old_verdict_h7([0.28, 0.23]) == "supported"
    assert rpv.old_verdict_h7([]) == "inconclusive"
    # the gap to the healthy network alone (0.24 + excess) would support; the excess refutes
    ev = _h7(excess=(0.0, 0.005, -0.01))
    assert rpv.verdict_h7(ev)[0] == "refuted"
    assert rpv.old_verdict_h7([x["gap_healthy"] for x in ev["pairs"]]) == "supported"


def test_w1_bounds():
    assert rpv.verdict_w1(_w1(wc=2.5))[0] == "inconclusive"
    assert rpv.verdict_w1(_w1(tc=0.8, wc=0.3))[0] == "inconclusive"  # no token collapse: nothing to compare


def test_h4_across_the_counts_intervals_both_outcomes():
    # alpha_col 0.05: recovery from 0.2 (4x) supports; 1 of 6 at 0.1 (2x) could be 3 of 6, which is neither
    res = rpv.h4_across_interval(_h4(acol=0.05))
    assert res["verdict"] == "supported" and not res["holds"]
    assert res["flips"]["recovered at held alpha 0.1"][0] == [3, "inconclusive"]
    many = ((0.03, 0, 40), (0.1, 0, 40), (0.2, 40, 40), (0.6, 40, 40))
    res = rpv.h4_across_interval(_h4(acol=0.05, held=many))  # 0 of 40 reaches only 3; 40 of 40 only 37
    assert res["verdict"] == "supported" and res["holds"]
