"""The `mlp` chapter's verdict rules on synthetic evidence (``CASES``, every outcome of every verdict,
checked by tests/test_verdict_rules.py), their edge cases, and the pieces its Q3 measurement and the
collapse guarantee rely on."""

import math

import pytest
import torch

from fakes import RecordingChapter
from rankcollapse.chapters.mlp import experiments, report, verdicts
from rankcollapse.core.san import SAN, SANConfig, random_tokens


def _ws(rise, fall, a_min, a_max):
    return {"rise": rise, "fall_after_peak": fall, "A_min_lambda": a_min, "A_max_lambda": a_max}


def _fam(min_r_L, gain, price):
    return {"min_r_L": min_r_L, "gain": gain, "price": price}


CASES = {
    "C3": {
        "supported": {"ws1": _ws(2.0, 0.2, -10.0, -8.2), "ws2": _ws(1.5, 0.0, -9.0, -7.5)},
        "refuted": {"ws1": _ws(2.0, 0.2, -10.0, -8.2), "ws2": _ws(0.0, 2.0, -5.0, -7.0)},
        "inconclusive": {"ws1": _ws(2.0, 1.0, -10.0, -9.0), "ws2": _ws(1.5, 0.0, -9.0, -7.5)},
    },
    "Q3": {
        "supported": {"families": {"shallow": _fam(1e-3, 3.0, 1.0), "skip": _fam(0.05, -0.3, -1.5)}},
        "refuted": {"families": {"shallow": _fam(1e-3, 3.0, 0.05), "skip": _fam(0.05, 1.0, -0.5)}},
        "inconclusive": {"families": {"shallow": _fam(1e-3, 3.0, 0.2), "skip": _fam(0.05, -0.3, 1.0)}},
    },
}


def test_q3_rule_edges():
    f = verdicts.verdict_q3
    # a family at round-off cannot buy rank, however large its gain: nothing to judge
    assert f({"families": {"deep": _fam(1e-14, 5.0, 5.0)}})[0] == "inconclusive"
    # no family buys rank
    assert f({"families": {"a": _fam(0.1, 0.2, 2.0), "b": _fam(0.1, -1.0, 2.0)}})[0] == "inconclusive"
    # two families that buy rank and disagree on the price
    assert f({"families": {"a": _fam(0.1, 1.0, 1.0), "b": _fam(0.1, 1.0, 0.0)}})[0] == "inconclusive"
    # a NaN price is no evidence
    assert f({"families": {"a": _fam(0.1, 1.0, math.nan)}})[0] == "inconclusive"


def test_c3_refutation_wins_over_support_elsewhere():
    ev = {"ws1": _ws(3.0, 0.0, -10.0, -7.0), "ws2": _ws(1.0, 0.0, -6.0, -7.0)}
    assert verdicts.verdict_c3(ev)[0] == "refuted"


def test_slowing_summary_and_table():  # moved here from tests/test_mlp_layernorm.py
    summ = [{"weight_scale": 1.0, "mlp_scale": 0.0, "A": -5.0, "lambda": 0.0}] + [
        {"weight_scale": 1.0, "mlp_scale": s, "A": a, "lambda": 2 * s, "depth": 3}
        for s, a in ((1.0, -8.0), (2.0, -6.0), (4.0, -4.0), (8.0, -7.0))
    ]
    sl = experiments.slowing(summ, 1.0)
    assert sl["peak_scale"] == 4.0
    assert sl["rise"] == pytest.approx(4.0) and sl["fall_after_peak"] == pytest.approx(3.0)
    assert sl["rho_upto_peak"] == pytest.approx(1.0)
    text = report.table_slowing(summ, {1.0: sl})
    assert "| 4.00, 3.00 |" in text and "| 1 of 4 |" in text
    ev = verdicts.c3_evidence({1.0: sl})
    assert ev["ws1"]["A_min_lambda"] == -8.0 and ev["ws1"]["A_max_lambda"] == -7.0


# -- the guarantee condition ---------------------------------------------------------------------------
def test_certificate_is_sqrt_f_times_res0():
    assert experiments.certificate(0.01, 5.0) == pytest.approx(math.log10(0.1 * 5.0))
    assert experiments.certificate(0.01, 5.0) < 0  # sqrt(0.01) * 5 = 0.5 < 1: certified
    assert experiments.certificate(0.1, 5.0) > 0  # f < 1, yet sqrt(0.1) * 5 = 1.58 > 1: not certified
    assert experiments.certificate(None, 5.0) is None and experiments.certificate(0.0, 5.0) is None


# -- Q3's measurement ----------------------------------------------------------------------------------
@pytest.mark.parametrize("skip", [False, True])
def test_control_is_the_network_with_identity_attention(skip):
    san = SAN.random(SANConfig(2, 2, 6, skip=skip, mlp_hidden=12), 3)
    X = random_tokens(5, 6, 4)
    eye = torch.eye(5, dtype=torch.float64).expand(2, 5, 5)
    Y = X
    for l in range(2):
        A = sum(Y @ san.head_maps(l)[h] for h in range(2)) + san.b[l]  # P_h = I for every head
        A = A + Y if skip else A
        Y = san.mlp(l, A) + (A if skip else 0)
    assert torch.allclose(experiments.tokenwise_forward(san, X), Y, atol=1e-12)
    assert torch.allclose(san.mix(0, eye, X), sum(X @ san.head_maps(0)[h] for h in range(2)), atol=1e-12)


