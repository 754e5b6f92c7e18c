"""repair-path's delayed switches, predictor split and weight trace: hand cases and tiny runs."""

from types import SimpleNamespace

import pytest
import torch

from rankcollapse.book.params import ParameterError
from rankcollapse.book.repair_params import study_spec
from rankcollapse.chapters import repair_path as rpa
from rankcollapse.chapters import schema
from rankcollapse.chapters.repair_path import experiments as rpx
from rankcollapse.chapters.repair_path import report as rpr
from rankcollapse.chapters.repair_path import verdicts as rpv
from rankcollapse.lm import model as lm
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import LMConfig
from rankcollapse.repair import controls, drivers, stages, treatments


def _p(**kw):
    return SimpleNamespace(**schema("repair-path").resolve({"profile": "smoke", **kw}))


def tiny_spec(**kw):
    base = dict(model=LMConfig(depth=2, d_model=8, heads=2, ctx=8), seed=0, batch=2, lr=1e-3, probe_batch=4)
    base.update(kw)
    return tr.RunSpec(**base)


def test_cross_parameter_checks():
    rpa.validate(_p())
    with pytest.raises(ParameterError, match="delays"):
        rpa.validate(_p(delays=[300, 100]))
    with pytest.raises(ParameterError, match="delays"):
        rpa.validate(_p(delays=[105]))
    with pytest.raises(ParameterError, match="delay_alphas"):
        rpa.validate(_p(delay_alphas=[0.25]))
    with pytest.raises(ParameterError, match="trace_every"):
        rpa.validate(_p(trace_every=55))
    with pytest.raises(ParameterError, match="h7_control_alphas"):
        rpa.validate(_p(h7_control_alphas=[0.45]))
    with pytest.raises(ParameterError, match="switch_alphas"):
        rpa.validate(_p(switch_alphas=[0.3, 0.1, 0.6]))
    with pytest.raises(ParameterError, match="control_depth"):
        rpa.validate(_p(control_depth=12))
    with pytest.raises(ParameterError, match="slow_ramp_steps"):
        rpa.validate(_p(slow_ramp_steps=605))
    with pytest.raises(ParameterError, match="slow_ramp_factor"):
        schema("repair-path").resolve({"profile": "smoke", "slow_ramp_factor": 0})
    with pytest.raises(ParameterError, match="delays"):
        schema("repair-path").resolve({"profile": "smoke", "delays": "soon"})


def test_delay_segments_share_prefixes():
    p = _p(delays=[100, 300], delay_alphas=[0.1, 0.3])
    e = {"seed": 0, "start": 420}
    study = study_spec(p)
    s300 = rpx.delay_segments(study, e, 300, 0.3)
    s100 = rpx.delay_segments(study, e, 100, 0.1)
    assert [n for _, n in s300] == [300, p.branch_steps]
    assert [n for _, n in s100] == [100, p.branch_steps]
    assert s300[0][0] == s100[0][0] == rpx.untreated_spec(study, e)  # one untreated trajectory
    assert tr.held(s300[0][0])  # so the longer continues the shorter (and saves milestones)
    assert s300[0][0].alpha(10**6) == pytest.approx(p.alpha_min)
    assert s300[-1][0].alpha(720) == 0.3 and s100[-1][0].alpha(520) == 0.1


def test_fit_threshold_and_accuracy():
    pts = [(1e-4, False), (3e-4, False), (1e-2, True), (3e-2, True)]
    t = rpx.fit_threshold(pts)
    assert 3e-4 < t < 1e-2 and rpx.accuracy(t, pts) == 1.0
    assert t == pytest.approx((3e-4 * 1e-2) ** 0.5)
    assert rpx.fit_threshold([(1e-3, True), (1e-2, True)]) is None  # one outcome: nothing to fit
    # an inverted relation cannot be fitted perfectly; the accuracy says so
    inv = [(1e-4, True), (1e-2, False)]
    assert rpx.accuracy(rpx.fit_threshold(inv), inv) == 0.5


def _rows(times0, timesmax, alpha=0.3):
    rows = []
    for s, (a, b) in enumerate(zip(times0, timesmax)):
        rows += [
            {"seed": s, "delay": 0, "alpha": alpha, "recovered_after": a, "predictor": 1.0},
            {"seed": s, "delay": 500, "alpha": alpha, "recovered_after": b, "predictor": 0.1},
        ]
    return rows


