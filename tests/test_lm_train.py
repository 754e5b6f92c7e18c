"""The small LM, its corpus, the training loop, collapse detection, loss terms and saved states."""

import math
from dataclasses import replace

import pytest
import torch

from rankcollapse import jobs as rjobs
from rankcollapse.lm import model as lm
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import Corpus, LMConfig, build_model

TINY = LMConfig(depth=2, d_model=8, heads=2, ctx=8)


def tiny_spec(**kw):
    base = tr.RunSpec(model=TINY, seed=3, batch=2, probe_batch=2, alpha_knots=tr.driver_knots(20, 40, 0.02))
    return replace(base, **kw)


# -- corpus -----------------------------------------------------------------------------------------
def test_corpus_is_sorted_stdlib_and_hashed():
    c = lm.corpus()
    assert list(c.files) == sorted(c.files) and len(c.files) > 50 and c.n_bytes > 10**6
    assert len(c.sha256) == 64 and 2.0 < c.unigram_loss() < math.log(256)


def test_unigram_loss_hand_case():
    c = Corpus(torch.tensor([0, 0, 1, 1], dtype=torch.uint8), ("x",), "", "")
    assert c.unigram_loss() == pytest.approx(math.log(2))
    c = Corpus(torch.tensor([5, 5, 5, 5], dtype=torch.uint8), ("x",), "", "")
    assert c.unigram_loss() == 0.0


def test_batches_depend_only_on_seed_and_step():
    c = lm.corpus()
    x1, y1 = c.batch(0, 17, 4, 8)
    x2, y2 = c.batch(0, 17, 4, 8)
    x3, _ = c.batch(0, 18, 4, 8)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    assert x1.shape == (4, 8) and torch.equal(x1[:, 1:], y1[:, :-1])  # targets are the next bytes
    assert not torch.equal(c.probe(0, 4, 8)[0], x1)


# -- model ------------------------------------------------------------------------------------------
def test_model_is_causal_and_seeded():
    m = build_model(TINY, 0)
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), build_model(TINY, 0).parameters()))
    x = torch.randint(0, 256, (2, 8))
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % 256
    with torch.no_grad():
        assert torch.allclose(m(x)[:, :-1], m(x2)[:, :-1], atol=1e-6)


def test_alpha_scales_the_skip():
    m = build_model(TINY, 0)
    x = torch.randn(1, 8, 8)
    b = m.blocks[0]
    with torch.no_grad():
        y0, _ = b(x, 0.0)
        y1, _ = b(x, 1.0)
        # alpha = 0: nothing of the input or of the attention output survives but through the MLP's input
        a, _ = b.attention(b.ln1(x))
        assert torch.allclose(y0, b.out(torch.nn.functional.gelu(b.fc(b.ln2(a)))), atol=1e-6)
        # alpha = 1: the usual pre-LN residual block
        h = x + a
        assert torch.allclose(y1, h + b.out(torch.nn.functional.gelu(b.fc(b.ln2(h)))), atol=1e-6)


def test_probs_path_matches_fused_attention():
    m = build_model(TINY, 1)
    x = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        l1 = m(x)
        l2, hs, ps = m(x, hidden=True, probs=True)
    assert torch.allclose(l1, l2, atol=1e-5) and len(hs) == 2 and ps[0].shape == (2, 2, 8, 8)
    assert torch.allclose(ps[0].sum(-1), torch.ones(2, 2, 8))


def test_attention_entropy_extremes():
    n = 5
    uniform = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]
    onehot = torch.eye(n)
    e = lm.attention_entropy([uniform[None, None], onehot[None, None]])
    assert e[0] == pytest.approx(1.0, abs=1e-6) and e[1] == pytest.approx(0.0, abs=1e-6)


# -- schedule and detection -------------------------------------------------------------------------
def test_alpha_schedule():
    s = tiny_spec(alpha_knots=tr.driver_knots(100, 200, 0.02))
    assert s.alpha(0) == 1.0 and s.alpha(100) == 1.0 and s.alpha(200) == pytest.approx(0.02)
    assert s.alpha(150) == pytest.approx(0.51) and s.alpha(10**6) == pytest.approx(0.02)
    r = tiny_spec(alpha_knots=((300, 0.02), (700, 1.0)))
    assert r.alpha(0) == 0.02 and r.alpha(500) == pytest.approx(0.51) and r.alpha(900) == 1.0


def test_detector_settles_by_the_median_rule():
    d = tr.Detector(threshold=1.5, window=10, settle_steps=100, arm_step=50)
    seq = [3.0] * 3 + [1.2] + [3.0] * 4 + [1.2] * 30  # a crossing at step 30 is before arming
    hits = [t for i, s in enumerate(seq) if d.feed(t := 10 * i, s)]
    assert d.first_cross == 80 and hits == [180] and d.settled == 180 and d.heals == []


