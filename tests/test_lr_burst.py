"""repair-lr-burst: the summary helpers on hand-made histories, the schema, and a tiny run end to end."""

from types import SimpleNamespace

import pytest

from rankcollapse.book.params import ParameterError
from rankcollapse.chapters import repair_lr_burst as lrb
from rankcollapse.chapters import schema
from rankcollapse.chapters.repair_lr_burst import experiments, verdicts


def hist(start, sranks, losses=None):
    n = len(sranks)
    return {
        "m_step": [start + 10 * i for i in range(n)],
        "srank": [[1.0, s] for s in sranks],
        "probe_loss": losses or [0.0] * n,
    }


def test_collapse_step_uses_the_rolling_median():
    h = hist(100, [3.0, 1.2, 3.0, 1.2, 1.1, 1.0, 2.0])
    assert experiments.collapse_step(h, 1.5, 1) == 110  # a single dip counts with k = 1
    assert (
        experiments.collapse_step(h, 1.5, 3) == 130
    )  # medians 3, 2.1, 3, then 1.2 of (1.2, 3.0, 1.2) at step 130
    assert experiments.collapse_step(hist(0, [3.0, 2.0, 1.6]), 1.5, 1) is None


def test_collapse_step_k3_exact():
    # rolling medians (k=3): 3, 2.1, 1.2 (median of 3,1.2,1.0) ...
    h = hist(0, [3.0, 1.2, 1.0, 1.0])
    assert experiments.collapse_step(h, 1.5, 3) == 20


def test_recovery_after_counts_from_burst_end_and_after_collapse():
    # burst from 0 to 20; collapse at 20; recovery threshold 2.0 reached at 60 (k = 1)
    h = hist(0, [3.0, 2.5, 1.1, 1.0, 1.5, 2.2, 2.4])
    assert experiments.recovery_after(h, 20, 2.0, 1.5, 1) == 30
    # the pre-collapse measurements above the threshold do not count as recovery
    assert experiments.recovery_after(hist(0, [3.0, 2.5, 1.1, 1.0]), 20, 2.0, 1.5, 1) is None
    # no collapse: no recovery
    assert experiments.recovery_after(hist(0, [3.0, 2.5, 2.4]), 20, 2.0, 1.5, 1) is None
    # recovery counted only from the burst's end even if the collapse healed during the burst
    assert experiments.recovery_after(hist(0, [1.0, 2.5, 2.4, 2.6]), 20, 2.0, 1.5, 1) == 0


def test_rec_threshold_and_joined_history():
    c = hist(0, [3.0, 3.0, 3.5, 3.5, 3.5])
    assert experiments.rec_threshold(c, 40, 1.5, 0.5, 3) == pytest.approx(1.5 + 0.5 * (3.5 - 1.5))
    b, a = hist(0, [3.0, 2.0, 1.0]), hist(20, [1.0, 1.5, 2.5])
    j = experiments.joined(b, a)
    assert j["m_step"] == [0, 10, 20, 30, 40] and [s[-1] for s in j["srank"]] == [3.0, 2.0, 1.0, 1.5, 2.5]


def test_summarise_run_gap_and_fields():
    p = SimpleNamespace(
        burst_steps=20, threshold=1.5, recover_frac=0.5, recover_window=1, window=1, settle_steps=20
    )
    h = hist(100, [3.0, 1.4, 1.0, 1.2, 2.5, 2.6])
    c = hist(100, [3.0, 3.0, 3.5, 3.5, 3.5, 3.5])
    r = experiments.summarise_run(p, h, 100, c, final_loss=2.5, control_final_loss=2.2)
    assert r["collapsed"] and r["collapse_after"] == 10 and r["min_srank"] == 1.0
    assert r["rec_threshold"] == pytest.approx(2.5) and r["recovered_after"] == 20
    assert r["final_srank"] == 2.6 and r["loss_gap"] == pytest.approx(0.3)
    # the settling rule beside: first crossing at 110, still below 20 steps later (130): settled
    assert r["settle"] == "settled" and r["settled_after"] == 30 and r["dips"] == []
    assert r["recovered_untreated"] == 20 and not r["back_in_burst"]
    # a one-measurement dip that is back at 2.5 20 steps later: transient, not a collapse, though the
    # rolling median (k = 1) counted it as one
    t = experiments.summarise_run(
        p, hist(100, [3.0, 1.4, 2.0, 2.6, 2.6, 2.6]), 100, c, final_loss=2.3, control_final_loss=2.2
    )
    assert t["collapsed"] and t["settle"] == "transient" and t["recovered_untreated"] is None


