"""The training engine: the Gram-matrix Q of the loss terms against svdvals, shared prefixes trained once
(bit-identical to training the whole run), the step ledger, the training device, and jobs on a Dask
cluster giving the numbers of the local pool."""

from dataclasses import replace

import pytest
import torch

from rankcollapse import jobs as rjobs
from rankcollapse.core.metrics import q_spread
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import LMConfig
from rankcollapse.repair.events import switch_raws

TINY = LMConfig(depth=2, d_model=8, heads=2, ctx=8)


def tiny_spec(**kw):
    base = tr.RunSpec(model=TINY, seed=3, batch=2, probe_batch=2, alpha_knots=tr.driver_knots(20, 40, 0.02))
    return replace(base, **kw)


# -- Q from the Gram matrix -------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 4, 8, 6), (2, 5, 3), (6, 12, 48)])
def test_q_gram_matches_svdvals_in_float64(shape):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(*shape, dtype=torch.float64, generator=g, requires_grad=True)
    q, ref = tr.q_gram(X), q_spread(X)
    assert torch.allclose(q, ref, rtol=1e-10, atol=0)
    w = torch.randn(ref.shape, dtype=torch.float64, generator=g)
    (gq,) = torch.autograd.grad((q * w).sum(), X)
    (gr,) = torch.autograd.grad((ref * w).sum(), X)
    # the eigenvector is exact to POWER_TOL / spectral gap: the gradient to ~1e-8, below float32 round-off
    assert (gq - gr).abs().max() <= 3e-8 * gr.abs().max()
    assert torch.allclose(tr.q_gram(X, squared=True), ref**2, rtol=1e-10)


def test_q_gram_near_collapse_and_with_a_degenerate_top():
    g = torch.Generator().manual_seed(1)
    u, v = (
        torch.randn(4, 16, 1, dtype=torch.float64, generator=g),
        torch.randn(4, 1, 24, dtype=torch.float64),
    )
    X = u @ v + 1e-5 * torch.randn(4, 16, 24, dtype=torch.float64, generator=g)  # nearly rank one
    assert torch.allclose(tr.q_gram(X), q_spread(X), rtol=1e-6)
    # two equal top singular values: no spectral gap, the power iteration cannot converge -> eigh
    Y = torch.zeros(2, 6, 6, dtype=torch.float64)
    Y[:, 0, 0] = Y[:, 1, 1] = 3.0
    Y[:, 2, 2] = 1.0
    assert torch.allclose(tr.q_gram(Y), q_spread(Y), rtol=1e-12)


def test_q_gram_of_a_matrix_does_not_depend_on_its_batch():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(12, 16, 32, 48, generator=g)
    whole = tr.q_gram(X)
    assert torch.equal(tr.q_gram(X[3:5]), whole[3:5]) and torch.equal(tr.q_gram(X[7, 2]), whole[7, 2])


def test_term_values_against_the_svdvals_definition():
    hs = [torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    pen = torch.stack([(1 - q_spread(h) ** 2 / 7).mean() for h in hs]).mean()
    hin = torch.stack([torch.clamp(2.0 - q_spread(h), min=0).mean() for h in hs]).mean()
    assert float(tr.term_value(tr.Term("penalty", 1.0), hs)) == pytest.approx(float(pen), rel=1e-5)
    assert float(tr.term_value(tr.Term("hinge", 1.0, 2.0), hs)) == pytest.approx(float(hin), rel=1e-5)


# -- shared prefixes ----------------------------------------------------------------------------------
def _same(a: dict, b: dict) -> bool:
    return a["hist"] == b["hist"] and a["final_probe"] == b["final_probe"] and a["det"] == b["det"]


def test_a_shared_prefix_gives_the_run_trained_whole(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    ds = tr.DriverSpec(tiny_spec(), 60, settle_steps=10, window=3, threshold=5.0)  # settles: collapse.pt
    shared = tr.driver(ds)
    whole = tr.driver(ds, root=tmp_path / "whole", share_at=0)
    assert _same(shared, whole) and shared["collapse"] is not None
    a = tr.load_dict(shared["collapse"])
    b = tr.load_dict(whole["collapse"])
    assert a["step"] == b["step"] and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert all(
        torch.equal(x, y)
        for x, y in zip(
            tr.load_model(tmp_path / shared["key"] / "driver.pt").parameters(),
            tr.load_model(tmp_path / "whole" / whole["key"] / "driver.pt").parameters(),
        )
    )
    h1 = tr.healthy(tiny_spec(), 50, share_at=21)
    h2 = tr.healthy(tiny_spec(), 50, root=tmp_path / "whole", share_at=0)
    assert _same(h1, h2)


def test_nothing_is_trained_twice(tmp_path, monkeypatch):
    """Driver, healthy run and a second driver (another alpha_min) of one seed share their first updates:
    with the prefix every trained step is unique; without it, 21 updates (those of steps 0-20, all at
    alpha = 1) are trained three times."""
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    for share, ledger in ((None, "shared.log"), (0, "whole.log")):
        monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / ledger))
        root = tmp_path / ledger.split(".")[0]
        tr.driver(tr.DriverSpec(tiny_spec(), 50), root=root, share_at=share)
        tr.driver(
            tr.DriverSpec(tiny_spec(alpha_knots=tr.driver_knots(20, 40, 0.1)), 50), root=root, share_at=share
        )
        tr.healthy(tiny_spec(), 60, root=root, share_at=21 if share is None else 0)
    assert tr.ledger_counts(tmp_path / "shared.log") == (21 + 29 + 29 + 39, 118)
    assert tr.ledger_counts(tmp_path / "whole.log") == (118, 160)


