"""Synthetic evidence for every outcome of repair-path's verdict rules (H3, H4, H5, H7, W1);
tests/test_verdict_rules.py runs CASES. Edge cases of the rules below: a collapsed control, a refutation the
held grid cannot reach, no delay alpha where recovery is neither certain nor impossible."""

from rankcollapse.chapters.repair_path import experiments as rpx
from rankcollapse.chapters.repair_path import verdicts as rpv


def _h3(
    qk_ratio=1e-6,
    fades=(30.0, 40.0, 60.0),
    open_fades=(6.0, 8.0, 10.0),
    unsettled=(),
    control=((0.5, False), (0.4, False)),
    same_depth=(),
    first=0.3,
    last=0.005,
):
    """H3's evidence: the collapsed networks' hinge ratios ``fades``, the open-path networks' (the healthy
    networks at the events' steps, ``open_fades``; the same-depth drivers that did not settle,
    ``unsettled``), the shallower Q/K controls ``control`` and the same-depth ones ``same_depth`` as (Q/K
    ratio, collapsed); ``first``/``last``: the medians the previous rules read."""
    rows = [
        {
            "seed": s,
            "kind": "shallower",
            "depth": 6,
            "collapsed": c,
            "final_srank": 1.2 if c else 2.8,
            "qk_ratio": r,
        }
        for s, (r, c) in enumerate(control)
    ]
    rows += [
        {
            "seed": 10 + s,
            "kind": "same depth",
            "depth": 12,
            "collapsed": c,
            "final_srank": 1.2 if c else 2.0,
            "qk_ratio": r,
        }
        for s, (r, c) in enumerate(same_depth)
    ]
    return {
        "qk_ratio": qk_ratio,
        "qk_collapsed": qk_ratio * 0.05,
        "qk_healthy": 0.05,
        "numerically_zero_blocks": 12,
        "hinge_first": first,
        "hinge_last": last,
        "fades": list(fades),
        "open_fades": {"healthy": list(open_fades), "unsettled": list(unsettled)},
        "open_qk_ratios": {"healthy": [1.0] * len(open_fades), "unsettled": [0.8] * len(unsettled)},
        "qk_controls": rows,
    }


def _h4(factor=1e7, acol=0.02, held=((0.03, 0, 6), (0.1, 1, 6), (0.2, 4, 6), (0.6, 6, 6))):
    return {"reopen_factor": factor, "alpha_col": acol, "held": [list(h) for h in held]}


def _h5(
    pairs=((100, None), (150, 300), (None, None), (90, 200), (120, None), (80, 190), (70, 160)),
    replicates=((100, 120), (150, 130), (90, 100), (None, None)),
    alphas=(0.15, 0.2),
    fractions=None,
):
    """H5's evidence: ``pairs`` (undelayed, after the longest delay) and ``replicates`` (original,
    replicate) as steps to recovery (None: none), spread over ``alphas``; the default margin is 20 steps."""
    al = list(alphas) or [0.2]
    return {
        "alphas": list(alphas),
        "fractions": fractions or {"0.15": [3, 7], "0.2": [6, 7], "0.25": [7, 7]},
        "longest_delay": 500,
        "pairs": [
            {"seed": s, "alpha": al[s % len(al)], "t0": a, "tmax": b} for s, (a, b) in enumerate(pairs)
        ],
        "replicates": [
            {"seed": s, "alpha": al[s % len(al)], "t0": a, "trep": b} for s, (a, b) in enumerate(replicates)
        ],
        "replicate_shift": 10,
    }


