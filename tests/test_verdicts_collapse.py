"""Chapter `collapse`: synthetic evidence for the C1 rule (``CASES``, every outcome, checked by
tests/test_verdict_rules.py), the rule's edge branches, the old rule it replaces, and the pieces the new
evidence is built from (decaying segments, the certificate fitted on other inputs, the depth prediction, the
grid-free phase boundaries), against hand computations."""

import math

import pytest
import torch

from fakes import RecordingChapter
from rankcollapse.chapters.collapse import experiments, figures, verdicts
from rankcollapse.core import bounds as B
from rankcollapse.core import trajectory as T
from rankcollapse.core.metrics import relative_residual
from rankcollapse.core.san import SAN, SANConfig, random_tokens


def _ev(**kw):
    e = {
        "exponent_decaying_median": 3.0,
        "decaying_fits": 10,
        "decaying_scales": [0.5, 1.0],
        "kappa_median": 0.1,
        "certified": 12,
        "certified_not_collapsed": 0,
    }
    return e | kw


CASES = {
    "C1": {
        "supported": _ev(),
        "refuted": _ev(certified_not_collapsed=1),
        "inconclusive": _ev(certified=0),
    }
}


@pytest.mark.parametrize(
    "kw,outcome",
    [
        ({"exponent_decaying_median": 1.2}, "refuted"),  # below 1.5
        ({"kappa_median": -1.8}, "refuted"),  # gamma grows: the bound's rate below 1.5
        ({"exponent_decaying_median": 1.8}, "inconclusive"),
        ({"exponent_decaying_median": 4.5}, "inconclusive"),
        ({"kappa_median": -1.0}, "inconclusive"),
        ({"kappa_median": None}, "inconclusive"),
        ({"exponent_decaying_median": None, "decaying_fits": 0}, "inconclusive"),
        ({"exponent_decaying_median": 2.0, "kappa_median": -0.5}, "supported"),  # closed bounds
        ({"certified": 0, "certified_not_collapsed": 0, "exponent_decaying_median": 1.0}, "refuted"),
    ],
)
def test_c1_rule_branches(kw, outcome):
    v, why = verdicts.verdict_c1(_ev(**kw))
    assert v == outcome, why


def test_c1_reason_says_where_it_holds_and_the_numbers():
    _, why = verdicts.verdict_c1(_ev())
    assert "weight scales 0.5, 1" in why and "3.00" in why and "12 of 12" in why


def test_old_rule_kept_for_comparison():
    base = {"certified": 4, "certified_collapsed": 4, "exponent_certified_median": 3.0}
    assert verdicts.old_verdict_c1(base) == "supported"
    assert verdicts.old_verdict_c1({**base, "certified_collapsed": 3}) == "refuted"
    assert verdicts.old_verdict_c1({**base, "exponent_certified_median": 1.1}) == "refuted"
    assert verdicts.old_verdict_c1({**base, "exponent_certified_median": 1.8}) == "inconclusive"
    assert (
        verdicts.old_verdict_c1(
            {**base, "certified": 0, "certified_collapsed": 0, "exponent_certified_median": None}
        )
        == "inconclusive"
    )


def test_linear_reference():
    assert figures.linear_reference([1.0, 0.5, 0.01], 3) == pytest.approx([1.0, 0.5, 0.25])


def test_decaying_segment_and_its_fit():
    # grows, then decays cubically over three pairs, then grows again
    cubic = [0.5]
    for _ in range(3):
        cubic.append(2.0 * cubic[-1] ** 3)
    res = [0.1, 0.5] + cubic[1:] + [cubic[-1] * 10]
    assert T.decaying_segment(res, None) == (1, 4)
    f = T.exponent_fit_decaying(res, None)
    assert f["slope"] == pytest.approx(3.0, rel=1e-10) and f["segment"] == (1, 4)
    # the floor cuts the segment to one pair: no fit
    assert T.exponent_fit_decaying(res, 3)["slope"] is None
    # a growing geometric sequence: no decaying segment, while the all-pairs slope is 1
    grow = [2.0 * 4.0**l for l in range(6)]
    assert T.decaying_segment(grow, None) == (0, 0)
    assert T.exponent_fit_decaying(grow, None)["slope"] is None
    assert T.exponent_fit(grow, None)["slope"] == pytest.approx(1.0, rel=1e-10)
    assert T.geometric_factor(grow, None) == pytest.approx(4.0)
    assert T.geometric_factor([1.0], None) is None


def test_depth_bound_and_certificate_margin_by_hand():
    # f = 4, res0 = 0.25: bound at depth l = 4^((3^l-1)/2) 0.25^(3^l) = (2 * 0.25)^(3^l) / 2
    lb = T.log10_depth_bound(4.0, 0.25, 2)
    assert lb == pytest.approx([math.log10(0.25), math.log10(0.5**3 / 2), math.log10(0.5**9 / 2)])
    assert T.certificate_margin(4.0, 0.25) == pytest.approx(math.log10(0.5))
    c = experiments.certify(0.5, 2.0, 1, 4, 0.25)  # f = 4 * 0.5 * 2 * 1 / 2 = 2
    assert c["factor"] == pytest.approx(2.0)
    assert c["certified"] and c["log10_input_scale"] == pytest.approx(-math.log10(math.sqrt(2) * 0.25))
    assert not experiments.certify(math.nan, 2.0, 1, 4, 0.25)["certified"]