def test_a_prefix_is_not_shared_where_the_runs_differ():
    assert tr.prefix_end(tiny_spec()) == 21  # updates 0-20 at alpha = 1
    assert tr.prefix_end(tiny_spec(alpha_knots=((0, 1.0),))) == 0  # nothing to branch from
    assert tr.prefix_end(tiny_spec(term=tr.Term("hinge", 1.0, 1.0))) == 0
    assert tr.prefix_end(tiny_spec(alpha_knots=((0, 0.5), (10, 1.0)))) == 0
    assert tr.plain_until(tiny_spec(), 20) and not tr.plain_until(tiny_spec(), 21)
    a, b = (
        tr.content_key("prefix", replace(tiny_spec(), alpha_knots=((0, 1.0),)), 20),
        tr.content_key("prefix", replace(tiny_spec(seed=4), alpha_knots=((0, 1.0),)), 20),
    )
    assert a != b


# -- the training device ----------------------------------------------------------------------------
def test_the_chapter_device_reaches_every_training_job(tmp_path, monkeypatch):
    """The device-selection path, on the CPU with an explicit device: the chapter's resolved device becomes
    the spec's (so a GPU state never answers for a CPU one), and the run trains there."""
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    p = dict(
        depth=2,
        d_model=8,
        heads=2,
        ctx=8,
        batch=2,
        lr=1e-3,
        ramp_start=20,
        ramp_end=40,
        alpha_min=0.02,
        tail_steps=10,
        threshold=1.5,
        window=3,
        settle_steps=10,
        branch_steps=10,
    )
    from types import SimpleNamespace

    from rankcollapse.book.repair_params import study_spec
    from rankcollapse.repair.drivers import run_spec

    def spec(**kw):
        return run_spec(study_spec(SimpleNamespace(**p, seeds=[0], **kw)), 0)

    cpu = spec(device="cpu")
    assert cpu.device == "cpu" and spec(device="cuda:0").device == "cuda"
    assert spec() == cpu  # no device given: the CPU
    assert tr.content_key("driver", cpu) != tr.content_key("driver", replace(cpu, device="cuda"))
    st = tr.new_state(cpu)
    assert all(q.device.type == "cpu" for q in st.model.parameters())
    assert st.opt.defaults.get("fused") is True  # torch's fused AdamW on the CPU
    tr.train(cpu, st, 5)
    assert st.step == 5


# -- jobs on a Dask cluster ---------------------------------------------------------------------------
def test_a_two_worker_dask_cluster_gives_the_local_numbers(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    torch.set_num_threads(1)
    specs = [tr.DriverSpec(tiny_spec(seed=s), 30) for s in (0, 1)]
    local = rjobs.run_parallel(tr.driver, [{"ds": d, "root": tmp_path / "local"} for d in specs], 1)
    dask = rjobs.run_parallel(
        tr.driver, [{"ds": d, "root": tmp_path / "dask"} for d in specs], 2, scheduler_="local"
    )
    assert [o["hist"] for o in local] == [o["hist"] for o in dask]
    assert [o["final_probe"] for o in local] == [o["final_probe"] for o in dask]


def test_one_held_trajectory_is_trained_once(tmp_path, monkeypatch):
    """A held branch saves its state every MILESTONE_EVERY steps as the shorter branch of that length, and a
    longer request continues the longest shorter one saved: both orders give the states trained alone."""
    torch.set_num_threads(1)
    monkeypatch.setattr(tr, "MILESTONE_EVERY", 20)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    d = tr.driver(tr.DriverSpec(tiny_spec(), 30))
    parent = str(tmp_path / d["key"] / "driver.pt")
    held = tiny_spec(alpha_knots=((30, 0.5),))
    assert tr.held(held) and not tr.held(
        tiny_spec(alpha_knots=((30, 0.5),), term=tr.Term("hinge", 1.0, 1.0))
    )
    alone = {n: tr.branch(parent, held, n, root=tmp_path / f"alone{n}") for n in (20, 40)}
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "long-first.log"))
    long_first = [tr.branch(parent, held, n, root=tmp_path / "a") for n in (40, 20)]
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "short-first.log"))
    short_first = [tr.branch(parent, held, n, root=tmp_path / "b") for n in (20, 40)]
    for b, n in zip(long_first + short_first, (40, 20, 20, 40)):
        assert b["hist"] == alone[n]["hist"] and b["final_probe"] == alone[n]["final_probe"]
        assert b["key"] == alone[n]["key"]
    assert tr.ledger_counts(tmp_path / "long-first.log") == (40, 40)  # the 20-step branch was a milestone
    assert tr.ledger_counts(tmp_path / "short-first.log") == (40, 40)  # the 40-step one continued it