def _h5_old(alpha=0.2, pairs=((60, 150), (80, None), (None, None), (70, 200)), fractions=None):
    """The previous H5 rule's evidence (one alpha, per-event times)."""
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
        "supported": _h3(),  # the fade 40x, 5x the open path's 8x
        "refuted": _h3(qk_ratio=0.5),
        # the fade no more than an open path's (the full record's per-event ratios against 15x)
        "inconclusive": _h3(fades=(18.0, 12.1, 34.2, 23.1, 6.4, 4.8, 46.9), open_fades=(13.0, 15.0, 20.0)),
    },
    "H4": {
        "supported": _h4(),
        "refuted": _h4(held=((0.03, 4, 6), (0.1, 6, 6))),  # recovery at 1.5x the alpha of collapse
        "inconclusive": _h4(acol=0.1, held=((0.1, 0, 6), (0.2, 3, 6), (0.6, 6, 6))),  # 2x: in between
    },
    "H5": {
        # 6 of 6 pairs with an outcome slower (M = 20): p = 1/64
        "supported": _h5(),
        # 1 of 8 slower, the rest within M = 20 steps: P(X <= 1) = 9/256
        "refuted": _h5(
            pairs=((100, 110), (150, 140), (90, 95), (120, 130), (80, None), (70, 75), (60, 60), (90, 80))
        ),
        # 3 of 6 slower
        "inconclusive": _h5(pairs=((100, None), (150, 300), (90, 100), (120, 110), (80, 190), (70, 60))),
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
    # the small alpha closes the path of the shallower controls too
    v, reason = rpv.verdict_h3(_h3(control=((0.01, False), (0.02, False))))
    assert v == "inconclusive" and "small alpha alone" in reason
    # the same-depth drivers that did not settle are a Q/K control of their own: they can stand alone ...
    ev = _h3(control=((0.5, True),), same_depth=((0.9, False), (1.1, False)))
    v, reason = rpv.verdict_h3(ev)
    assert v == "supported" and "depth-12 same-depth drivers that did not settle (2 of 2)" in reason
    # ... and a path they keep closed makes the closure the small alpha's, whatever the shallower ones show
    assert rpv.verdict_h3(_h3(same_depth=((0.02, False), (0.05, False))))[0] == "inconclusive"
    # a same-depth driver that collapsed after all is no control
    assert rpv.verdict_h3(_h3(same_depth=((0.02, True),)))[0] == "supported"


def test_h3_fade_against_the_open_path():
    # the hinge must fade: one that grows toward the last block refutes whatever the baseline
    assert rpv.verdict_h3(_h3(fades=(0.5, 0.8, 2.0)))[0] == "refuted"
    # exactly the margin is not more than it; just above it is
    assert rpv.verdict_h3(_h3(fades=(24.0,), open_fades=(8.0,)))[0] == "inconclusive"
    assert rpv.verdict_h3(_h3(fades=(24.1,), open_fades=(8.0,)))[0] == "supported"
    # the baseline is the larger kind's median: a same-depth driver at alpha_min fading 20x decides
    v, reason = rpv.verdict_h3(_h3(unsettled=(20.0, 25.0, 15.0)))
    assert v == "inconclusive" and "against 20x on an open path" in reason and "2 of it" in reason
    # no open-path network: no baseline, so the fade cannot count
    v, reason = rpv.verdict_h3(_h3(open_fades=()))
    assert v == "inconclusive" and "no baseline" in reason
    assert rpv.open_baseline({"healthy": [4.0, 6.0], "unsettled": []}) == (5.0, {"healthy": 5.0})
    assert rpv.fade_of(1.0, 0.0) == float("inf")


def test_h3_previous_rules_and_control():
    # the full record: 12.1x (first over last, medians over events) passed the fixed 10x; the per-event
    # ratios' median is no more than an open path's, so the new rule does not count the fade
    ev = _h3(
        fades=(18.0, 12.1, 34.2, 23.1, 6.4, 4.8, 46.9),
        open_fades=(13.0, 15.0, 20.0),
        first=0.178,
        last=0.0147,
    )
    assert rpv.verdict_h3(ev)[0] == "inconclusive"
    old, why = rpv.old_verdict_h3(ev)
    assert old == "supported" and "12.1x" in why and rpv.first_verdict_h3(ev) == "supported"
    # the previous rule read the shallower controls alone; the first had none
    closed = _h3(control=((0.01, False),))
    assert rpv.old_verdict_h3(closed)[0] == "inconclusive" and rpv.first_verdict_h3(closed) == "supported"
    assert rpv.old_verdict_h3(_h3(control=(), same_depth=((0.9, False),)))[0] == "inconclusive"
    # the control: the open-path networks judged by the same rule give the other outcome
    cev = rpv.control_evidence_h3(_h3())
    assert cev["qk_ratio"] == 1.0 and cev["fades"] == [6.0, 8.0, 10.0]
    v, reason = rpv.verdict_h3(cev)
    assert v == "refuted" and "still reaches Q/K" in reason
    assert rpv.control_evidence_h3(_h3(open_fades=())) is None


class _Ch:
    def __init__(self):
        self.values, self.glued, self.verdicts = {}, {}, {}

    def value(self, name, v, **kw):
        self.values[name] = v
        if kw.get("glue", True):
            self.glued[name] = v
        return v

    def glue(self, name, v):
        self.glued[name] = v

    def verdict(self, cid, v, *, claim, rule, evidence):
        self.verdicts[cid] = {"verdict": v, "rule": rule, "evidence": evidence}
        return v


def _open_row(seed, kind, fade, qk, collapsed=False):
    row = {"seed": seed, "kind": kind, "fade": fade, "qk_ratio": qk, "collapsed": collapsed}
    if kind == "unsettled":
        row["qk_control"] = {
            "seed": seed,
            "kind": "same depth",
            "depth": 12,
            "collapsed": collapsed,
            "final_srank": 2.0,
            "qk_ratio": qk,
        }
    return row


def test_judge_h3_puts_its_control_beside_the_verdict():
    at = {
        "qk_ratio": 1e-7,
        "qk_collapsed": 5e-9,
        "qk_healthy": 0.05,
        "numerically_zero_blocks": 20,
        "hinge_first": 0.5,
        "hinge_last": 0.005,
        "fades": {0: 100.0, 1: 40.0},
    }
    ctl = [
        {"seed": s, "kind": "shallower", "depth": 2, "collapsed": False, "qk_ratio": 20.0} for s in (0, 1)
    ]
    rows = [_open_row(0, "healthy", 150.0, 0.8), _open_row(1, "healthy", 270.0, 0.7)]
    rows += [_open_row(2, "unsettled", 30.0, 0.5), _open_row(3, "unsettled", 1e3, 1e-4, collapsed=True)]
    ch = _Ch()
    assert rpv.judge_h3(ch, at, ctl, rows) == "inconclusive"
    ev = ch.verdicts["H3"]["evidence"]
    assert ch.verdicts["H3"]["rule"] == rpv.RULE_H3 and ev["fade_margin"] == rpv.FADE_MARGIN
    assert ev["open_fades"] == {"healthy": [150.0, 270.0], "unsettled": [30.0]}  # seed 3 collapsed: out
    assert [c["kind"] for c in ev["qk_controls"]] == ["shallower", "shallower", "same depth", "same depth"]
    assert ev["control"]["verdict"] == "refuted" and "open-path" in ev["control"]["on"]
    assert ev["control"]["verdict"] != ch.verdicts["H3"]["verdict"]
    assert ev["old_rule_verdict"] == "supported" and ev["old_rule"] == rpv.OLD_RULE_H3
    assert ev["first_rule"]["verdict"] == "supported"
    assert ch.glued["h3_control_verdict"] == "refuted" and ch.glued["h3_old_rule_verdict"] == "supported"
    assert "no more than 3x" in ch.glued["h3_reason"]
    # no open-path network: the control is not run
    ch = _Ch()
    rpv.judge_h3(ch, at, ctl, [])
    assert ch.verdicts["H3"]["evidence"]["control"]["verdict"] == "not run"


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
    assert rpx.uncertain_alphas(fr) == [0.15, 0.2]  # the new rule pools every uncertain alpha
    assert rpx.choose_h5_alpha({0.1: (0, 2), 0.3: (2, 2)}) is None
    assert rpx.uncertain_alphas({0.1: (0, 2), 0.3: (2, 2)}) == []
    v, reason = rpv.verdict_h5(_h5(alphas=(), fractions={"0.1": [0, 2], "0.3": [2, 2]}))
    assert v == "inconclusive" and "certain or impossible" in reason
    assert rpv.h5_outcome(100, None, 50) == "slower"  # no longer recovers: rarer
    assert rpv.h5_outcome(None, 300, 50) == "faster"
    assert rpv.h5_outcome(None, None, 50) == "none"
    # the new rule counts a difference beyond the margin; the previous one from the margin on
    assert rpv.h5_outcome(100, 150, 50) == "same" and rpv.h5_outcome(100, 160, 50) == "slower"
    assert rpv.h5_outcome(100, 150, 50, beyond=False) == "slower"
    assert rpv.h5_outcome(160, 100, 50) == "faster"


def test_h5_margin_is_measured_on_the_replicates():
    assert rpv.h5_margin([{"t0": 100, "trep": 130}, {"t0": 90, "trep": 40}, {"t0": None, "trep": 80}]) == 50
    assert rpv.h5_margin([{"t0": None, "trep": 80}, {"t0": 100, "trep": None}]) is None
    # no replicate recovered both times: no margin, no decision
    v, reason = rpv.verdict_h5(_h5(replicates=((None, 80), (100, None))))
    assert v == "inconclusive" and "not measured" in reason
    # a wider measured margin turns the same pairs from slower into the same: 90-150 steps longer is inside
    # a 150-step margin, and only the two that no longer recover stay slower
    assert rpv.h5_counts(_h5())["slower"] == 6
    assert rpv.h5_counts(_h5(replicates=((100, 250),)))["slower"] == 2
    assert rpv.verdict_h5(_h5(replicates=((100, 250),)))[0] == "inconclusive"


def test_h5_sign_test():
    assert rpv.sign_thresholds(4) == (None, None)  # 1/16 > 0.05: neither outcome reachable
    assert rpv.sign_thresholds(5) == (5, 0)
    assert rpv.sign_thresholds(9) == (8, 1)
    assert rpv.detectable_share(4) is None
    q = rpv.detectable_share(9)
    assert 0.9 < q < 0.91  # 8 of 9 slowed needed: a true share of ~91% reaches it with 80% power
    # too few pairs with an outcome
    v, reason = rpv.verdict_h5(_h5(pairs=((100, None), (150, 300), (None, None), (90, 200))))
    assert v == "inconclusive" and "too few" in reason and "3 of 3" in reason
    # 'the same' counts as not slower: 5 slower and 5 the same is not support (ties dropped, it would be)
    same5 = ((100, 110), (150, 140), (90, 95), (120, 130), (70, 75))
    slow5 = ((100, None), (150, 300), (90, 200), (120, None), (80, 190))
    assert rpv.verdict_h5(_h5(pairs=slow5 + same5))[0] == "inconclusive"
    assert rpv.verdict_h5(_h5(pairs=slow5))[0] == "supported"
    # faster pairs are not slower either: 1 slower of 8, the rest faster
    fast = ((300, 100), (None, 200), (250, 90), (200, 60), (None, 100), (310, 120), (280, 90))
    assert rpv.verdict_h5(_h5(pairs=((100, None),) + fast))[0] == "refuted"


def test_h5_control_reads_the_replicates():
    """The control: each replicate against its original, a pair that recovered both times against the
    margin of the other replicates."""
    ev = _h5(replicates=((100, 120), (150, 180), (90, 290), (None, None)))
    cev = rpv.control_evidence_h5(ev)
    got = [rpv.h5_outcome(x["t0"], x["tmax"], x["margin"]) for x in cev["pairs"] if "margin" in x]
    assert got == ["same", "same", "slower"]  # 200 steps against the others' 30; 20 and 30 against 200
    assert [x.get("margin") for x in cev["pairs"]] == [200, 200, 30, None]
    # one replicate that recovered both times: its own difference is the margin, it reads 'the same'
    one = rpv.control_evidence_h5(_h5(replicates=((100, 160),)))
    assert one["pairs"][0]["margin"] == 60
    # no replicate: no control
    assert rpv.control_evidence_h5(_h5(replicates=())) is None
    # replicates that agree within their spread: the control refutes, where the delayed pairs support
    reps = ((100, 110), (150, 140), (90, 95), (120, 130), (80, 70), (70, 75), (60, 60), (90, 80))
    ev = _h5(replicates=reps)
    assert rpv.verdict_h5(ev)[0] == "supported"
    v, reason = rpv.verdict_h5(rpv.control_evidence_h5(ev))
    assert v == "refuted" and "against its original" in reason
    # a replicate that no longer recovers where its original did reads 'slower', as a delay would
    reps = ((100, None),) * 9 + ((70, 75),)
    c = rpv.h5_counts(rpv.control_evidence_h5(_h5(replicates=reps)))
    assert (c["slower"], c["same"], c["m"]) == (9, 1, 10)
    assert rpv.verdict_h5(rpv.control_evidence_h5(_h5(replicates=reps)))[0] == "supported"


def test_old_h5_rules_kept():
    eff = {"events": [{"diff": 25}, {"diff": 30}], "any_recovered": True}
    assert rpv.first_verdict_h5(eff) == "supported"  # the first rule: 20-step margin
    assert rpv.old_verdict_h5(_h5_old(pairs=((100, 125), (100, 130))))[0] == "refuted"  # 50 steps: the same
    assert rpv.old_verdict_h5(_h5_old())[0] == "supported"
    assert rpv.old_verdict_h5(_h5_old(pairs=((60, 200), (None, None))))[0] == "inconclusive"
    assert rpv.old_verdict_h5(_h5_old(pairs=((60, 200), (70, 200), (200, 60))))[0] == "inconclusive"
    assert rpv.old_verdict_h5(_h5_old(alpha=None))[0] == "inconclusive"


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


# -- issue #42: the controls of H4, H7 and W1, read by the same rule as the claim ---------------------------
def _reopen_rows(shallow=((0.46, 0.33, False), (0.45, 0.38, False)), same=(), healthy=((4.6e-4, 0.33),)):
    """H4's control rows (:func:`reopen_control_rows`): (qk at alpha_min, qk switched, collapsed) per
    shallower control and same-depth driver; (qk at alpha_min, qk switched) per healthy network."""
    rows = [
        {"seed": s, "kind": "shallower", "depth": 2, "collapsed": c, "qk_min": lo, "qk_switched": hi}
        for s, (lo, hi, c) in enumerate(shallow)
    ]
    rows += [
        {"seed": 10 + s, "kind": "same depth", "depth": 12, "collapsed": c, "qk_min": lo, "qk_switched": hi}
        for s, (lo, hi, c) in enumerate(same)
    ]
    rows += [
        {"seed": s, "kind": "healthy", "depth": 12, "collapsed": False, "qk_min": lo, "qk_switched": hi}
        for s, (lo, hi) in enumerate(healthy)
    ]
    return rows


def _h4_judge_inputs(held=((0.03, 0, 2), (0.1, 0, 2), (0.6, 2, 2))):
    from types import SimpleNamespace

    p = SimpleNamespace(
        switch_alphas=[a for a, _, _ in held],
        recover_window=5,
        alpha_min=0.02,
        ramp_start=400,
        ramp_end=800,
    )
    sw = {a: {"recovered": r, "events": n} for a, r, n in held}
    hy = [{"alpha_collapse": 0.02, "alpha_recover": 0.5, "ratio": 25.0} for _ in range(2)]
    return p, [{"seed": 0}, {"seed": 1}], {"reopen_factor": 1e8}, hy, sw


def test_h4_control_goes_through_verdict_h4():
    ev = _h4()
    rows = _reopen_rows()
    f, n_ok, n = rpv.reopen_factor_of(rows, rpv.H4_CONTROL_KINDS)
    assert (n_ok, n) == (2, 2) and abs(f - 0.355 / 0.455) < 1e-12
    cev = rpv.control_evidence_h4(ev, rows)
    assert cev["reopen_factor"] == f and cev["held"] == ev["held"]
    assert rpv.verdict_h4(ev)[0] == "supported" and rpv.verdict_h4(cev)[0] == "refuted"  # f < 2
    # a collapsed control leaves the factor; a same-depth driver joins it; none left: no control
    rows = _reopen_rows(shallow=((0.46, 0.33, False), (1e-9, 0.3, True)), same=((0.2, 0.2, False),))
    assert rpv.reopen_factor_of(rows, rpv.H4_CONTROL_KINDS)[1:] == (2, 3)
    assert rpv.control_evidence_h4(ev, _reopen_rows(shallow=((1e-9, 0.3, True),))) is None
    # a control whose path the switch does open goes on to the held switches, as the claim does
    assert rpv.verdict_h4(rpv.control_evidence_h4(ev, _reopen_rows(shallow=((1e-3, 1.0, False),))))[0] == (
        "supported"
    )
    assert rpv.reopen_factor_of(rows, ("healthy",))[0] == 0.33 / 4.6e-4


def test_judge_h4_puts_its_control_beside_the_verdict():
    from fakes import RecordingChapter
    from rankcollapse.chapters.repair_path import report as rpr

    p, events, reopening, hy, sw = _h4_judge_inputs()
    ch = RecordingChapter()
    reopening = rpr.record_reopen_control(ch, p, reopening, _reopen_rows())
    assert rpv.judge_h4(ch, p, events, reopening, hy, sw) == "supported"
    ev = ch.verdicts["H4"]["evidence"]
    assert ev["control"]["verdict"] == "refuted" and ev["control"]["on"] == rpv.H4_CONTROL_ON
    assert ev["control"]["reason"] == ch.glued["h4_control_reason"]
    assert ch.glued["h4_control_verdict"] == "refuted" and len(ev["control_rows"]) == 3
    assert abs(ch.values["h4_control_reopen_factor"] - ev["control_reopen_factor"]) < 1e-12
    assert ev["healthy_reopen_factor"] == ch.values["h4_healthy_reopen_factor"]
    assert ev["reopen_factor"] == 1e8  # the claim's own factor is untouched
    # every control collapsed: the control is not run
    ch = RecordingChapter()
    reopening = {"reopen_factor": 1e8, "control_rows": _reopen_rows(shallow=((1e-9, 0.3, True),))}
    rpv.judge_h4(ch, p, events, reopening, hy, sw)
    assert ch.verdicts["H4"]["evidence"]["control"]["verdict"] == "not run"
    # without control rows (the previous page) no control is recorded
    ch = RecordingChapter()
    rpv.judge_h4(ch, p, events, {"reopen_factor": 1e8}, hy, sw)
    assert "control" not in ch.verdicts["H4"]["evidence"]


def _h7_summary(step, losses, srank=2.5, settled=None):
    steps = list(range(step - 10 * (len(losses) - 1), step + 1, 10))
    return {
        "step": step,
        "hist": {"m_step": steps, "srank": [[srank]] * len(steps), "probe_loss": list(losses)},
        "det": {"settled": settled},
    }


def _null_rows(excess, alpha=0.6):
    return [
        {"seed": s, "other": (s + 1) % len(excess), "alpha": alpha, "step": 100, "loss": 2.0 + (x or 0.0)}
        | {"excess": x, "gap_healthy": None if x is None else x + 0.2}
        for s, x in enumerate(excess)
    ]


def test_h7_null_control_goes_through_verdict_h7():
    from types import SimpleNamespace

    p = SimpleNamespace(h7_control_alphas=[0.6], threshold=1.5)
    controls = {"h7": {s: {0.6: _h7_summary(100, [2.0] * 10)} for s in range(3)}}
    nev = rpv.h7_null_evidence(p, _null_rows([0.004, -0.02, 0.008]), controls)
    assert nev["recovered"] == 3 and [x["delay"] for x in nev["pairs"]] == [0, 0, 0]
    v, reason = rpv.verdict_h7(nev)
    assert v == "refuted" and "3 of 3 null pairs" in reason
    assert rpv.verdict_h7(rpv.h7_null_evidence(p, _null_rows([0.2, 0.1, 0.3]), controls))[0] == "supported"
    assert rpv.verdict_h7(rpv.h7_null_evidence(p, _null_rows([0.02, 0.03, 0.04]), controls))[0] == (
        "inconclusive"
    )
    # a pair whose control does not reach the other's step has no excess; a collapsed control leaves both
    # pairs it is part of
    assert len(rpv.h7_null_evidence(p, _null_rows([0.004, None, 0.008]), controls)["pairs"]) == 2
    controls["h7"][1][0.6] = _h7_summary(100, [2.0] * 10, srank=1.2)
    nev = rpv.h7_null_evidence(p, _null_rows([0.004, -0.02, 0.008]), controls)
    assert nev["recovered"] == 1 and [x["seed"] for x in nev["pairs"]] == [2]


def test_judge_h7_puts_its_control_beside_the_verdict():
    from types import SimpleNamespace

    from fakes import RecordingChapter
    from rankcollapse.chapters.repair_path import report as rpr

    p = SimpleNamespace(h7_control_alphas=[0.6], switch_alphas=[0.3, 0.6], threshold=1.5)
    sw = {
        a: {
            "rows": [
                {
                    "seed": s,
                    "recovered_after": 200 if a == 0.6 else None,
                    "control_gap": 0.15,
                    "loss_gap": 0.3,
                }
                for s in range(3)
            ]
        }
        for a in p.switch_alphas
    }
    controls = {"h7": {s: {0.6: _h7_summary(100, [2.0] * 10)} for s in range(3)}}
    ch = RecordingChapter()
    controls = rpr.record_h7_null(ch, p, controls, _null_rows([0.004, -0.02, 0.008]))
    assert ch.values["h7_null_excess_median_nats"] == 0.004 and ch.glued["h7_null_n"] == "3 of 3"
    assert rpv.judge_h7(ch, p, sw, [], controls) == "supported"
    ev = ch.verdicts["H7"]["evidence"]
    assert ev["control"]["verdict"] == "refuted" and ev["control"]["on"] == rpv.H7_NULL_ON
    assert ch.glued["h7_control_verdict"] == "refuted" and len(ev["null_pairs"]) == 3
    assert "recovered switches" in ev["reason"]  # the claim's own reason is worded as before
    # no null pair with an excess: the control is not run
    ch = RecordingChapter()
    rpv.judge_h7(ch, p, sw, [], controls | {"h7_null": _null_rows([None, None])})
    assert ch.verdicts["H7"]["evidence"]["control"]["verdict"] == "not run"


def test_w1_rank_one_control_goes_through_verdict_w1():
    from fakes import RecordingChapter
    from rankcollapse.chapters.repair_path import report as rpr

    kinds = rpx.WEIGHT_KINDS
    healthy = {k: 4.0 for k in kinds} | {"token_srank": 3.5}
    wr = {s: {"healthy": healthy} for s in (0, 1)}
    r1 = {s: {k: 1.0 for k in kinds} | {"token_srank": 1.3} for s in (0, 1)}
    ch = RecordingChapter()
    weights = rpr.record_rank_one(ch, wr, r1, _w1())
    assert weights["rank_one"] == {"w_vs_healthy": 0.25, "token_vs_healthy": 1.3 / 3.5}
    assert rpv.judge_w1(ch, weights, {"trace_token_ratio": 0.5, "trace_weight_ratio": 0.9}) == "supported"
    ev = ch.verdicts["W1"]["evidence"]
    assert ev["control"]["verdict"] == "refuted" and "constructed" in ev["control"]["on"]
    assert (
        "rank-one weights 0.25x" in ev["control"]["reason"] and ch.glued["w1_control_verdict"] == "refuted"
    )
    assert ev["w_collapsed_vs_healthy"] == 0.9  # the claim reads the collapsed networks, not the control's
    # a rank-one network whose tokens stay spread is no refutation: the same rule says inconclusive
    cev = rpv.control_evidence_w1(_w1(), {"w_vs_healthy": 0.25, "token_vs_healthy": 0.9})
    assert rpv.verdict_w1(cev)[0] == "inconclusive"
    # without the rank-one ratios (the previous page) no control is recorded
    ch = RecordingChapter()
    rpv.judge_w1(ch, _w1(), {})
    assert "control" not in ch.verdicts["W1"]["evidence"]


def test_rank_one_cuts_every_block_matrix():
    import torch

    w = torch.tensor([[3.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    r = rpx.rank_one(w)
    assert torch.linalg.matrix_rank(r) == 1 and torch.allclose(
        r, torch.tensor([[3.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    )
