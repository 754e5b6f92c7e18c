"""repair-driver's verdict H1, a pure function of its evidence: synthetic evidence for every outcome
(``CASES``, checked by tests/test_verdict_rules.py), each way the rule refutes, its controls, the rules it
replaced beside it, and edge cases."""

from types import SimpleNamespace

from rankcollapse.chapters.repair_driver import verdicts as drv


def _ev(final, heal_level, cu, chl, drivers=None, healed_after=None):
    k = len(final)
    return {
        "drivers": drivers if drivers is not None else k,
        "settled": k,
        "seeds": list(range(k)),
        "threshold": 1.5,
        "branch": "untreated",
        "branch_steps": 600,
        "final_srank": final,
        "heal_level": heal_level,
        "collapse_minus_unigram": cu,
        "collapse_minus_healthy": chl,
        "rec_threshold": [2.2] * k,
        "healed_after": healed_after if healed_after is not None else [None] * k,
        "branch_final_srank": [1.3] * k,
    }


HARM3 = ([0.0, -0.05, 0.1], [0.9, 1.0, 0.8])  # each at the frequency table, far from healthy

CASES = {
    "H1": {
        # every driver settles, no untreated branch recovers, each at the frequency table
        "supported": _ev([1.2, 1.3, 1.1], [2.3, 2.4, 2.3], *HARM3),
        "refuted": _ev([], [], [], [], drivers=3),
        # one of three untreated branches recovered: not half, and not none
        "inconclusive": _ev([1.2, 1.3, 1.1], [2.3, 2.4, 2.3], *HARM3, healed_after=[None, 150, None]),
    }
}


def test_h1_refuted_when_more_than_half_of_the_settled_heal():
    ev = _ev([1.2, 1.3, 1.1], [2.3, 2.4, 2.3], *HARM3, healed_after=[120, 300, None])
    v, reason = drv.verdict_h1(ev)
    assert v == "refuted" and "2 of 3 recovered in the untreated branch" in reason
    # exactly half is not more than half
    half = _ev([1.2, 1.3], [2.3, 2.4], [0.0, 0.0], [0.9, 0.9], drivers=3, healed_after=[120, None])
    assert drv.verdict_h1(half)[0] == "inconclusive"


def test_h1_refuted_when_no_settled_collapse_is_harmful():
    # nearer the healthy network than the frequency table, every one
    ev = _ev([1.2, 1.1], [2.3, 2.3], [0.8, 0.9], [0.3, 0.2])
    v, reason = drv.verdict_h1(ev)
    assert v == "refuted" and "0 of 2 harmful" in reason
    one = _ev([1.2, 1.1], [2.3, 2.3], [0.8, 0.0], [0.3, 0.9])
    v, reason = drv.verdict_h1(one)
    assert v == "inconclusive" and "1 of 2 harmful" in reason


def test_h1_refuted_when_none_settles():
    v, reason = drv.verdict_h1(_ev([], [], [], [], drivers=4))
    assert v == "refuted" and "0 of 4 drivers settled" in reason


def test_h1_needs_more_than_half_of_the_drivers():
    ev = _ev([1.2], [2.3], [0.0], [0.9], drivers=2)
    assert drv.verdict_h1(ev)[0] == "inconclusive"
    assert "1 of 2 drivers settled" in drv.verdict_h1(ev)[1]


def test_h1_heals_on_the_branch_not_at_the_drivers_end():
    # a driver that ended half-way back (the replaced rule's heal) but whose untreated branch never
    # recovered: not healed now; and one below the heal level at the end whose branch recovered later
    ev = _ev([2.4, 1.2, 1.1], [2.3, 2.3, 2.3], *HARM3)
    assert drv.verdict_h1(ev)[0] == "supported"
    assert drv.old_verdict_h1(ev)[0] == "inconclusive"
    late = _ev([1.2, 1.3, 1.1], [2.3, 2.4, 2.3], *HARM3, healed_after=[200, 350, None])
    assert drv.old_verdict_h1(late)[0] == "supported"
    assert drv.verdict_h1(late)[0] == "refuted"