def test_delay_effect_and_first_h5_rule():
    p = SimpleNamespace(delays=[100, 500], delay_alphas=[0.1, 0.3], branch_steps=600)
    eff = rpx.delay_effect(p, _rows([50, 60], [120, None]))
    assert [e["diff"] for e in eff["events"]] == [70, 610 - 60]
    assert eff["alpha"] == 0.3 and eff["longest_delay"] == 500
    assert rpv.first_verdict_h5(eff) == "supported"
    assert rpv.first_verdict_h5(rpx.delay_effect(p, _rows([150, 160], [50, 60]))) == "refuted"
    assert rpv.first_verdict_h5(rpx.delay_effect(p, _rows([50, 60], [55, 65]))) == "inconclusive"
    assert (
        rpv.first_verdict_h5(rpx.delay_effect(p, _rows([None], [None]))) == "inconclusive"
    )  # none recovered
    assert (
        rpv.first_verdict_h5(rpx.delay_effect(p, _rows([120, 90], [120, 170]))) == "inconclusive"
    )  # one of two slower
    assert rpx.h5_alpha(SimpleNamespace(delay_alphas=[0.1, 0.6])) == 0.6
    assert rpx.delay_effect(p, _rows([50], [None], alpha=0.1), 0.1)["alpha"] == 0.1


def test_h5_effects_pool_the_open_alphas():
    """H5 pools every delayed alpha whose undelayed switch recovered in a share strictly between 0 and 1;
    the previous rule's alpha (the share closest to 1/2) and the first rule's (0.3) ride along."""
    p = SimpleNamespace(delays=[100, 500], delay_alphas=[0.1, 0.2, 0.3], branch_steps=600)
    sw = {
        0.1: {"recovered": 1, "events": 2},
        0.2: {"recovered": 1, "events": 2},
        0.3: {"recovered": 2, "events": 2},
    }
    rows = (
        _rows([50, None], [None, None], alpha=0.1)
        + _rows([80, None], [200, None], alpha=0.2)
        + _rows([40, 50], [60, 70], alpha=0.3)
    )
    reps = [{"seed": 0, "alpha": 0.1, "t0": 50, "trep": 70}]
    h5 = rpx.h5_effects(p, sw, rows, reps)
    assert h5["alphas"] == [0.1, 0.2] and h5["longest_delay"] == 500
    assert [(x["alpha"], x["t0"], x["tmax"]) for x in h5["pairs"]] == [
        (0.1, 50, None),
        (0.1, None, None),
        (0.2, 80, 200),
        (0.2, None, None),
    ]
    assert h5["replicates"] == reps and h5["replicate_shift"] == 10
    assert h5["alpha"] == 0.1 and h5["previous"]["alpha"] == 0.1 and h5["first"]["alpha"] == 0.3
    ev = rpv.h5_evidence(h5)
    assert ev["old"]["alpha"] == 0.1 and [e["t0"] for e in ev["old"]["events"]] == [50, None]
    sw[0.1]["recovered"] = 0
    sw[0.2]["recovered"] = 2
    h5 = rpx.h5_effects(p, sw, rows)
    assert h5["previous"] is None and h5["alphas"] == [] and h5["pairs"] == []
    assert rpv.verdict_h5(rpv.h5_evidence(h5))[0] == "inconclusive"


