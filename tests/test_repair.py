"""Part III's study layer: parameter checks, the typed spec, and the two chapters asking for the same trained
states."""

from types import SimpleNamespace

import pytest

from rankcollapse.book.params import ParameterError
from rankcollapse.book.repair_params import study_spec, validate_driver
from rankcollapse.chapters import schema
from rankcollapse.lm import training as tr
from rankcollapse.repair import drivers, events, recovery, stages, treatments


@pytest.mark.parametrize("profile", ["smoke", "full", "paper"])
def test_both_chapters_share_driver_keys(profile):
    a = SimpleNamespace(**schema("repair-driver").resolve({"profile": profile}))
    b = SimpleNamespace(**schema("repair-treatments").resolve({"profile": profile}))
    validate_driver(a)
    sa, sb = study_spec(a), study_spec(b)
    assert sa.driver == sb.driver and sa.recovery is None and sb.recovery is not None
    for s in a.seeds:
        assert tr.content_key("driver", drivers.driver_spec(sa, s)) == tr.content_key(
            "driver", drivers.driver_spec(sb, s)
        )
        assert drivers.healthy_job(sa, s) == drivers.healthy_job(sb, s)


def test_bad_driver_parameters_are_refused():
    p = SimpleNamespace(
        **schema("repair-driver").resolve({"profile": "smoke", "ramp_end": 100, "ramp_start": 100})
    )
    with pytest.raises(ParameterError, match="ramp_end"):
        validate_driver(p)
    p = SimpleNamespace(**schema("repair-driver").resolve({"profile": "smoke", "branch_steps": 105}))
    with pytest.raises(ParameterError, match="multiple of 10"):
        validate_driver(p)
    with pytest.raises(ParameterError):
        schema("repair-treatments").resolve({"profile": "smoke", "treatments": ["magic"]})


def test_driver_schedule_and_branch_specs():
    p = SimpleNamespace(**schema("repair-treatments").resolve({"profile": "full"}))
    study = study_spec(p)
    s = drivers.run_spec(study, 0)
    assert s.alpha(p.ramp_start) == 1.0 and s.alpha(p.ramp_end) == pytest.approx(p.alpha_min)
    betas = {"penalty": 0.1, "hinge": 0.2, "cosine": 0.3}
    rev = treatments.branch_spec(study, 0, 900, "reversed-ramp", betas, 1.4)
    assert rev.alpha(900) == pytest.approx(p.alpha_min) and rev.alpha(900 + p.ramp_end - p.ramp_start) == 1.0
    h4 = treatments.branch_spec(study, 0, 900, "hinge-4x", betas, 1.4)
    assert h4.term == tr.Term("hinge", pytest.approx(0.8), 1.4) and h4.alpha(5000) == pytest.approx(
        p.alpha_min
    )
    assert treatments.branch_spec(study, 0, 900, "untreated", betas, 1.4).term is None
    assert recovery.q_of(3.0) == pytest.approx(2**0.5) and recovery.q_of(0.5) == 0.0


def test_job_lock_serialises_identical_jobs(tmp_path, monkeypatch):
    import threading
    import time

    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    kw = {"spec": "x", "steps": 1}
    order = []

    def hold():
        with stages.job_lock("driver", kw):
            order.append("a-in")
            time.sleep(0.3)
            order.append("a-out")

    t = threading.Thread(target=hold)
    t.start()
    time.sleep(0.05)
    with stages.job_lock("driver", dict(kw)):
        order.append("b-in")
    t.join()
    assert order == ["a-in", "a-out", "b-in"]


# -- the calibration: beta such that the term adds its target when it is switched on ------------------
def _tiny_p(**kw):
    """Parameters of the repair chapters at a size that trains in seconds (depth 2, width 8; the threshold
    5 makes the tiny driver settle right after its ramp)."""
    return SimpleNamespace(
        **{
            "depth": 2,
            "d_model": 8,
            "heads": 2,
            "ctx": 8,
            "batch": 2,
            "lr": 1e-3,
            "ramp_start": 20,
            "ramp_end": 40,
            "alpha_min": 0.02,
            "tail_steps": 30,
            "branch_steps": 30,
            "seeds": [3],
            "threshold": 5.0,
            "settle_steps": 30,
            "window": 3,
            "workers": 1,
            "device": "cpu",
            "engine": "eager",
            "added_loss": 0.1,
            "recover_frac": 0.5,
            "recover_window": 5,
            "treatments": list(treatments.TREATMENTS),
            "calib_steps": 10,
        }
        | kw
    )


def test_betas_add_their_target_at_the_switch_on_a_tiny_lm(tmp_path, monkeypatch):
    """prepare_events sets each kind's beta on the branch's own first training batches at the saved state:
    the term adds Lambda there (4x: four times Lambda) to float precision, and the branch's first recorded
    term is beta x raw on the first of those batches (the calibration saw the batches the branch trains on;
    the probe batch, the former setting, is not one of them)."""
    import torch

    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "states"))
    p = _tiny_p()
    study = study_spec(p)
    mains, healthy = drivers.main_runs(study)
    (e,) = events.prepare_events(study, mains, healthy)
    assert e["rec_threshold_literal"] == pytest.approx(0.5 * e["healthy_srank"])
    for k in tr.TERMS:
        c = e["calib"][k]
        assert len(c["raws"]) == p.calib_steps
        assert e["betas"][k] * c["raw"] == pytest.approx(p.added_loss, rel=1e-12)
        assert c["probe_raw"] != pytest.approx(c["raw"], rel=1e-6)
    for t in ("hinge-1x", "hinge-4x", "penalty-4x"):
        kind, mult = t.split("-")
        spec = treatments.branch_spec(study, e["seed"], e["start"], t, e["betas"], e["s0"])
        assert spec.term.beta == pytest.approx(float(mult[:-1]) * e["betas"][kind], rel=1e-12)
        b = tr.branch(e["collapse"], spec, p.branch_steps)
        assert b["hist"]["term"][0] == pytest.approx(spec.term.beta * e["calib"][kind]["raws"][0], rel=1e-5)
    # asking again gives the same betas
    (again,) = events.prepare_events(study, mains, healthy)
    assert again["betas"] == e["betas"]