def test_verdict_rules_take_evidence_dicts():
    # the outcomes and edge cases are in tests/test_verdicts_repair_lr_burst.py; here the registry
    assert set(verdicts.VERDICTS) == {"H6", "H7"}
    ev = {
        "qk_collapsed": [],
        "recovered": [],
        "qk_skip": 1e-10,
        "qk_healthy": 1e-2,
        "n_bursts": 4,
        "n_transient": 0,
    }
    assert verdicts.VERDICTS["H6"](ev)[0] == "inconclusive"
    h7 = {"judged": [], "n_candidates": 0, "n_settled": 0}
    assert verdicts.VERDICTS["H7"](h7)[0] == "inconclusive"


def test_schema_refuses_bad_values_before_work():
    with pytest.raises(ParameterError, match="multipliers"):
        schema("repair-lr-burst").resolve({"profile": "smoke", "multipliers": [0.5]})
    with pytest.raises(ParameterError, match="multipliers"):
        schema("repair-lr-burst").resolve({"profile": "smoke", "multipliers": [1e5]})
    p = SimpleNamespace(**schema("repair-lr-burst").resolve({"profile": "smoke", "burst_steps": 15}))
    with pytest.raises(ParameterError, match="burst_steps"):
        lrb.validate(p)
    for prof in ("smoke", "full", "paper"):
        lrb.validate(SimpleNamespace(**schema("repair-lr-burst").resolve({"profile": prof})))


def test_burst_specs_share_the_driver_spec_but_alpha_and_lr():
    from rankcollapse.book.repair_params import study_spec
    from rankcollapse.repair import drivers

    p = SimpleNamespace(**schema("repair-lr-burst").resolve({"profile": "full"}))
    study = study_spec(p)
    s = experiments.spec_at(study, 1, p.lr * 32)
    base = drivers.run_spec(study, 1)
    assert s.lr == pytest.approx(0.032) and s.alpha_knots == ((0, 1.0),)
    assert s.model == base.model and s.batch == base.batch and s.seed == 1
    # the healthy network the bursts start from is the one every repair chapter trains
    other = study_spec(SimpleNamespace(**schema("repair-path").resolve({"profile": "full"})))
    assert drivers.healthy_job(study, 1) == drivers.healthy_job(other, 1)


TINY = {
    "depth": 2,
    "d_model": 8,
    "heads": 2,
    "ctx": 8,
    "batch": 2,
    "ramp_start": 10,
    "ramp_end": 20,
    "tail_steps": 10,
    "branch_steps": 20,
    "burst_steps": 10,
    "seeds": [0],
    "settle_steps": 10,
    "window": 2,
    "workers": 1,
    "multipliers": [4.0, 100.0],
}


def test_tiny_end_to_end(tmp_path, monkeypatch):
    from rankcollapse.book.results import load
    from rankcollapse.book.runner import run_chapter

    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "states"))
    o = run_chapter("repair-lr-burst", TINY, profile="smoke", device="cpu", root=tmp_path)
    assert o.status == "ran", o.message
    doc = load(tmp_path / "smoke" / "repair-lr-burst" / "results.json")
    assert set(doc["verdicts"]) == {"H6", "H7"}
    v = doc["values"]
    assert set(v["collapsed"]["value"]) == {"4", "100"} and len(v["loss_gap"]["value"]["100"]) == 1
    assert v["qk_healthy_median"]["value"] > 0
    figs = {f.name for f in (tmp_path / "smoke" / "repair-lr-burst" / "figures").iterdir()}
    assert figs == {"fig-burst-srank.png", "fig-burst-qk.png"}


def test_climbing_selects_collapsed_unrecovered_rising_bursts():
    from types import SimpleNamespace

    p = SimpleNamespace(multipliers=[24.0, 64.0])

    def row(s, col, rec, lo, fin):
        return {
            "seed": s,
            "collapsed": col,
            "recovered_after": rec,
            "min_srank": lo,
            "final_srank": fin,
        }

    sm = {
        24.0: {
            "rows": [row(0, True, None, 1.3, 1.8), row(1, True, 40, 1.3, 2.6), row(2, False, None, 1.9, 2.8)]
        },
        64.0: {
            "rows": [
                row(0, True, None, 1.04, 1.05),
                row(1, True, None, 1.0, 1.25),
                row(2, True, None, 1.0, 1.1),
            ]
        },
    }
    assert experiments.climbing(p, sm) == [(0, 24.0), (1, 64.0)]
    assert experiments.run_extensions(SimpleNamespace(extend_steps=0), None, {}, [(0, 24.0)]) == {}


def test_joined_histories_chain():

    def h(steps):
        return {
            "m_step": steps,
            "srank": [[float(t)] for t in steps],
            "probe_loss": [0.0] * len(steps),
        }

    j = experiments.joined(h([0, 10]), h([10, 20]), h([20, 30]))
    assert j["m_step"] == [0, 10, 20, 30] and j["srank"] == [[0.0], [10.0], [20.0], [30.0]]
