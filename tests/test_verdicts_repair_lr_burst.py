"""Synthetic evidence for every outcome of repair-lr-burst's verdict rules (H6: a burst collapses the rank
with the query-key path open, and it can recover; H7: the loss stays above the paired control after
recovery); tests/test_verdict_rules.py runs CASES. Edge cases of the rules below, and the old H6 rule kept
beside the new one."""

from rankcollapse.chapters.repair_lr_burst import verdicts

SKIP, HEALTHY = 2.5e-11, 5.8e-2  # the closed reference and the healthy parents' median Q/K (full's order)


def _h6(qk, rec, skip=SKIP, healthy=HEALTHY, n_bursts=12):
    return {
        "bursts": [f"seed {i} x24" for i in range(len(qk))],
        "qk_collapsed": qk,
        "recovered": rec,
        "qk_skip": skip,
        "qk_skip_median": skip,
        "qk_skip_by_seed": {} if skip is None else {"0": skip},
        "qk_healthy": healthy,
        "n_bursts": n_bursts,
    }


def _h7(gaps, n_collapsed=6):
    return {"recovered_gaps": gaps, "n_collapsed": n_collapsed, "all_gaps": {}}


CASES = {
    "H6": {
        # 1e-3 is 4e7 x the skip collapse (open), though only 0.017 of healthy; one of three recovered
        "supported": _h6([1e-3, 2e-3, 8e-4], [False, True, False]),
        # every collapsed burst within 100x of the skip collapse: closed like it
        "refuted": _h6([1e-10, 3e-11, 2e-9], [False, False, True]),
        # open, but none recovered
        "inconclusive": _h6([1e-3, 2e-3], [False, False]),
    },
    "H7": {
        "supported": _h7([0.6, 0.7, 0.2]),
        "refuted": _h7([0.0, 0.005, -0.01]),
        "inconclusive": _h7([]),
    },
}


def test_h6_needs_a_collapse_and_a_closed_reference():
    v, why = verdicts.verdict_h6(_h6([], []))
    assert v == "inconclusive" and "0 of 12 bursts" in why
    v, why = verdicts.verdict_h6(_h6([1e-3], [True], skip=None))
    assert v == "inconclusive" and "no closed reference" in why
    # a skip collapse that does not close the path (only 1e3 below healthy): open and closed indistinct
    v, why = verdicts.verdict_h6(_h6([1e-3], [True], skip=HEALTHY / 1e3))
    assert v == "inconclusive" and "does not close the path" in why
    # the reference exactly 1e4 below healthy is still testable
    assert verdicts.verdict_h6(_h6([HEALTHY / 10], [True], skip=HEALTHY / 1e4))[0] == "supported"


def test_h6_open_but_none_recovered_and_mostly_closed():
    v, why = verdicts.verdict_h6(_h6([1e-3, 2e-3, 5e-4], [False] * 3))
    assert v == "inconclusive" and "0 of 3 collapsed bursts recovered" in why
    # one burst open, the median closed: neither open nor closed like the skip collapse
    ev = _h6([3e-11, 5e-11, 1e-3], [True, True, True])
    assert verdicts.path_state(ev)["state"] == "mostly closed"
    v, why = verdicts.verdict_h6(ev)
    assert v == "inconclusive" and "1 of 3 at or above 100x" in why


def test_h6_open_is_relative_to_the_skip_collapse_at_100x():
    # exactly 100 R is open; just below is closed
    assert verdicts.verdict_h6(_h6([100 * SKIP], [True]))[0] == "supported"
    assert verdicts.verdict_h6(_h6([99 * SKIP], [True]))[0] == "refuted"
    # the healthy ratio is reported, not tested: 1e-5 of healthy still counts as open
    v, why = verdicts.verdict_h6(_h6([HEALTHY * 1e-5], [True]))
    assert v == "supported" and "of healthy" in why


def test_old_h6_rule_reads_the_median_reference():
    # the new reference is the largest skip collapse, the old one their median
    ev = _h6([1e-8], [True]) | {"qk_skip": 1e-9, "qk_skip_median": 1e-12}
    assert verdicts.verdict_h6(ev)[0] == "refuted"  # 10x the largest: closed
    assert verdicts.old_verdict_h6(ev)[0] == "inconclusive"  # 1e4x the median, but far below 1/10 of healthy


