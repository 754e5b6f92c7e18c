"""Synthetic evidence for each outcome of every verdict rule of `real-models` (``CASES``, checked by
tests/test_verdict_rules.py), the edge cases, and the judges: each records its control (the same rule on a
run where it should give the other outcome) and the previous rule's verdict beside the claim's, on every
checkpoint (none left out for not having learned)."""

import numpy as np

from fakes import RecordingChapter
from rankcollapse.chapters.real_models import verdicts as rmv


def _c1(cl, r_final, r0=0.6, L=12):
    return {"collapse_layer": cl, "L": L, "r0": r0, "r_final": r_final}


def _c3(gap, L=6):
    return {"log_gap": gap, "log_area": gap * L, "L": L, "SAN_collapse_layer": 2}


def _q2e(holding, layers=6, state="trained", written_max=0.01):
    return {
        "frac_heads_holding": 1.0,
        "max": written_max,
        "median": 0.001,
        "layers_holding": holding,
        "layers": layers,
        "scaled_max": 0.5 if holding == layers else 20.0,
        "scaled_median": 0.5 if holding == layers else 10.0,
        "state": state,
        "frac_scaled_holding": holding / layers,
        "frac_holding_fitted_gamma": 1.0,
    }


def _q2(a, b):
    """Two trained checkpoints holding the depth condition on a and b of their 6 layers."""
    return {
        "trained": {"bert_pretrained": _q2e(a, state="pretrained"), "bert_trained_s0": _q2e(b)},
        "init": {"bert_init": _q2e(0, state="init")},
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
        "supported": {"a": _c3(0.8), "b": _c3(2.0)},
        "refuted": {"a": _c3(0.5), "b": _c3(-0.1)},  # at the margin is not above it
        "inconclusive": {"a": _c3(0.8), "b": _c3(0.1)},
    },
    # 12 layers in all: none failing, 7 failing (more than half), 4 failing
    "Q2": {"supported": _q2(6, 6), "refuted": _q2(0, 5), "inconclusive": _q2(2, 6)},
}


def test_rules_read_only_the_models_of_their_evidence():
    """What a judge adds to the evidence (reason, control, the previous rule, the checkpoints that did not
    learn) is not a model: deciding again from the recorded evidence gives the same verdict."""
    extra = {
        "reason": "x",
        "control": {"on": "y", "verdict": "refuted", "reason": "z"},
        "old_rule_verdict": "supported",
        "old_rule": "w",
        "not_learned": ["a"],
    }
    for cid, rule in rmv.VERDICTS.items():
        if cid == "Q2":
            continue
        for o, ev in CASES[cid].items():
            assert rule(ev | extra)[0] == o


def test_q2_without_a_trained_checkpoint_is_not_run():
    assert rmv.verdict_q2({"trained": {}, "init": {"x": _q2e(6, state="init")}})[0] == "not run"


def test_q2_the_written_condition_cannot_decide_it():
    """Every head satisfies the condition as written on both checkpoints (the previous rule: supported), yet
    the depth bound's condition fails on every layer: refuted."""
    ev = _q2(0, 0)
    assert rmv.old_verdict_q2(ev) == "supported"
    assert rmv.verdict_q2(ev)[0] == "refuted"
    # the previous rule read only the checkpoints that learned
    ev["trained"]["bert_trained_s0"]["frac_heads_holding"] = 0.2
    assert rmv.old_verdict_q2(ev) == "refuted"
    assert rmv.old_verdict_q2(ev, ["bert_pretrained"]) == "supported"
    assert rmv.pretrained_only_verdict_q2(ev) == "supported"


def test_q2_evidence_control_and_attention_bound():
    """The evidence splits trained (here or loaded) from init and counts the layers holding f ||res X||^2 < 1
    on every sequence; the largest value any attention pattern could give bounds the written condition; the
    control's evidence reads the scaled run."""
    scaled = np.array([[0.5, 0.9], [0.5, 1.5], [3.0, 4.0]])  # (L=3, S=2): layer 0 holds, 1 and 2 fail
    q = {
        "state": "pretrained",
        "cond_head": np.full((3, 2, 2), 0.01),
        "cond_head_fitted": np.full((3, 2, 2), 0.001),
        "scaled": scaled,
        "w_head": np.array([[1.0, 2.0], [0.5, 0.5], [1.0, 1.0]]),
        "res_in": np.array([[10.0, 20.0], [10.0, 10.0], [5.0, 5.0]]),
        "n": 16,
        "control": {"k": 1, "scaled": scaled / 10, "cond_head": np.full((3, 2, 2), 0.001)},
    }
    init = {k: v for k, v in q.items() if k != "control"} | {"state": "init"}
    ev = rmv.evidence_q2({"x": q, "y": init})
    assert set(ev["trained"]) == {"x"} and set(ev["init"]) == {"y"}
    e = ev["trained"]["x"]
    assert (e["layers_holding"], e["layers"]) == (1, 3)
    assert e["attention_bound_max"] == 2 * 4 * 1.0 / 25.0  # 2 sqrt(16) ||W|| / ||res X||^2, largest
    assert e["w_max"] == 2.0 and e["w_threshold"] == 25.0 / 8.0
    assert rmv.verdict_q2(ev)[0] == "refuted"
    ec = rmv.control_evidence_q2({"x": q, "y": init})
    assert set(ec["trained"]) == {"x"} and ec["trained"]["x"]["layers_holding"] == 3
    assert rmv.verdict_q2(ec)[0] == "supported"


