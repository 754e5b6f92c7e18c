"""The skip chapter's verdicts, each a pure function of its evidence: synthetic evidence for every outcome
(``CASES``, checked by tests/test_verdict_rules.py) and the edge cases (no experiment run)."""

import math
from types import SimpleNamespace

from fakes import RecordingChapter
from rankcollapse.chapters.skip import verdicts as sk


def _c2(exact=True, kept=8, collapsed=0, exploded=0, n=8):
    return {
        "family": "SAN+skip networks",
        "construct_all_exact": exact,
        "construct_cases": 22,
        "networks": n,
        "kept": kept,
        "collapsed": collapsed,
        "exploded": exploded,
    }


def _cells(rows, tol=0.05):
    return {"tol": tol, "cells": [{"L": L, "beta": b, "best": v, "converged": c} for L, b, v, c in rows]}


CASES = {
    "C2": {
        "supported": _c2(),
        "refuted": _c2(kept=1, collapsed=7),
        "inconclusive": _c2(kept=4, exploded=4),
    },
    "Q1": {
        # deeper networks far above the one-layer value compounded, every search converged
        "supported": _cells([(1, 1.0, 0.25, True), (2, 1.0, 0.2, True), (4, 1.0, 0.1, True)]),
        # depth 4 below 0.5^4 = 0.0625 by more than the margin (0.95 * 0.5)^4 = 0.0509
        "refuted": _cells([(1, 1.0, 0.5, True), (2, 1.0, 0.4, True), (4, 1.0, 0.01, False)]),
        # above compounding, but the deepest search did not converge
        "inconclusive": _cells([(1, 1.0, 0.25, True), (2, 1.0, 0.2, True), (4, 1.0, 0.1, False)]),
    },
}


def test_c2_refuted_when_a_construction_fails():
    assert sk.verdict_c2(_c2(exact=False))[0] == "refuted"


def test_q1_edges():
    # a refutation needs the shallow cell converged: an unconverged one may still fall, so no counterexample
    v, reason = sk.verdict_q1(_cells([(1, 1.0, 0.5, False), (4, 1.0, 0.01, True)]))
    assert v == "inconclusive" and "1 of 1 deeper cells lie below" in reason and "none refutes" in reason
    # below compounding but within the margin: not a refutation; all converged yet below compounding
    assert sk.verdict_q1(_cells([(1, 1.0, 0.5, True), (4, 1.0, 0.06, True)]))[0] == "inconclusive"
    # one depth only: nothing to compound
    assert sk.verdict_q1(_cells([(1, 1.0, 0.5, True), (1, 3.0, 0.2, True)]))[0] == "inconclusive"
    # compounding uses the shallowest depth searched, per beta
    assert (
        sk.verdict_q1(
            _cells([(2, 1.0, 0.5, True), (4, 1.0, 0.26, True), (2, 3.0, 0.3, True), (4, 3.0, 0.1, True)])
        )[0]
        == "supported"
    )


def test_c2_exploded_networks_are_their_own_outcome_never_prevention():
    # every skip network exploded: none collapsed, yet none kept its rank, so no prevention
    v, reason = sk.verdict_c2(_c2(kept=0, exploded=8))
    assert v == "refuted" and "8 explode" in reason
    # the previous rule read exploded networks (whose relative residual fell) as collapsed
    old = {"construct_all_exact": True, "construct_cases": 22, "san_collapsed": 8, "skip_collapsed": 4}
    assert sk.old_verdict_c2(old | {"networks_per_variant": 8})[0] == "inconclusive"
    assert sk.verdict_c2(_c2(kept=6, exploded=2))[0] == "supported"
    assert sk.verdict_c2(_c2(n=0, kept=0))[0] == "inconclusive"


def test_c2_across_the_counts_intervals_both_outcomes():
    held = sk.c2_across_interval(_c2(kept=40, n=40))  # 40 of 40 kept can fall to 36: still >= 3/4
    assert held["verdict"] == "supported" and held["holds"]
    few = sk.c2_across_interval(_c2(kept=6, exploded=2, n=8))  # 6 of 8 can fall to 3 of 8
    assert few["verdict"] == "supported" and not few["holds"]


def test_judge_c2_puts_its_control_into_the_evidence():
    cons = {"exact_all": True, "cases": 22, "worst_dev": 1e-9}
    cons_noskip = {"exact_all": False, "cases": 22, "worst_dev": 1.0}
    curves = {
        "n_each": 8,
        "skip_kept": 4,
        "skip_collapsed_only": 0,
        "skip_exploded": 4,
        "san_kept": 0,
        "san_collapsed_only": 6,
        "san_exploded": 2,
        "san_collapsed": 8,
        "skip_collapsed": 4,
        "skip_r_L_min": 1e-16,
        "skip_abs_min": 0.97,
    }
    ch = RecordingChapter()
    assert sk.judge_c2(ch, cons, curves, cons_noskip) == "inconclusive"
    ev = ch.verdicts["C2"]["evidence"]
    assert ev["control"]["verdict"] == "refuted" and "pure SANs" in ev["control"]["on"]
    assert "pure SANs" in ev["control"]["reason"] and ev["old_verdict"] == "inconclusive"


def _front(rows):
    return [{"L": L, "beta": b, "best": v, "converged": c, "effort": 100} for L, b, v, c in rows]


def test_judge_q1_puts_its_control_into_the_evidence():
    p = SimpleNamespace(search_tol=0.05, search_d=8, search_tokens=8)
    front = _front([(1, 1.0, 0.25, True), (2, 1.0, 0.2, True), (4, 1.0, 0.1, True)])
    # without skips: far below compounding, but the shallowest search never converged, and one cell kept
    # no trusted value (inf), recorded as None
    noskip = _front([(1, 1.0, 1e-6, False), (2, 1.0, 1e-16, True), (4, 1.0, math.inf, False)])
    ch = RecordingChapter()
    assert sk.judge_q1(ch, front, {"res_1inf": 10.0}, p, noskip) == "supported"
    ev = ch.verdicts["Q1"]["evidence"]
    assert ev["control"]["verdict"] == "inconclusive" and "skip connections" in ev["control"]["on"]
    assert ev["control"]["reason"] == ch.glued["q1_control_reason"]
    assert "none refutes" in ev["control"]["reason"]
    assert [c["best"] for c in ev["control_cells"]] == [1e-6, 1e-16, None]
    # the same control with its shallowest search converged refutes: the rule can flip on it
    stalled = _front([(1, 1.0, 1e-6, True), (2, 1.0, 1e-16, True)])
    ch = RecordingChapter()
    sk.judge_q1(ch, front, {"res_1inf": 10.0}, p, stalled)
    assert ch.verdicts["Q1"]["evidence"]["control"]["verdict"] == "refuted"
    # no control run: 'not run'
    ch = RecordingChapter()
    sk.judge_q1(ch, front, {"res_1inf": 10.0}, p)
    assert ch.verdicts["Q1"]["evidence"]["control"]["verdict"] == "not run"