def test_detector_records_self_healing():
    d = tr.Detector(threshold=1.5, window=10, settle_steps=100)
    seq = [1.4] * 3 + [2.5] * 20 + [1.0] * 20
    for i, s in enumerate(seq):
        d.feed(10 * i, s)
    assert d.heals == [(0, 100)] and d.first_cross == 230 and d.settled == 330
    assert tr.crossings([0, 10, 20, 30], [1.4, 1.0, 2.0, 1.1]) == [(0, 10, 1.0), (30, 30, 1.1)]
    assert tr.rolling_median([1, 5, 3, 4], 3) == [1, 3, 3, 4]


# -- loss terms -------------------------------------------------------------------------------------
def rank_one_tokens(n=6, d=5, delta=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, 1, generator=g, dtype=torch.float64)
    v = torch.randn(1, d, generator=g, dtype=torch.float64)
    return (a @ v + delta * torch.randn(n, d, generator=g, dtype=torch.float64))[None]


def test_terms_at_rank_one():
    X = rank_one_tokens()
    assert float(tr.term_value(tr.Term("penalty", 1.0), [X])) == pytest.approx(1.0)
    assert float(tr.term_value(tr.Term("hinge", 1.0, 0.7), [X])) == pytest.approx(0.7, abs=1e-6)
    assert float(tr.term_value(tr.Term("cosine", 1.0), [X])) == pytest.approx(1.0)
    # orthogonal centred tokens: no pairwise cosine
    Y = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [-1.0, -1.0, -1.0]])[None] * 1.0
    U = tr.mean_sq_cosine(Y)
    Yc = Y - Y.mean(1, keepdim=True)
    Yn = Yc / Yc.norm(dim=-1, keepdim=True)
    C = (Yn @ Yn.transpose(1, 2))[0] ** 2
    assert float(U) == pytest.approx(float((C.sum() - C.trace()) / 12))


def test_penalty_force_vanishes_hinge_stays():
    from rankcollapse.chapters.repair_treatments.experiments import loglog_slope, synthetic_force

    f = synthetic_force(16, 12, [1e-2, 1e-3, 1e-4], seed=0)
    assert loglog_slope(f["delta"], f["penalty"]) == pytest.approx(1.0, abs=0.02)
    assert loglog_slope(f["delta"], f["hinge"]) == pytest.approx(0.0, abs=0.02)
    assert f["Q"][-1] == pytest.approx(1e-4, rel=0.1)  # Q is delta up to the part of E along a


def test_line_starts_at_the_collapse_and_the_random_direction_has_the_lines_length():
    from rankcollapse.chapters.repair_treatments import experiments as ex

    a = ex.params_of(build_model(TINY, 0))
    b = ex.params_of(build_model(TINY, 1))
    delta = ex.difference(b, a)
    assert all(torch.equal(ex.line_point(a, delta, 0.0)[k], a[k]) for k in a)  # t = 0: the collapse
    end = ex.line_point(a, delta, 1.0)
    assert all(torch.allclose(end[k], b[k], atol=1e-6) for k in a)  # t = 1: the healthy network
    dist = ex.norm_of(delta)
    r = ex.random_direction(a, dist, seed=7)
    assert ex.norm_of(r) == pytest.approx(dist, rel=1e-6)  # the same length, over all parameters
    assert r.keys() == a.keys() and all(r[k].shape == a[k].shape and r[k].dtype == a[k].dtype for k in a)
    again = ex.random_direction(a, dist, seed=7)
    assert all(torch.equal(r[k], again[k]) for k in a)  # fixed seed, fixed direction
    other = ex.random_direction(a, dist, seed=8)
    assert not torch.equal(r["head.weight"], other["head.weight"])
    half = ex.line_point(a, r, 0.5)
    assert ex.norm_of(ex.difference(half, a)) == pytest.approx(dist / 2, rel=1e-5)


def test_rho_at_is_the_training_loops_rho():
    from rankcollapse.chapters.repair_treatments import experiments as ex

    term = tr.Term("hinge", 0.3, 2.0)
    spec = tiny_spec(alpha_knots=((0, 0.02),), term=term)
    st = tr.new_state(spec)
    m = build_model(TINY, spec.seed)
    m.load_state_dict(st.model.state_dict())
    m.alpha = 0.02
    tr.train(spec, st, 1)  # rho of step 0, recorded before its update
    batch = lm.corpus().batch(spec.seed, 0, spec.batch, TINY.ctx)
    rho, task = ex.rho_at(m, [batch], {"hinge-1x": term})
    assert rho["hinge-1x"][0] == pytest.approx(st.hist["rho"][0], rel=1e-5)
    assert task[0] == pytest.approx(st.hist["g_task"][0], rel=1e-5)