def test_predict_depth_holds_fails_and_informs():
    # f = 1, res0 = 0.5: bound 0.5^(3^l); an actual residual above it at layer 2 is a failed prediction
    res = [0.5, 0.1, 0.01]
    pred = experiments.predict_depth(res, 3, 1.0)
    assert [p["holds"] for p in pred] == [True, False]
    assert pred[0]["gap"] == pytest.approx(math.log10(0.125 / 0.1))
    assert all(p["informative"] for p in pred)
    assert experiments.predict_depth(res, 1, 1.0) == []


def test_gamma_slope_reads_the_power_of_the_residual():
    layers = [{"layer": l, "res_in": r, "gamma": 3.0 * r**-0.5} for l, r in ((1, 1.0), (2, 0.1), (3, 0.01))]
    assert experiments.gamma_slope(layers, (0, 3)) == pytest.approx(-0.5)
    assert experiments.gamma_slope(layers, (0, 1)) is None  # one layer: no slope


def test_crossing_interpolates_in_log_scale_and_censors():
    s, cens = experiments._crossing([1.0, 10.0], [-1.0, 1.0])
    assert s == pytest.approx(math.sqrt(10.0)) and not cens
    assert experiments._crossing([1.0, 10.0], [-1.0, -0.5]) == (10.0, True)
    assert experiments._crossing([1.0, 10.0], [0.5, 1.0]) == (None, False)


def test_calibrated_gamma_is_the_largest_over_inputs_and_layers():
    san = SAN.random(SANConfig(3, 2, 12, weight_scale=1.0), 3)
    Xs = random_tokens(8, 12, 5, batch=3)
    cal = B.calibrated_gamma(san, Xs, 1e-7)
    hs, atts = san.forward(Xs[1])
    rows = B.layer_bounds(san, hs, atts)
    kept = [r["gamma"] for r in rows if float(relative_residual(hs[r["layer"] - 1])) > 1e-7]
    assert kept and cal["gamma"] >= max(kept) * (1 - 1e-12)
    assert 3 <= cal["pairs"] <= 9 and len(cal["per_layer"]) == 3


def test_calibrated_gamma_ignores_round_off_layers():
    """Past the float floor the ratio Delta / R^2 is round-off over round-off: such layers must not enter."""
    san = SAN.random(SANConfig(6, 1, 16, weight_scale=4.0), 0)
    Xs = torch.cat([c * random_tokens(16, 16, 500, batch=4) for c in (1.0, 0.1, 0.01)])
    floor = T.float_floor(torch.float64, 100.0)
    kept = B.calibrated_gamma(san, Xs, experiments.gamma_trust(floor))
    assert kept["gamma"] < 1.0  # the a-priori gamma of signal layers is far below one
    assert kept["pairs"] < 12 * 6


def test_curves_rows_at_a_tiny_size():
    rows = experiments.curves(
        8, 4, [8], [1], [0.5, 2.0], 1, True, 100.0, 1e-3, 0, "cpu", 2, [1.0, 0.01], log=lambda m: None
    )
    assert len(rows) == 2
    for r in rows:
        assert r["gamma_star"] > 0 and r["beta_max"] > 0
        assert all(p["holds"] in (True, False) for p in r["pred"])
        if not r["cert"]["certified"]:
            assert r["scaled"] is not None
            assert r["scaled"]["margin"] == pytest.approx(-math.log10(2.0), abs=1e-9)
    s = experiments.curves_summary(rows)
    ev = verdicts.c1_evidence(s, {"n_certified_runs": 0, "n_certified_runs_collapsed": 0})
    assert verdicts.verdict_c1(ev)[0] in ("supported", "refuted", "inconclusive")


def test_skip_control_is_judged_by_the_same_rule_and_recorded_beside_c1():
    kw = dict(log=lambda m: None)
    args = (8, 4, [8], [1], [0.5, 1.0], 1, True, 100.0, 1e-3, 0, "cpu", 2, [1.0, 0.01])
    rows = experiments.curves(*args, **kw)
    ctl = experiments.skip_control(*args, **kw)
    assert len(ctl) == len(rows)
    cs = experiments.skip_control_summary(ctl)
    cev = verdicts.c1_control_evidence(cs)
    for k in ("exponent_decaying_median", "kappa_median", "certified", "certified_not_collapsed"):
        assert k in cev
    ch = RecordingChapter()
    summ = experiments.curves_summary(rows)
    verdicts.judge_c1(ch, summ, {"n_certified_runs": 0, "n_certified_runs_collapsed": 0}, cs)
    c = ch.verdicts["C1"]["evidence"]["control"]
    assert set(c) >= {"on", "verdict", "reason"} and "skip" in c["on"]
    assert (c["verdict"], c["reason"]) == verdicts.verdict_c1(cev)
    assert ch.glued["c1_control_verdict"] == c["verdict"]


def test_certified_skip_runs_that_keep_their_rank_refute():
    cs = {
        "exponent_decaying_median": 1.1,
        "decaying_fits": 4,
        "decaying_scales": [0.5],
        "kappa_median": 10.0,
        "certified_drawn": 2,
        "certified_drawn_collapsed": 0,
        "certified_scaled": 10,
        "certified_scaled_collapsed": 3,
        "runs": 12,
        "collapsed": 0,
        "scaled_r_kept_median": 0.5,
    }
    ev = verdicts.c1_control_evidence(cs)
    assert ev["certified"] == 12 and ev["certified_not_collapsed"] == 9
    assert verdicts.verdict_c1(ev)[0] == "refuted"