def test_residual_sensitivity_of_known_maps():
    X = random_tokens(6, 4, 0)
    # the identity: the whole-output sensitivity is exactly 1; scaling the output changes neither measure
    s = experiments.residual_sensitivity(lambda Z: Z, X, n_dirs=5, seed=1)
    assert s["out"] == pytest.approx(1.0, rel=1e-12) and s["res"] > 0
    s7 = experiments.residual_sensitivity(lambda Z: 7.0 * Z, X, n_dirs=5, seed=1)
    assert s7["res"] == pytest.approx(s["res"], rel=1e-12) and s7["out"] == pytest.approx(1.0, rel=1e-12)
    # adding a large constant token: the whole-output sensitivity falls, the residual one does not
    c = torch.full((1, 4), 1e3, dtype=torch.float64)
    t = experiments.residual_sensitivity(lambda Z: Z + c, X, n_dirs=5, seed=1)
    assert t["out"] < 1e-2 * s["out"]
    assert t["res"] == pytest.approx(s["res"], rel=1e-9)
    # an output that is one token repeated has no residual: NaN, not "robust"
    u = experiments.residual_sensitivity(
        lambda Z: Z.mean(dim=-2, keepdim=True).expand_as(Z), X, n_dirs=3, seed=1
    )
    assert math.isnan(u["res"]) or u["res"] > 1e6


def _p():
    from types import SimpleNamespace

    return SimpleNamespace(
        weight_scales=[1.0, 2.0], n_layers=12, d_model=32, n_heads=2, q3_layers=2, c3_control_layers=3
    )


def test_c3_reads_only_its_scales_and_says_where():
    ev = CASES["C3"]["supported"] | {"where": "at random initialisation, 12 layers", "reason": "x"}
    v, reason = verdicts.verdict_c3(ev | {"control": {"verdict": "refuted"}})
    assert v == "supported" and reason.endswith("at random initialisation, 12 layers)")


def test_judge_c3_decides_its_control_by_the_same_rule():
    slow = {1.0: {"rise": 2.0, "fall_after_peak": 1.0, "A": [-10.0, -9.0], "peak_scale": 4, "rho_all": 0.5}}
    qslow = {"rise": 3.8, "fall_after_peak": 0.0, "A": [-4.2, -0.3], "peak_scale": 64, "rho_all": 1.0}
    ch = RecordingChapter()
    assert verdicts.judge_c3(ch, slow, qslow, _p()) == "inconclusive"
    c = ch.verdicts["C3"]["evidence"]["control"]
    assert c["verdict"] == "supported" and "3 layers" in c["reason"] and "3 layers" in c["on"]
    assert "random initialisation" in ch.verdicts["C3"]["evidence"]["reason"]


def test_q3_control_is_the_identity_attention_network_and_reasons_say_where():
    fam = {
        "min_r_L": 1e-3,
        "gain": 3.0,
        "price": 1.0,
        "min_r_L_control": 0.5,
        "gain_control": 0.2,
        "rise_S_control": 0.0,
    }
    ev = {"families": {"shallow": fam, "skip": fam | {"gain": -0.2, "price": -2.0}}}
    ch = RecordingChapter()
    assert verdicts.judge_q3(ch, ev, _p()) == "supported"
    e = ch.verdicts["Q3"]["evidence"]
    assert "random initialisation" in e["reason"] and "2 layers" in e["reason"]
    c = e["control"]
    assert c["verdict"] == "inconclusive" and "identity" in c["on"]
    assert c["evidence"]["families"]["shallow"] == {"min_r_L": 0.5, "gain": 0.2, "price": 0.0}


def test_the_guarantee_takes_the_largest_factor_over_layers():
    layers = [
        {"layer": 1, "factor": 0.01},
        {"layer": 2, "factor": 5.0},
        {"layer": 3, "factor": 1e9},  # its input is at round-off: gamma there is noise
        {"layer": 4, "factor": None},
    ]
    r = [1.0, 0.5, 1e-9, 1e-14, 1e-15]
    assert experiments.max_factor(layers, r) == 5.0
    assert experiments.max_factor([], r) is None


def test_c3_control_slowing_at_a_tiny_size():
    from types import SimpleNamespace

    p = SimpleNamespace(
        mlp_ratio=2,
        d_model=8,
        n_heads=2,
        n_tokens=6,
        weight_scales=[1.0],
        c3_control_layers=2,
        mlp_scales=[0.25, 1.0, 4.0],
        q3_seeds=2,
        seed=0,
    )
    rows = experiments.c3_control(p, "cpu", log=lambda m: None)
    assert len(rows) == 6
    q = experiments.q3_slowing(rows)
    assert len(q["A"]) == 3 and q["rise"] >= 0 and q["fall_after_peak"] >= 0
    ev = verdicts.c3_control_evidence(q, 1.0, "here")
    assert verdicts.verdict_c3(ev)[0] in ("supported", "refuted", "inconclusive")
