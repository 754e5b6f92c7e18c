"""The skip chapter's verdicts, each a pure function of its evidence: synthetic evidence for every outcome
(``CASES``, checked by tests/test_verdict_rules.py) and the edge cases (no experiment run)."""

from rankcollapse.chapters.skip import verdicts as sk


def _c2(exact=True, san=8, skip=0, n=8):
    return {
        "construct_all_exact": exact,
        "construct_cases": 22,
        "san_collapsed": san,
        "skip_collapsed": skip,
        "networks_per_variant": n,
    }


def _cells(rows, tol=0.05):
    return {"tol": tol, "cells": [{"L": L, "beta": b, "best": v, "converged": c} for L, b, v, c in rows]}


CASES = {
    "C2": {
        "supported": _c2(),
        "refuted": _c2(skip=8),
        "inconclusive": _c2(skip=3),
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
    assert sk.verdict_q1(_cells([(1, 1.0, 0.5, False), (4, 1.0, 0.01, True)]))[0] == "inconclusive"
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


def test_c2_across_the_counts_intervals_both_outcomes():
    def ev(san, skip, n):
        return {
            "construct_all_exact": True,
            "construct_cases": 20,
            "san_collapsed": san,
            "skip_collapsed": skip,
            "networks_per_variant": n,
        }

    held = sk.c2_across_interval(ev(40, 0, 40))  # 0 of 40 reaches 3; 40 of 40 stays above half
    assert held["verdict"] == "supported" and not held["holds"]  # 1 skip collapse is not "supported"
    assert held["flips"]["SAN+skip collapsed"][0] == [1, "inconclusive"]
    refuted = sk.c2_across_interval(ev(2, 30, 40))  # 30 of 40 vs 2 of 40: refuted over both intervals
    assert refuted["verdict"] == "refuted" and refuted["holds"]