def test_c3_gap_is_continuous_and_floored():
    """The gap between two curves of log10 mean r: curves that both reached round-off add nothing (floored
    at C3_FLOOR), and moving one collapse by one layer moves the gap by that layer's difference over L."""
    san = [0.9, 1e-1, 1e-3, 1e-8, 1e-8]
    mlp = [0.9, 1e-1, 1e-2, 1e-7, 1e-8]
    assert abs(rmv.log_gap(mlp, san) - (1 + 0) / 4) < 1e-12
    assert rmv.log_gap(san, san) == 0.0
    late = [0.9, 1e-1, 1e-2, 1e-2, 1e-8]  # SAN+MLP's collapse one layer later
    assert abs(rmv.log_gap(late, san) - rmv.log_gap(mlp, san) - 2 / 4) < 1e-12


def _curve(r0, rate, L, floor=1e-8):
    return [max(r0 * rate**l, floor) if l else r0 for l in range(L + 1)]


def _summ():
    """Three models: random init, a trained checkpoint that learned and one that did not, whose transformer
    collapsed (the exclusion before #41 dropped exactly that one)."""
    summ = {}
    for key, state, seed in (("bert_init", "init", None), ("bert_trained_s0", "trained", 0)) + (
        ("bert_trained_s1", "trained", 1),
    ):
        s = {"_state": state, "_arch": "bert", "_seed": seed, "_label": key}
        curves = {
            "SAN": _curve(0.6, 1e-3, 6),
            "SAN+MLP": _curve(0.6, 0.3 if seed == 0 else 1e-3, 6),
            "SAN+skip": _curve(0.6, 0.9, 6),
            "transformer": _curve(0.6, 0.95 if seed != 1 else 1e-2, 6),
        }
        for v, m in curves.items():
            below = [i for i, x in enumerate(m) if x < 1e-2]
            s[v] = {
                "mean": m,
                "r0": m[0],
                "r_final": m[-1],
                "min_r": min(m),
                "L": 6,
                "collapse_layer": below[0] if below else -1,
            }
        summ[key] = s
    trained = {
        ("bert", 0): {"heldout_loss": 2.9, "unigram_loss": 3.2},
        ("bert", 1): {"heldout_loss": 3.197, "unigram_loss": 3.2},  # at the unigram loss: collapsed
    }
    return summ, trained


def test_judges_count_every_checkpoint_and_record_a_control_and_the_previous_rule():
    summ, trained = _summ()
    assert rmv.mark_learned(summ, trained) == ["bert_trained_s1"]
    ch = RecordingChapter()
    assert rmv.judge_c1(ch, summ) == "supported"
    assert rmv.judge_c2(ch, summ) == "inconclusive"  # the checkpoint at the unigram loss counts
    rmv.judge_c3(ch, summ)
    for cid in ("C1", "C2", "C3"):
        ev = ch.verdicts[cid]["evidence"]
        assert set(ev["control"]) == {"on", "verdict", "reason"}
        assert ev["control"]["verdict"] != ch.verdicts[cid]["verdict"], cid
        assert ev["old_rule"] == getattr(rmv, f"RULE_{cid}_OLD")
        assert set(rmv._models(ev)) == set(summ)  # every model judged
        assert "random init" in ch.verdicts[cid]["claim"]  # the regime is named
    assert ch.verdicts["C1"]["evidence"]["control"]["verdict"] == "refuted"  # SAN+skip does not collapse
    assert ch.verdicts["C2"]["evidence"]["control"]["verdict"] == "refuted"  # no skip: collapses
    assert ch.verdicts["C2"]["evidence"]["old_rule_verdict"] == "supported"  # with the exclusion
    assert ch.verdicts["C2"]["evidence"]["not_learned"] == ["bert_trained_s1"]
    assert ch.glued["c2_unlearned_lost"] == 1
    assert ch.verdicts["C3"]["verdict"] == "inconclusive"  # the MLP helps only where it decays slower
    assert ch.verdicts["C3"]["evidence"]["control"]["verdict"] == "supported"
    assert set(ch.values) == {f"c3_log_gap_{k}" for k in summ}
    assert ch.glued["c1_control_verdict"] == "refuted" and ch.glued["c2_old_verdict"] == "supported"


def test_judge_q2_records_its_control_and_the_written_condition():
    summ, trained = _summ()
    rmv.mark_learned(summ, trained)
    L, H, S = 3, 2, 2

    def q(state, scaled, control=None):
        out = {
            "state": state,
            "cond_head": np.full((L, H, S), 0.01),
            "cond_head_fitted": np.full((L, H, S), 0.001),
            "scaled": np.full((L, S), scaled),
            "w_head": np.ones((L, H)),
            "res_in": np.full((L, S), 10.0),
            "n": 16,
        }
        if control is not None:
            c = {"k": 2, "scaled": np.full((L, S), control), "cond_head": out["cond_head"] / 100}
            out["control"] = c
        return out

    qs = {
        "bert_init": q("init", 5.0),
        "bert_trained_s0": q("trained", 50.0, 0.5),
        "bert_trained_s1": q("trained", 0.3, 0.3),
    }
    ch = RecordingChapter()
    assert rmv.judge_q2(ch, qs, summ) == "inconclusive"  # 3 of 6 layers hold: not more than half fail
    ev = ch.verdicts["Q2"]["evidence"]
    assert ev["control"]["verdict"] == "supported" and "10^-k" in ev["control"]["on"]
    assert ev["old_rule_verdict"] == "supported" and ev["old_rule"] == rmv.RULE_Q2_OLD
    assert set(ev["trained"]) == {"bert_trained_s0", "bert_trained_s1"}
    assert set(ch.values) == {f"q2_{w}_{k}" for w in ("depth", "control") for k in ev["trained"]}
    assert ch.values["q2_depth_bert_trained_s0"]["attention_bound_max"] == 2 * 4 / 100
    assert ch.glued["q2_layers_holding"] == 3 and ch.glued["q2_layers"] == 6