def test_controls_and_gaps():
    """H7's control: the same model and seed ramped only down to the switch alpha, as far as the switches
    reach; the excess is read at the branch's own step. H3's control is the depth grid's driver."""
    p = _p()
    e = {"seed": 0, "start": 720}
    a = p.h7_control_alphas[0]
    assert rpx.control_steps(p, e, a) == 720 + p.branch_steps + (max(p.delays) if a in p.delay_alphas else 0)
    study = study_spec(p)
    ds = controls.held_control_job(study, 0, a, 1000)["ds"]
    assert ds.steps == 1000 and ds.run.alpha(10**6) == a and ds.run.alpha(p.ramp_start) == 1.0
    assert ds.run.model == drivers.run_spec(study, 0).model
    held = controls.held_control_job(study, 0, p.alpha_min, drivers.driver_steps(study))
    assert held == drivers.driver_job(study, 0)  # shared
    ctl = {"hist": {"m_step": [1100, 1110], "probe_loss": [2.0, 1.9]}}
    assert rpx.control_gap({"step": 1110, "final_probe": {"loss": 2.2}}, ctl) == pytest.approx(0.3)
    assert rpx.control_gap({"step": 1120, "final_probe": {"loss": 2.2}}, ctl) is None  # past its end
    assert rpx.control_gap({"step": 1110, "final_probe": {"loss": 2.2}}, None) is None
    hist = {"m_step": list(range(0, 200, 10)), "srank": [[2.5]] * 20}
    assert not controls.control_collapsed({"hist": hist, "det": {"settled": None}}, 1.5)
    assert controls.control_collapsed({"hist": hist, "det": {"settled": 120}}, 1.5)
    low = {"m_step": hist["m_step"], "srank": [[1.2]] * 20}
    assert controls.control_collapsed({"hist": low, "det": {"settled": None}}, 1.5)


def test_detection_lag():
    p = SimpleNamespace(alpha_min=0.02, ramp_start=400, ramp_end=800, recover_window=5)
    assert rpx.ramp_rate(p) == pytest.approx(0.00245)
    assert rpx.detection_lag_alpha(p) == pytest.approx(25 * 0.00245)


def test_slow_reversed_ramp_and_the_held_bracket():
    p = _p(alpha_min=0.02, ramp_start=400, ramp_end=800, slow_ramp_factor=4, slow_ramp_steps=800)
    spec = rpx.slow_ramp_spec(p, study_spec(p), 0, 1000)
    assert spec.alpha(1000) == pytest.approx(0.02) and spec.alpha(2600) == pytest.approx(1.0)
    assert spec.alpha(1100) - spec.alpha(1000) == pytest.approx(100 * rpx.slow_ramp_rate(p))
    assert rpx.slow_ramp_rate(p) == pytest.approx(rpx.ramp_rate(p) / 4)
    # the driver-rate ramp of the same event is untouched (repair-treatments' branch, shared by content)
    fast = treatments.branch_spec(study_spec(p), 0, 1000, "reversed-ramp", {}, 0.0)
    assert fast.alpha(1400) == pytest.approx(1.0)
    sw = {
        0.1: {"recovered": 0, "events": 7},
        0.15: {"recovered": 3, "events": 7},
        0.2: {"recovered": 6, "events": 7},
        0.3: {"recovered": 7, "events": 7},
    }
    assert rpr.held_bracket(sw) == (0.15, 0.2)
    assert rpr.grid_resolution(rpr.held_bracket(sw)) == pytest.approx(0.05)
    assert rpr.held_bracket({0.1: {"recovered": 5, "events": 7}}) == (None, 0.1)
    assert rpr.held_bracket({0.1: {"recovered": 0, "events": 7}}) == (0.1, None)
    hy = [
        {"alpha_recover": 0.5, "alpha_recover_slow": 0.27},
        {"alpha_recover": 0.6, "alpha_recover_slow": None},
    ]
    text = rpr.slow_ramp_text(p, hy, sw)
    assert "1 of 2 events" in text and "0.27, not within the branch" in text and "between 0.15" in text
    assert f"{rpx.detection_lag_alpha(p) / 4:.2g}" in text and "resolution of 0.05" in text
    assert "above the bracket" in text and "lowered the median recovery alpha by 0.28" in text
    hy_not = [{"alpha_recover": 0.3, "alpha_recover_slow": 0.35}]
    assert "did not lower the median recovery alpha (0.35 against 0.3)" in rpr.slow_ramp_text(p, hy_not, sw)
    hy_in = [{"alpha_recover": 0.5, "alpha_recover_slow": 0.18}]
    assert "within the bracket" in rpr.slow_ramp_text(p, hy_in, sw)
    hy_lo = [{"alpha_recover": 0.5, "alpha_recover_slow": 0.12}]
    assert "below the bracket" in rpr.slow_ramp_text(p, hy_lo, sw)
    none = rpr.slow_ramp_text(p, [{"alpha_recover": None, "alpha_recover_slow": None}], sw)
    assert "none of the 1 events" in none
    assert "No slow reversed ramp" in rpr.slow_ramp_text(_p(slow_ramp_factor=1), hy, sw)


