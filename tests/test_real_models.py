"""The real-models chapter's pieces: parameter checks, Q2 identities and verdict rules, one model end to
end."""

from types import SimpleNamespace

import numpy as np
import pytest

from rankcollapse.book.params import ParameterError
from rankcollapse.chapters import real_models as rm
from rankcollapse.chapters.real_models import experiments as rme
from rankcollapse.chapters.real_models import figures as rmf
from rankcollapse.chapters.real_models import report as rmr
from rankcollapse.chapters.real_models import verdicts as rmv

TINY = {
    "profile": "smoke",
    "architectures": ["bert"],
    "init_layers": 2,
    "init_hidden": 16,
    "init_heads": 2,
    "n_seq": 3,
    "n_tokens": 10,
    "q2_seq": 2,
    "batch": 2,
}


def params(**kw):
    return SimpleNamespace(**rm.SCHEMA.resolve({**TINY, **kw}))


def test_validate_rejects_before_work():
    assert rm.validate(params()) == {"bert": "bert", "albert": None, "xlnet": None}
    with pytest.raises(ParameterError, match="init_heads"):
        rm.validate(params(init_heads=3))
    with pytest.raises(ParameterError, match="q2_seq"):
        rm.validate(params(q2_seq=5))
    with pytest.raises(ValueError, match="model_xlnet.*cannot be loaded offline"):
        rm.validate(params(model_xlnet="xlnet-base-cased-not-here"))
    with pytest.raises(ParameterError, match="architectures"):
        rm.SCHEMA.resolve({"architectures": ["gpt2"]})


def test_compute_model_and_q2_identities():
    p = params()
    r = rme.compute_model(("init", "bert", 0), vars(p))
    s, q = r["summary"], r["q2"]
    assert r["key"] == "bert_init" and r["shape"] == [3, 10]
    for v in ("SAN", "SAN+MLP", "SAN+skip", "transformer"):
        assert len(s[v]["mean"]) == 3 and s[v]["r0"] == s["transformer"]["r0"]
    # the a-priori gamma: the layer bound is 4 gamma beta H / sqrt(d_qk) ||res X||^3 and never below the
    # observed residual; the fitted (old) condition is the observed one, so never above the a-priori one
    np.testing.assert_allclose(q["factor"] * q["res_in"] ** 3, q["bound"], rtol=1e-9)
    np.testing.assert_allclose(q["scaled"], q["bound"] / q["res_in"], rtol=1e-9)
    np.testing.assert_allclose(q["stated"] * q["H"], q["factor"], rtol=1e-12)
    assert (q["tightness"] <= 1 + 1e-9).all() and (q["tightness"] > 0).all()
    assert (q["cond_head_fitted"] <= q["cond_head"] * (1 + 1e-9)).all()
    # no attention pattern gives more than 2 sqrt(n) ||W_h|| / ||res X||^2 (the written condition's ceiling)
    assert (rmv.attention_bound(q) >= q["cond_head"] * (1 - 1e-9)).all()
    assert q["beta"].shape == (2, 2) and q["cond_head"].shape == (2, 2, 2)
    again = rme.compute_model(("init", "bert", 0), vars(p))
    assert again["summary"]["transformer"]["mean"] == s["transformer"]["mean"]  # seeded: bit-identical


def test_validate_checks_the_checkpoints_trained_here_before_work():
    with pytest.raises(ParameterError, match="train_heads"):
        rm.validate(params(train_hidden=30, train_heads=4))
    with pytest.raises(ParameterError, match="train_seeds"):
        rm.validate(params(train_seeds=[1, 1]))
    specs = rme.train_specs(params(architectures=["bert", "xlnet"], train_seeds=[0, 3]))
    assert [(s.arch, s.seed, s.ctx) for s in specs] == [
        ("bert", 0, 10),
        ("bert", 3, 10),
        ("xlnet", 0, 10),
        ("xlnet", 3, 10),
    ]
    assert len({s.to_dict()["layers"] for s in specs}) == 1  # one recipe for every architecture


