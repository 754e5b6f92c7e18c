"""repair-driver's verdict H1, a pure function of its evidence: synthetic evidence for every outcome
(``CASES``, checked by tests/test_verdict_rules.py), the rule first recorded beside it, and edge cases."""

from rankcollapse.chapters.repair_driver import verdicts as drv


def _ev(final, heal_level, cu, chl, drivers=None):
    return {
        "drivers": drivers if drivers is not None else len(final),
        "settled": len(final),
        "threshold": 1.5,
        "final_srank": final,
        "heal_level": heal_level,
        "collapse_minus_unigram": cu,
        "collapse_minus_healthy": chl,
    }


CASES = {
    "H1": {
        # every driver settles, none climbs half-way back, each at the frequency table
        "supported": _ev([1.2, 1.3, 1.1], [2.3, 2.4, 2.3], [0.0, -0.05, 0.1], [0.9, 1.0, 0.8]),
        "refuted": _ev([], [], [], [], drivers=3),
        # one of three healed half-way back
        "inconclusive": _ev([1.2, 2.5, 1.1], [2.3, 2.4, 2.3], [0.0, -0.05, 0.1], [0.9, 1.0, 0.8]),
    }
}


def test_h1_needs_more_than_half_of_the_drivers():
    ev = _ev([1.2], [2.3], [0.0], [0.9], drivers=2)
    assert drv.verdict_h1(ev)[0] == "inconclusive"
    assert "1 of 2 drivers settled" in drv.verdict_h1(ev)[1]


def test_h1_a_collapse_nearer_healthy_than_the_table_is_not_harmful():
    ev = _ev([1.2, 1.1], [2.3, 2.3], [0.8, 0.0], [0.3, 0.9])
    v, reason = drv.verdict_h1(ev)
    assert v == "inconclusive" and "1 of 2 harmful" in reason


def test_the_rule_first_recorded_is_stricter_about_harm():
    # a collapse 0.49 nats worse than the frequency table: harmful now, "not within 0.2 nats" then
    ev = _ev([1.43, 1.29], [2.3, 2.3], [-0.01, 0.49], [0.97, 1.0], drivers=3)
    assert drv.verdict_h1(ev)[0] == "supported"
    ov, reason = drv.old_verdict_h1(ev)
    assert ov == "inconclusive" and "1 of 2 within 0.2 nats" in reason
    # and its heal test is the bare threshold: a final srank of 1.6 counts as healed then, not now
    ev2 = _ev([1.6, 1.2], [2.3, 2.3], [0.0, 0.0], [0.9, 0.9])
    assert drv.verdict_h1(ev2)[0] == "supported"
    assert drv.old_verdict_h1(ev2)[0] == "inconclusive"
    for o in ("supported", "refuted", "inconclusive"):
        assert drv.old_verdict_h1(CASES["H1"][o])[0] == o


def test_h1_across_the_counts_intervals_both_outcomes():
    ten = _ev([1.2] * 10, [2.3] * 10, [0.0] * 10, [0.9] * 10, drivers=10)
    held = drv.h1_across_interval(ten)  # 10 of 10 settled: its interval 7-10 stays above half
    assert held["verdict"] == "supported" and "settled drivers" not in held["flips"]
    assert held["counts"]["settled drivers"] == [10, 10, 7, 10]
    # 0 of 10 healed: its interval reaches 3 of 10, and one healed event is no longer "supported"
    assert held["flips"]["healed"][0] == [1, "inconclusive"] and not held["holds"]
    six = _ev([1.2] * 6, [2.3] * 6, [0.0] * 6, [0.9] * 6, drivers=10)
    v = drv.h1_across_interval(six)
    assert v["verdict"] == "supported" and v["flips"]["settled drivers"][0] == [5, "inconclusive"]
    # refuted (none settled): only the counts with trials are moved; none has any, so it holds
    none = drv.h1_across_interval(_ev([], [], [], [], drivers=3))
    assert none["verdict"] == "refuted" and none["holds"] and none["counts"] == {}