def test_line_summary_takes_median_range_and_end_over_start():
    from rankcollapse.chapters.repair_treatments import experiments as ex

    ev = [
        {
            "line": {"p": [1.0, 2.0, 4.0], "task": [1.0, 1.0, 1.0]},
            "random": {"p": [1.0, 1.0, 1.0], "task": [1.0] * 3},
        },
        {
            "line": {"p": [2.0, 2.0, 1.0], "task": [2.0, 2.0, 4.0]},
            "random": {"p": [2.0, 3.0, 2.0], "task": [1.0] * 3},
        },
    ]
    s = ex.line_summary({"t": [0, 0.5, 1], "terms": ["p"], "events": ev})
    assert s["line"]["p"]["low"] == [1.0, 2.0, 1.0] and s["line"]["p"]["high"] == [2.0, 2.0, 4.0]
    assert s["line"]["p"]["factors"] == [4.0, 0.5] and s["line"]["p"]["factor"] == pytest.approx(2.25)
    assert s["random"]["p"]["factor"] == 1.0 and s["line"]["task"]["factors"] == [1.0, 2.0]


# -- training, saved states, resume -----------------------------------------------------------------
def test_training_records_clipping_and_measurements():
    spec = tiny_spec()
    st = tr.train(spec, tr.new_state(spec), 30)
    h = st.hist
    assert h["m_step"] == [0, 10, 20, 30] and len(h["loss"]) == 30 and len(h["clipped"]) == 30
    assert all(c == (g > 1.0) for c, g in zip(h["clipped"], h["gnorm"]))
    assert h["alpha"] == [1.0, 1.0, 1.0, pytest.approx(0.51)]


def _same(a: dict, b: dict):
    assert a["step"] == b["step"] and a["hist"] == b["hist"] and a["extra"] == b["extra"]
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    sa, sb = a["opt"]["state"], b["opt"]["state"]
    for i in sa:
        for k in sa[i]:
            assert torch.equal(torch.as_tensor(sa[i][k]), torch.as_tensor(sb[i][k]))


def test_killed_driver_resumes_bit_identically(tmp_path):
    ds = tr.DriverSpec(tiny_spec(), 90, settle_steps=20, window=3)
    a = tr.driver(ds, root=tmp_path / "a", ckpt_every=20)
    with pytest.raises(tr.Stop):
        tr.driver(ds, root=tmp_path / "b", ckpt_every=20, stop_at=55)
    assert (tmp_path / "b" / a["key"] / "ckpt.pt").exists()
    b = tr.driver(ds, root=tmp_path / "b", ckpt_every=20)
    _same(
        tr.load_dict(tmp_path / "a" / a["key"] / "driver.pt"),
        tr.load_dict(tmp_path / "b" / a["key"] / "driver.pt"),
    )
    assert a["hist"] == b["hist"]
    # cached: a second call loads (stop_at would raise if it trained)
    c = tr.driver(ds, root=tmp_path / "a", stop_at=0)
    assert c["hist"] == a["hist"]


def test_killed_branch_with_term_resumes_bit_identically(tmp_path):
    ds = tr.DriverSpec(tiny_spec(), 40)
    d = tr.driver(ds, root=tmp_path / "s")
    parent = str(tmp_path / "s" / d["key"] / "driver.pt")
    spec = tiny_spec(alpha_knots=((40, 0.02),), term=tr.Term("hinge", 0.1, 2.0))
    a = tr.branch(parent, spec, 50, root=tmp_path / "a", ckpt_every=20)
    with pytest.raises(tr.Stop):
        tr.branch(parent, spec, 50, root=tmp_path / "b", ckpt_every=20, stop_at=75)
    b = tr.branch(parent, spec, 50, root=tmp_path / "b", ckpt_every=20)
    assert a["hist"] == b["hist"] and a["start"] == 40 and a["step"] == 90
    assert a["hist"]["rho_step"] == [40, 50, 60, 70, 80] and all(r > 0 for r in a["hist"]["rho"])
    _same(
        tr.load_dict(tmp_path / "a" / a["key"] / "branch.pt"),
        tr.load_dict(tmp_path / "b" / a["key"] / "branch.pt"),
    )


def test_calibrated_beta_adds_lambda(tmp_path):
    ds = tr.DriverSpec(tiny_spec(), 20)
    d = tr.driver(ds, root=tmp_path)
    path = tmp_path / d["key"] / "driver.pt"
    for kind in tr.TERMS:
        beta, raw = tr.calibrate(path, kind, 0.1, 0.02, seed=3, s0=5.0, batch=2)
        assert beta * raw == pytest.approx(0.1)


