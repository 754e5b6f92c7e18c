"""Small hand-made evidence for every outcome of every verdict of the `layernorm` chapter (``CASES``,
checked by tests/test_verdict_rules.py), and the edge cases (no experiment run)."""

from rankcollapse.chapters.layernorm import verdicts


def _row(label, depth_ln, depth_plain):
    return {
        "label": label,
        "depth_ln": depth_ln,
        "depth_plain": depth_plain,
        "delta": depth_ln - depth_plain,
    }


def _c4(random, attack, horizon=16):
    return {"horizon": horizon, "beta": 1.0, "random": random, "attack": attack}


_CALM = [_row("weight scale 1, post-LN", 4, 3), _row("weight scale 1, pre-LN", 3, 3)]

CASES = {
    "C4": {
        # LN keeps r up for the whole horizon (17 = none within 16) where the same weights collapse at 4
        "refuted": _c4(_CALM, [_row("constructed, c = 0.25", 17, 4), _row("searched without LN", 3, 3)]),
        # neither regime moves the depth by more than 3 layers, and a change of > 5 could have shown
        "supported": _c4(_CALM, [_row("constructed, c = 1", 5, 4), _row("searched with LN", 6, 3)]),
        # the adversary moves it by 4 layers: more than 3, not more than 5
        "inconclusive": _c4(_CALM, [_row("constructed, c = 0.5", 8, 4)]),
    },
    "LN2": {
        "refuted": {
            "tested": 40,
            "counterexamples": [
                {"source": "search 2x2", "before": 1, "after": 0, "rank_gap_decades": 15.0},
            ],
            "min_tested": 100,
            "min_gap_decades": 6.0,
        },
        "supported": {"tested": 500, "counterexamples": [], "min_tested": 100, "min_gap_decades": 6.0},
        # a rank change decided only by the tolerance (2 decades apart) does not refute
        "inconclusive": {
            "tested": 500,
            "counterexamples": [{"source": "random", "before": 3, "after": 2, "rank_gap_decades": 2.0}],
            "min_tested": 100,
            "min_gap_decades": 6.0,
        },
    },
}


def test_c4_more_edges():
    # a horizon too short for a change of more than 5 layers cannot support the claim
    v, reason = verdicts.verdict_c4(_c4(_CALM, [_row("constructed", 5, 4)], horizon=6))
    assert v == "inconclusive" and "horizon" in reason
    # LN hastening the collapse by more than 5 layers is a role too
    assert verdicts.verdict_c4(_c4(_CALM, [_row("searched without LN", 5, 17)]))[0] == "refuted"
    # a role at random init alone refutes
    assert (
        verdicts.verdict_c4(_c4([_row("weight scale 4, post-LN", 12, 4)], [_row("c", 4, 4)]))[0] == "refuted"
    )
    # an adversary that ran nothing cannot support
    assert verdicts.verdict_c4(_c4(_CALM, []))[0] == "inconclusive"


def test_ln2_too_few_inputs():
    ev = {"tested": 10, "counterexamples": [], "min_tested": 100, "min_gap_decades": 6.0}
    assert verdicts.verdict_ln2(ev)[0] == "inconclusive"


def test_c4_refutation_says_where_it_holds():
    v, reason = verdicts.verdict_c4(CASES["C4"]["refuted"])
    assert v == "refuted"
    assert reason.startswith("LN plays a role at a fixed beta budget with constructed or searched weights")
    assert "not at random initialisation, where it plays none" in reason


def test_c4_control_is_the_search_before_it_starts():
    attack = [
        _row("constructed, c = 0.25", 17, 4),
        _row("searched with LN, start 1", 17, 5)
        | {"start_delta": 0, "start_depth_ln": 3, "start_depth_plain": 3},
    ]
    ev = _c4(_CALM, attack)
    assert verdicts.verdict_c4(ev)[0] == "refuted"
    cev = verdicts.c4_control_evidence(ev)
    assert [r["delta"] for r in cev["attack"]] == [0]
    v, reason = verdicts.verdict_c4(cev)
    assert v == "supported" and "starting points" in reason


def test_ln2_control_with_fewer_tokens_than_features_supports():
    from rankcollapse.chapters.layernorm.experiments import ln2_control

    ctl = ln2_control(6, 12, 0, trials=100)
    assert ctl["n"] == 6 and ctl["tested"] == 100 and ctl["counterexamples"] == []
    v, reason = verdicts.verdict_ln2(ctl)
    assert v == "supported" and "n = 6 < d = 12" in reason
    # with as many tokens as features or more, the rule's control uses d // 2 tokens
    assert ln2_control(12, 12, 0, trials=3)["n"] == 6
