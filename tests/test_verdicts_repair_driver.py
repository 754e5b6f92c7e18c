"""repair-driver's verdict H1, a pure function of its evidence: synthetic evidence for every outcome
(``CASES``, checked by tests/test_verdict_rules.py), the rule first recorded beside it, and edge cases."""

from rankcollapse.chapters import repair_driver as drv


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