def test_parallel_equals_serial(tmp_path):
    """One stage trained with 1 and with 3 workers, each into its own store: identical numbers and the same
    state keys. The runner sets ``workers`` from its core budget, and no key or record check includes it."""
    jobs = [{"ds": tr.DriverSpec(tiny_spec(seed=s), 20), "root": tmp_path / "serial"} for s in (0, 1, 2)]
    serial = rjobs.run_parallel(tr.driver, jobs, workers=1)
    jobs3 = [dict(j, root=tmp_path / "par") for j in jobs]
    par = rjobs.run_parallel(tr.driver, jobs3, workers=3)
    assert [s["hist"] for s in serial] == [p["hist"] for p in par]
    assert [s["key"] for s in serial] == [p["key"] for p in par]


# -- corrupt saved states are refused, moved aside and trained again --------------------------------------
from test_store import CORRUPTIONS  # noqa: E402


@pytest.mark.parametrize("how", ["truncate", "zero a block", "random bytes"])
@pytest.mark.parametrize("which", ["driver.pt", "collapse.pt"])
def test_a_corrupt_driver_state_is_retrained_not_used(tmp_path, which, how, capsys):
    ds = tr.DriverSpec(tiny_spec(), 90, settle_steps=20, window=3)
    a = tr.driver(ds, root=tmp_path / "a")
    assert a["collapse"] is not None, "the tiny driver must settle for this test to mean anything"
    d = tmp_path / "a" / a["key"]
    ref = {f: tr.load_dict(d / f) for f in ("driver.pt", "collapse.pt")}
    CORRUPTIONS[how](d / which)
    b = tr.driver(ds, root=tmp_path / "a")
    err = capsys.readouterr().err
    assert f"{d / which} is corrupt" in err and "moved aside" in err
    assert b["hist"] == a["hist"]
    for f in ("driver.pt", "collapse.pt"):
        _same(tr.load_dict(d / f), ref[f])
    assert any(".corrupt-" in p.name for p in d.iterdir())


@pytest.mark.parametrize("how", ["truncate", "zero a block"])
def test_a_corrupt_checkpoint_is_not_resumed_from(tmp_path, how, capsys):
    ds = tr.DriverSpec(tiny_spec(), 90, settle_steps=20, window=3)
    a = tr.driver(ds, root=tmp_path / "a", ckpt_every=20)
    with pytest.raises(tr.Stop):
        tr.driver(ds, root=tmp_path / "b", ckpt_every=20, stop_at=55)
    ck = tmp_path / "b" / a["key"] / "ckpt.pt"
    CORRUPTIONS[how](ck)
    b = tr.driver(ds, root=tmp_path / "b", ckpt_every=20)
    assert f"{ck} is corrupt" in capsys.readouterr().err
    assert a["hist"] == b["hist"]
    _same(
        tr.load_dict(tmp_path / "a" / a["key"] / "driver.pt"),
        tr.load_dict(tmp_path / "b" / a["key"] / "driver.pt"),
    )


def test_a_corrupt_branch_is_retrained_and_a_corrupt_parent_named(tmp_path):
    d = tr.driver(tr.DriverSpec(tiny_spec(), 40), root=tmp_path)
    parent = tmp_path / d["key"] / "driver.pt"
    spec = tiny_spec(alpha_knots=((40, 0.02),))
    a = tr.branch(str(parent), spec, 20, root=tmp_path)
    CORRUPTIONS["zero a block"](tmp_path / a["key"] / "branch.pt")
    assert tr.branch(str(parent), spec, 20, root=tmp_path)["hist"] == a["hist"]
    CORRUPTIONS["truncate"](parent)
    with pytest.raises(tr.store.CorruptState, match=str(parent)):
        tr.branch(str(parent), spec, 20, root=tmp_path)


def test_a_detector_that_settles_inside_the_shared_prefix_still_saves_its_collapse(tmp_path):
    """A run armed from step 0 (the healthy network's detector) whose dip settles inside the prefix it
    shares: it is trained from scratch, and its collapse must be saved, so that loading it again trains
    nothing."""
    spec = tiny_spec(alpha_knots=((0, 1.0),))
    ds = tr.DriverSpec(spec, 60, threshold=100.0, window=3, settle_steps=10)  # every srank below: settles
    out = tr.driver(ds, root=tmp_path, share_at=30)
    assert out["det"]["settled"] is not None and out["det"]["settled"] < 30
    assert (tmp_path / out["key"] / "collapse.pt").exists()