def test_reversed_ramp_control_matched_in_training_time():
    p = _p(alpha_min=0.02, ramp_start=400, ramp_end=800, h7_control_alphas=[0.3, 0.6], branch_steps=600)
    assert rpx.ramp_control_alpha(p) == 0.3
    study = study_spec(p)
    ctl = rpx.ramp_control_spec(p, study, 0, 900)
    rev = treatments.branch_spec(study, 0, 900, "reversed-ramp", {}, 0.0)
    # down only to 0.3, held until the switch step, then back up to 1 over the reversed ramp's steps
    assert (
        ctl.alpha(400) == 1.0
        and ctl.alpha(800) == pytest.approx(0.3)
        and ctl.alpha(900) == pytest.approx(0.3)
    )
    assert ctl.alpha(1300) == pytest.approx(1.0) and rev.alpha(1300) == pytest.approx(1.0)
    assert ctl.alpha(1000) - ctl.alpha(900) == pytest.approx(100 * rpx.ramp_rate(p) * (0.7 / 0.98))
    assert rpx.ramp_control_spec(p, study, 0, 800).alpha(1200) == pytest.approx(
        1.0
    )  # a switch right at the ramp's end

    def run(loss, step=1500, srank=2.5, settled=None):
        hist = {"m_step": list(range(900, step + 1, 10)), "srank": [[srank]] * len(range(900, step + 1, 10))}
        hist["probe_loss"] = [loss] * len(hist["m_step"])
        return {"hist": hist, "step": step, "final_probe": {"loss": loss}, "det": {"settled": settled}}

    events = [{"seed": s, "start": 900, "rec_threshold": 2.0} for s in (0, 1, 2)]
    healthy = {s: run(2.0) for s in (0, 1, 2)}
    revs = {s: run(2.3) for s in (0, 1, 2)}
    above = {"ramp": {0: run(2.2), 1: run(2.25), 2: run(2.2, srank=1.1)}}  # seed 2's control collapsed
    rows = rpx.ramp_control_rows(p, events, revs, above, healthy)
    assert [r["control_collapsed"] for r in rows] == [False, False, True] and rows[2]["excess"] is None
    assert rows[0]["excess"] == pytest.approx(0.1) and rows[0]["gap_healthy"] == pytest.approx(0.3)
    text = rpr.ramp_control_text(p, rows)
    assert "above its control" in text and "1 of 3 controls collapsed" in text and "0.075" in text
    same = {"ramp": {s: run(2.295) for s in (0, 1, 2)}}
    assert "not above its control" in rpr.ramp_control_text(
        p, rpx.ramp_control_rows(p, events, revs, same, healthy)
    )
    mid = {"ramp": {s: run(2.27) for s in (0, 1, 2)}}
    assert "between H7's thresholds" in rpr.ramp_control_text(
        p, rpx.ramp_control_rows(p, events, revs, mid, healthy)
    )
    flat = {s: run(2.3, srank=1.2) for s in (0, 1, 2)}  # no reversed ramp recovered
    assert "nothing to compare" in rpr.ramp_control_text(
        p, rpx.ramp_control_rows(p, events, flat, same, healthy)
    )
    # with every H7 control at alpha 1 the control is the healthy network
    p1 = _p(h7_control_alphas=[1.0])
    r1 = rpx.ramp_control_rows(p1, events, revs, {"ramp": {}}, healthy)
    assert r1[0]["excess"] == pytest.approx(0.3) and "healthy network" in rpr.ramp_control_text(p1, r1)


def test_predictor_split_holds_out_seeds():
    p = SimpleNamespace(delay_alphas=[0.1, 0.3], branch_steps=600)
    rows = [
        {"seed": s, "delay": d, "alpha": 0.1, "predictor": q, "recovered_after": r}
        for s, d, q, r in [(0, 0, 1e-2, 40), (0, 100, 1e-4, None), (1, 0, 2e-2, 30), (1, 100, 5e-3, None)]
    ]
    sp = rpx.predictor_split(p, rows)
    assert sp["dev_seeds"] == [0] and sp["test_seeds"] == [1]
    assert sp["dev_accuracy"] == 1.0 and sp["test_accuracy"] == 0.5  # 5e-3 lies above the fitted threshold
    assert sp["pooled"]["test_points"] == 2 and sp["spearman_recovery"] > 0.5