def test_the_driver_tail_is_the_untreated_branch(tmp_path, monkeypatch):
    """A driver that settles after its ramp has ended goes on held at alpha_min: its steps from the collapse
    to its end are saved as the untreated branch of that length, which a longer untreated branch continues
    (same numbers as training it from the collapse; no step trained twice)."""
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    ds = tr.DriverSpec(tiny_spec(), 70, settle_steps=30, window=3, threshold=5.0)  # ramp 20-40, then held
    untreated = None
    for root, keep_tail in ((tmp_path / "a", True), (tmp_path / "b", False)):
        monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(root.with_suffix(".log")))
        d = tr.driver(ds, root=root)
        s = d["det"]["settled"]
        assert s is not None and s >= 40
        untreated = replace(tiny_spec(), alpha_knots=((s, 0.02),))
        tail_key = tr.content_key("branch", d["key"], s, untreated, 70 - s)
        assert (root / tail_key / "branch.pt").exists()
        if not keep_tail:
            for f in (root / tail_key).iterdir():
                f.unlink()
        b = tr.branch(d["collapse"], untreated, 100, root=root)
        if keep_tail:
            first = b
    assert first["hist"] == b["hist"] and first["final_probe"] == b["final_probe"]
    u, n = tr.ledger_counts(tmp_path / "a.log")
    assert u == n  # nothing trained twice with the tail shared
    u, n = tr.ledger_counts(tmp_path / "b.log")
    assert n - u == 70 - first["start"]  # without it, the driver's tail is trained again


def test_the_driver_tail_saves_its_milestones(tmp_path, monkeypatch):
    """While a settled driver goes on held, it saves its state every MILESTONE_EVERY steps as the untreated
    branch of that length: a shorter untreated branch is then loaded, not trained, and has the numbers of the
    same branch trained from the saved collapse; a longer one continues the longest saved."""
    torch.set_num_threads(1)
    monkeypatch.setattr(tr, "MILESTONE_EVERY", 10)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    ds = tr.DriverSpec(tiny_spec(), 70, settle_steps=30, window=3, threshold=5.0)
    root = tmp_path / "a"
    d = tr.driver(ds, root=root)
    s = d["det"]["settled"]
    assert s is not None and 70 - s > 10
    untreated = replace(tiny_spec(), alpha_knots=((s, 0.02),))
    alone = tr.branch(d["collapse"], untreated, 10, root=tmp_path / "alone")  # trained from the collapse
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "a.log"))
    b = tr.branch(d["collapse"], untreated, 10, root=root)
    assert b["hist"] == alone["hist"] and b["final_probe"] == alone["final_probe"]
    assert not (tmp_path / "a.log").exists() or tr.ledger_counts(tmp_path / "a.log") == (0, 0)
    idx = root / "trajectories" / tr.trajectory_key(d["key"], s, untreated)
    assert sorted(int(f.name) for f in idx.iterdir()) == list(range(10, 70 - s, 10)) + [70 - s]


@pytest.mark.parametrize("engine", ["eager", "compiled"])
def test_the_calibration_raws_are_the_branch_s_first_terms(tmp_path, engine):
    """``repair.events.switch_raws`` takes each raw term through the forward the branch trains with, so beta
    times the raw on the first calibration batch is the branch's first recorded term, bit for bit (at full,
    raws taken eagerly missed the compiled branch's first term by up to 1%)."""
    torch.set_num_threads(1)
    # a width at which the compiled forward rounds otherwise than the eager one (at d_model 8 they agree)
    base = tiny_spec(model=LMConfig(depth=2, d_model=48, heads=4, ctx=16), batch=4)
    base = replace(base, engine=engine, alpha_knots=((0, 0.3),))
    st = tr.new_state(base)
    parent = tmp_path / "parent" / "state.pt"
    parent.parent.mkdir()
    tr.save_state(st, parent)
    s0 = 2.0
    raws = switch_raws(parent, s0, 0.3, base.seed, 0, 3, base.batch, engine)
    for kind in ("hinge", "cosine"):
        beta = 0.1 / raws[kind][0]
        out = tr.branch(str(parent), replace(base, term=tr.Term(kind, beta, s0)), 3, root=tmp_path)
        # the step computes beta * raw on the float32 raw: the same product, bit for bit
        assert out["hist"]["term"][0] == float(beta * torch.tensor(raws[kind][0], dtype=torch.float32))