def test_old_h6_rule_kept_beside():
    # the old rule asked for 1/10 of the healthy Q/K: 0.014 of healthy (full, 50-step bursts): not open
    ev = _h6([1e-3, 2e-3, 8e-4], [False, True, False])
    assert verdicts.old_verdict_h6(ev)[0] == "inconclusive" and verdicts.verdict_h6(ev)[0] == "supported"
    assert verdicts.old_verdict_h6(_h6([1e-2, 2e-2], [True, False]))[0] == "supported"
    assert verdicts.old_verdict_h6(_h6([1e-10], [True]))[0] == "refuted"
    assert verdicts.old_verdict_h6(_h6([], []))[0] == "inconclusive"
    assert verdicts.old_verdict_h6(_h6([1e-3], [True], skip=None))[0] == "inconclusive"


def test_h7_thresholds_and_denominators():
    v, why = verdicts.verdict_h7(_h7([], n_collapsed=9))
    assert v == "inconclusive" and "0 of 9" in why
    assert verdicts.verdict_h7(_h7([0.03]))[0] == "inconclusive"
    v, why = verdicts.verdict_h7(_h7([0.2, 0.1], n_collapsed=5))
    assert v == "supported" and "2 of 5" in why


def test_onset_bracket():
    ms = [8.0, 10.0, 12.0, 16.0]
    assert verdicts.onset_bracket(ms, {8.0: 0, 10.0: 0, 12.0: 2, 16.0: 3}) == (10.0, 12.0)
    assert verdicts.onset_bracket(ms, {8.0: 1, 10.0: 0, 12.0: 2, 16.0: 3}) == (None, 8.0)
    assert verdicts.onset_bracket(ms, dict.fromkeys(ms, 0)) == (16.0, None)
    # a grid given out of order is read in order
    assert verdicts.onset_bracket([16.0, 8.0], {8.0: 0, 16.0: 1}) == (8.0, 16.0)


def test_h6_testable_on_the_typical_skip_collapse_not_the_least_closed_one():
    """RULE_H6_CHANGE: one skip collapse that keeps 1.4e-4 of the healthy Q/K (the others ~1e-10 of it) made
    the evidence 'not testable' under the rule before the change; the typical (median) skip collapse closes
    the path, so the test is made, and 'open' is still judged against 100 x the least closed one."""
    ev = _h6([3e-3, 2e-3, 4e-3], [True, False, False]) | {"qk_skip": 7.5e-6, "qk_skip_median": 8.7e-11}
    assert verdicts.verdict_h6(ev)[0] == "supported"
    v, why = verdicts.verdict_h6(ev, testable_on="max")
    assert v == "inconclusive" and "largest skip collapse" in why
    # open is judged against the largest: bursts within 100x of it are closed even though the median is tiny
    closed = ev | {"qk_collapsed": [5e-4, 6e-4, 7e-4]}
    assert verdicts.path_state(closed)["state"] == "closed" and verdicts.verdict_h6(closed)[0] == "refuted"
    # and when the typical skip collapse does not close the path either, the test is not made
    loose = ev | {"qk_skip_median": 1e-5}
    assert (
        verdicts.verdict_h6(loose)[0] == "inconclusive"
        and "median skip collapse" in verdicts.verdict_h6(loose)[1]
    )


def test_h6_across_the_recovered_count_both_outcomes():
    open_qk = [1e-3] * 10
    # 1 of 10: the exact interval (0.25%-45%) excludes 0, so "supported" holds across it
    one = verdicts.h6_across_interval(_h6(open_qk, [True] + [False] * 9))
    assert one["verdict"] == "supported" and one["holds"] and one["counts"]["recovered bursts"][2] == 1
    # 0 of 10: its interval reaches 3 of 10, where the rule would say "supported"
    none = verdicts.h6_across_interval(_h6(open_qk, [False] * 10))
    assert none["verdict"] == "inconclusive" and not none["holds"]
    assert none["flips"]["recovered bursts"][0] == [1, "supported"]