def test_h1_control_the_reversed_ramp_in_the_untreated_branches_place():
    ev = _ev([1.2, 1.3], [2.3, 2.4], [0.0, 0.1], [0.9, 0.8], drivers=2)
    rows = [
        {
            "seed": s,
            "rec_threshold": 2.2,
            "untreated": {"recovered_after": None, "final_srank": 1.3},
            "reversed-ramp": {"recovered_after": after, "final_srank": 2.6},
        }
        for s, after in ((0, 240), (1, 330))
    ]
    assert drv.verdict_h1(ev)[0] == "supported"
    cev = drv.control_evidence_h1(ev, rows)
    v, reason = drv.verdict_h1(cev)
    assert v == "refuted" and "2 of 2 recovered in the reversed-ramp branch" in reason
    assert cev["collapse_minus_unigram"] == ev["collapse_minus_unigram"]  # the same collapses


def test_h1_second_control_the_healthy_networks():
    p = SimpleNamespace(threshold=1.5)
    v, reason = drv.verdict_h1(drv.healthy_evidence_h1(p, {0: None, 1: None}))
    assert v == "refuted" and "0 of 2 healthy networks settled" in reason
    # a healthy network that settled has no branch to read: the control reads nothing
    v, reason = drv.verdict_h1(drv.healthy_evidence_h1(p, {0: 900, 1: None}))
    assert v == "inconclusive" and "1 of 2 healthy networks settled" in reason


def test_the_rule_first_recorded_is_stricter_about_harm():
    # a collapse 0.49 nats worse than the frequency table: harmful now, "not within 0.2 nats" then
    ev = _ev([1.43, 1.29], [2.3, 2.3], [-0.01, 0.49], [0.97, 1.0], drivers=3)
    assert drv.verdict_h1(ev)[0] == "supported"
    assert drv.old_verdict_h1(ev)[0] == "supported"
    fv, reason = drv.first_verdict_h1(ev)
    assert fv == "inconclusive" and "1 of 2 within 0.2 nats" in reason
    # and its heal test is the bare threshold: a final srank of 1.6 counts as healed then, not since
    ev2 = _ev([1.6, 1.2], [2.3, 2.3], [0.0, 0.0], [0.9, 0.9])
    assert drv.old_verdict_h1(ev2)[0] == "supported"
    assert drv.first_verdict_h1(ev2)[0] == "inconclusive"


def test_the_replaced_rules_reach_supported_refuted_and_inconclusive():
    inc = _ev([1.2, 2.5, 1.1], [2.3, 2.4, 2.3], *HARM3)  # one healed half-way back by the driver's end
    for rule in (drv.old_verdict_h1, drv.first_verdict_h1):
        assert rule(CASES["H1"]["supported"])[0] == "supported"
        assert rule(CASES["H1"]["refuted"])[0] == "refuted"
        assert rule(inc)[0] == "inconclusive"
    # neither could refute through a heal or through no harm
    healed = _ev([2.5, 2.6, 2.4], [2.3, 2.4, 2.3], [0.8, 0.9, 0.8], [0.1, 0.1, 0.1])
    assert drv.old_verdict_h1(healed)[0] == "inconclusive"
    assert drv.first_verdict_h1(healed)[0] == "inconclusive"


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
    # refuted by heals: 4 of 6 healed (interval 1-5 of 6), at 3 of 6 (half) it is no longer refuted
    heals = _ev([1.2] * 6, [2.3] * 6, [0.0] * 6, [0.9] * 6, drivers=10, healed_after=[50] * 4 + [None] * 2)
    r = drv.h1_across_interval(heals)
    assert r["verdict"] == "refuted" and r["flips"]["healed"][0] == [3, "inconclusive"]
    # refuted (none settled): only the counts with trials are moved; none has any, so it holds
    none = drv.h1_across_interval(_ev([], [], [], [], drivers=3))
    assert none["verdict"] == "refuted" and none["holds"] and none["counts"] == {}
