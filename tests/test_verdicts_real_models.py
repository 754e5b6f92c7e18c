"""Synthetic evidence for each outcome of every verdict rule of `real-models` (``CASES``, checked by
tests/test_verdict_rules.py), and the edge cases."""

import numpy as np

from rankcollapse.chapters.real_models import verdicts as rmv


def _c1(cl, r_final, r0=0.6, L=12):
    return {"collapse_layer": cl, "L": L, "r0": r0, "r_final": r_final}


def _q2(frac, frac_init=1.0):
    pre = {
        "frac_heads_holding": frac,
        "max": 0.5 if frac == 1.0 else 3.0,
        "median": 0.1,
        "frac_scaled_holding": 0.0,
        "scaled_median": 5.0,
        "frac_holding_fitted_gamma": 1.0,
    }
    return {
        "trained": {
            "bert_pretrained": dict(pre, state="pretrained"),
            "bert_trained_s0": dict(pre, state="trained"),
        },
        "init": {"bert_init": dict(pre, frac_heads_holding=frac_init, state="init")},
    }


CASES = {
    "C1": {
        "supported": {"a": _c1(2, 1e-8), "b": _c1(5, 1e-7)},
        "refuted": {"a": _c1(-1, 0.5)},
        "inconclusive": {"a": _c1(2, 0.1)},  # collapses below 0.01 but ends less than 3 decades down
    },
    "C2": {
        "supported": {"a": {"SAN+skip_min_r": 0.4, "transformer_min_r": 0.3}},
        "refuted": {"a": {"SAN+skip_min_r": 1e-3, "transformer_min_r": 0.3}},
        "inconclusive": {
            "a": {"SAN+skip_min_r": 0.4, "transformer_min_r": 0.3},
            "b": {"SAN+skip_min_r": 1e-4, "transformer_min_r": 0.3},
        },
    },
    "C3": {
        "supported": {"a": {"SAN_collapse_layer": 2, "SAN+MLP_collapse_layer": 3, "delay": 1}},
        "refuted": {"a": {"SAN_collapse_layer": 2, "SAN+MLP_collapse_layer": 2, "delay": 0}},
        "inconclusive": {
            "a": {"SAN_collapse_layer": 2, "SAN+MLP_collapse_layer": 3, "delay": 1},
            "b": {"SAN_collapse_layer": 5, "SAN+MLP_collapse_layer": 5, "delay": 0},
        },
    },
    "Q2": {"supported": _q2(1.0), "refuted": _q2(0.3), "inconclusive": _q2(0.8)},
}


def test_q2_without_a_trained_checkpoint_is_not_run():
    assert rmv.verdict_q2({"trained": {}, "init": {"x": _q2(1.0)["init"]["bert_init"]}})[0] == "not run"


def test_q2_reads_every_trained_checkpoint_and_shows_the_pretrained_only_rule():
    """One checkpoint trained here that fails the condition refutes Q2, although the loaded pretrained one
    (the rule before #19 read it alone) satisfies it everywhere."""
    ev = _q2(1.0)
    ev["trained"]["bert_trained_s0"] = dict(
        ev["trained"]["bert_trained_s0"], frac_heads_holding=0.2, max=4.0
    )
    assert rmv.verdict_q2(ev)[0] == "refuted"
    assert rmv.pretrained_only_verdict_q2(ev) == "supported"
    only_here = {"trained": {"a": dict(ev["trained"]["bert_trained_s0"])}, "init": {}}
    assert rmv.pretrained_only_verdict_q2(only_here) == "not run"


def test_q2_evidence_and_the_old_rule():
    """The evidence splits trained (here or loaded) from init; the old rule reads the fitted condition (which
    holds by construction), so it can say 'supported' where the a-priori rule refutes."""
    q = {
        "x": {
            "state": "pretrained",
            "cond_head": np.array([2.0, 3.0, 0.5]),
            "cond_head_fitted": np.array([0.1, 0.1, 0.1]),
            "scaled": np.array([4.0]),
        },
        "y": {
            "state": "init",
            "cond_head": np.array([0.1]),
            "cond_head_fitted": np.array([0.01]),
            "scaled": np.array([0.5]),
        },
    }
    ev = rmv.evidence_q2(q)
    assert set(ev["trained"]) == {"x"} and set(ev["init"]) == {"y"}
    assert ev["trained"]["x"]["state"] == "pretrained"
    assert rmv.verdict_q2(ev)[0] == "refuted"
    assert rmv.old_verdict_q2(ev) == "supported"