def test_a_checkpoint_trained_here_is_a_model_of_its_own(tmp_path, monkeypatch):
    """Trained through the store (a second call loads it), loaded as the chapter loads any checkpoint folder,
    keyed per seed, drawn in the middle column of Figure 2 and counted among the trained models of Q2 and of
    the per-weights verdict table; progress lines go to the given file."""
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "states"))
    p = params(train_seeds=[0], train_layers=1, train_hidden=16, train_heads=2, train_steps=3, train_batch=2)
    log = tmp_path / "progress.log"
    trained = rme.pretrain_all(p, 1, log=lambda m: None, progress=str(log))
    assert set(trained) == {("bert", 0)} and "held-out loss" in log.read_text()
    r = trained[("bert", 0)]
    assert r["unigram_loss"] > 0 and r["cpu_seconds"] >= 0
    n_lines = len(log.read_text().splitlines())
    assert rme.pretrain_all(p, 1, log=lambda m: None, progress=str(log))[("bert", 0)]["path"] == r["path"]
    assert "loaded from the store" in log.read_text().splitlines()[n_lines]
    specs = rme.models(p, "cpu", trained)
    assert [s[0] for s in specs] == ["init", "trained", "pretrained"]
    res = [rme.compute_model(s, vars(p)) for s in specs[:2]]
    assert [x["key"] for x in res] == ["bert_init", "bert_trained_s0"]
    assert res[1]["summary"]["_state"] == "trained" and res[1]["tokenizer"] == "own"
    c = res[1]["q2"]["control"]  # Q2's control: the checkpoint's value maps scaled until the bound converges
    assert c["k"] >= 0 and c["scaled"].max() < 1 and c["scaled"].shape == res[1]["q2"]["scaled"].shape
    assert "control" not in res[0]["q2"]  # none at random init
    summ, qs, _ = rme.by_model(res)
    assert set(rmv.evidence_q2(qs)["trained"]) == {"bert_trained_s0"}
    table = rmr.table_verdicts_by_state(summ)
    assert "| random init | 1 |" in table and "| trained here | 1 |" in table
    fig = rmf.fig_residuals(summ, ["bert"])
    assert len([a for a in fig.axes if a.get_visible()]) == 2  # init | trained here; no pretrained column


def test_checkpoints_that_did_not_learn_are_marked_and_counted():
    summ = {
        "bert_init": {"_state": "init", "_arch": "bert", "_seed": None},
        "bert_trained_s0": {"_state": "trained", "_arch": "bert", "_seed": 0},
        "bert_trained_s1": {"_state": "trained", "_arch": "bert", "_seed": 1},
    }
    for s in summ.values():
        for v in ("SAN", "SAN+MLP", "SAN+skip", "transformer"):
            m = [0.6, 0.1, 1e-3, 1e-8, 1e-8]
            s[v] = {"collapse_layer": 2, "L": 4, "r0": 0.6, "r_final": 1e-8, "min_r": 1e-8, "mean": m}
    trained = {
        ("bert", 0): {"heldout_loss": 2.9, "unigram_loss": 3.2},
        ("bert", 1): {"heldout_loss": 3.15, "unigram_loss": 3.2},  # 0.05 below: on the plateau
    }
    assert rmv.learned(trained[("bert", 0)]) and not rmv.learned(trained[("bert", 1)])
    assert rmv.mark_learned(summ, trained) == ["bert_trained_s1"]
    assert [k for k, s in summ.items() if not s["_learned"]] == ["bert_trained_s1"]  # read by figure, tables
    table = rmr.table_verdicts_by_state(summ)
    assert (
        "| trained here | 2 |" in table
        and "| trained here, did not learn (counted above too) | 1 |" in table
    )


def test_value_maps_scaled_and_restored():
    """Q2's control scales every layer's value map (so beta) by c and restores the weights bit for bit."""
    p = params()
    loaded = rme.load(("init", "bert", 0), p, "cpu")
    before = [t.detach().clone() for t in loaded.model.parameters()]
    b0 = rme.head_betas(rme.hm.head_weights(loaded.model, "bert")[0])
    with rme.value_maps_scaled(loaded.model, "bert", 1e-3):
        b1 = rme.head_betas(rme.hm.head_weights(loaded.model, "bert")[0])
    np.testing.assert_allclose(b1, 1e-3 * b0, rtol=1e-5)
    assert all((a == t).all() for a, t in zip(before, loaded.model.parameters()))