def test_chain_continues_saved_states(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    d = tr.driver(tr.DriverSpec(tiny_spec(), 30))
    parent = str(tmp_path / d["key"] / "driver.pt")
    a = tiny_spec(alpha_knots=((30, 0.5),))
    segs = stages.chain(parent, [(a, 20), (a, 20)])
    whole = tr.branch(parent, a, 40)
    assert segs[1]["step"] == whole["step"] == 70
    assert segs[1]["final_probe"] == whole["final_probe"]  # two segments = one run: same data, same state
    assert stages.chain(parent, [(a, 20)])[0]["key"] == segs[0]["key"]  # cached by content


def test_the_driver_records_its_weights_while_it_trains(tmp_path, monkeypatch):
    """The weight trace comes from the driver's own training (a hook), not from training it again: every
    50 steps the weights' stable ranks beside the token srank; repair-path reads every trace_every-th."""
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    spec = tiny_spec(alpha_knots=tr.driver_knots(50, 100, 0.02))
    d = tr.driver(tr.DriverSpec(spec, 150))
    h = d["hist"]
    assert h["w_step"] == [0, 50, 100, 150]
    m = tr.load_model(tmp_path / d["key"] / "driver.pt")
    assert h["wsrank"][-1] == lm.weight_sranks(m)  # the recorded values are those of the saved weights
    p = SimpleNamespace(trace_every=100, ramp_start=50)
    t = rpx.driver_traces(p, [{"seed": spec.seed}], {spec.seed: d})[spec.seed]
    assert t["step"] == [0, 100] and t["alpha"][0] == 1.0
    assert t["token_srank"] == [h["srank"][h["m_step"].index(s)][-1] for s in (0, 100)]
    with pytest.raises(ValueError, match="multiple"):
        tr.RunSpec(weights_every=15)


def test_a_control_trained_as_two_legs_is_its_driver_and_shares_its_first_leg(tmp_path, monkeypatch):
    """H7's control at the ramp control's alpha and the reversed ramp's control, each a chain of two branches
    from the shared prefix split at the switch step (repair.controls.control_chain_job): the same summaries
    as their drivers (history, detector, final probe), the shared leg trained once."""
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "states"))
    p = _p(depth=2, d_model=8, heads=2, ctx=8, batch=2, ramp_start=20, ramp_end=40, alpha_min=0.02)
    p.branch_steps, p.workers, a, start = 30, 1, rpx.ramp_control_alpha(p), 50
    assert rpx.ramp_split(p, {"start": start}) == 51 and rpx.ramp_split(p, {"start": 30}) == 41
    study = study_spec(p)
    ramp = rpx.ramp_control_spec(p, study, 0, start)
    old = [
        tr.driver(controls.held_control_job(study, 0, a, 70)["ds"]),
        tr.driver(tr.DriverSpec(ramp, start + p.branch_steps, p.threshold, p.window, p.settle_steps)),
    ]
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "chains"))
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "steps.log"))
    jobs = [
        ("chain", controls.control_chain_job(study, 0, a, start + 1, 70)),
        ("chain", controls.control_chain_job(study, 0, a, start + 1, start + p.branch_steps, ramp)),
    ]
    for (_, job), legs, o in zip(jobs, stages.run_stage(study, jobs), old):
        new = controls.control_summary(study.driver, job, legs)
        assert new["hist"] == o["hist"] and new["det"] == o["det"]
        assert new["final_probe"] == o["final_probe"] and new["step"] == o["step"]
    # the prefix (20 updates), the shared leg (31, to the switch step's), the held leg (19) and the ramp
    # back up (29), each once
    assert tr.ledger_counts(tmp_path / "steps.log") == (99, 99)
    with pytest.raises(ValueError, match="split"):
        controls.control_chain_job(study, 0, a, 10, 70)
