"""Branches of a stage trained as stacks (lm/stacked_runs.py): the same numbers whatever the grouping, the
chunking at checkpoints or an interruption; saved branches loaded, held branches' milestones saved and
continued, nothing trained twice."""

from dataclasses import replace

import pytest
import torch

from rankcollapse.lm import stacked_runs as sr
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import LMConfig

TINY = LMConfig(depth=2, d_model=8, heads=2, ctx=8)


def tiny_spec(**kw):
    base = tr.RunSpec(model=TINY, seed=3, batch=2, probe_batch=2, alpha_knots=((0, 1.0),))
    return replace(base, **kw)


@pytest.fixture
def parent(tmp_path, monkeypatch):
    """A saved state at step 30 (a driver of the tiny model), the parent of every branch below."""
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    d = tr.driver(tr.DriverSpec(tiny_spec(alpha_knots=tr.driver_knots(10, 20, 0.1)), 30))
    return str(tmp_path / d["key"] / "driver.pt")


def jobs(parent, n=30):
    return [
        {"parent": parent, "spec": tiny_spec(alpha_knots=((30, 0.5),)), "steps": n},
        {
            "parent": parent,
            "spec": tiny_spec(alpha_knots=((30, 0.1),), term=tr.Term("hinge", 0.3, 1.0)),
            "steps": n,
        },
        {"parent": parent, "spec": tiny_spec(alpha_knots=((30, 0.1), (50, 1.0))), "steps": n},
    ]


def _same(a, b):
    assert a["key"] == b["key"] and a["hist"] == b["hist"] and a["final_probe"] == b["final_probe"]
    assert a["step"] == b["step"] and a["start"] == b["start"]


def _weights(root, key):
    return tr.load_dict(root / key / "branch.pt")["model"]


def test_a_branch_in_a_stack_is_the_branch_alone(parent, tmp_path):
    together = sr.train_branches(jobs(parent), root=tmp_path / "together")
    for j, t in zip(jobs(parent), together):
        (alone,) = sr.train_branches([j], root=tmp_path / "alone")
        _same(alone, t)
        wa, wt = _weights(tmp_path / "alone", alone["key"]), _weights(tmp_path / "together", t["key"])
        assert all(torch.equal(wa[k], wt[k]) for k in wa)
    assert together[0]["step"] == 60 and len(together[1]["hist"]["rho"]) == 3  # the term's rho steps


def test_checkpoint_chunks_and_an_interruption_change_nothing(parent, tmp_path):
    whole = sr.train_branches(jobs(parent), root=tmp_path / "whole", ckpt_every=1000)
    chunked = sr.train_branches(jobs(parent), root=tmp_path / "chunked", ckpt_every=7)
    with pytest.raises(tr.Stop):
        sr.train_branches(jobs(parent), root=tmp_path / "cut", ckpt_every=10, stop_at=50)
    # the first stack stopped after its checkpoints at step 50; the others had not started
    assert (tmp_path / "cut" / whole[0]["key"] / "ckpt.pt").exists()
    resumed = sr.train_branches(jobs(parent), root=tmp_path / "cut", ckpt_every=10)
    for a, b, c in zip(whole, chunked, resumed):
        _same(a, b)
        _same(a, c)
        assert not (tmp_path / "cut" / c["key"] / "ckpt.pt").exists()


def test_saved_branches_load_and_held_milestones_are_continued(parent, tmp_path, monkeypatch):
    monkeypatch.setattr(tr, "MILESTONE_EVERY", 10)
    root = tmp_path / "a"
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "first.log"))
    first = sr.train_branches(jobs(parent, 20), root=root)
    assert tr.ledger_counts(tmp_path / "first.log") == (60, 60)
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "again.log"))
    again = sr.train_branches(jobs(parent, 20) + jobs(parent, 10)[:1], root=root)
    assert not (tmp_path / "again.log").exists()  # loaded: the 20-step ones, and the held milestone of 10
    for a, b in zip(first, again):
        _same(a, b)
    (ten,) = sr.train_branches(jobs(parent, 10)[:1], root=tmp_path / "ten")
    _same(ten, again[3])
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "longer.log"))
    (longer,) = sr.train_branches(jobs(parent, 35)[:1], root=root)  # continues the saved 20-step branch
    assert tr.ledger_counts(tmp_path / "longer.log") == (15, 15)
    (alone,) = sr.train_branches(jobs(parent, 35)[:1], root=tmp_path / "b")
    _same(longer, alone)


def test_stack_groups_and_keys(parent):
    js = jobs(parent) + [
        {"parent": parent, "spec": tiny_spec(alpha_knots=((30, 0.5),), lr=3e-3), "steps": 30}
    ]
    js.append({"parent": parent, "spec": tiny_spec(alpha_knots=((30, 0.2),)), "steps": 20})
    # a term, the lr and the length split the stack
    assert sr.stack_groups(js, [30] * len(js)) == [[0, 2], [1], [3], [4]]
    assert sr.stack_groups(js[:2], [30, 40]) == [[0], [1]]  # so does the start step
    s = tiny_spec(alpha_knots=((30, 0.5),))
    assert sr.branch_key("p", 30, s, 10) != tr.content_key("branch", "p", 30, s, 10)  # never an eager one


def test_the_runners_stage_stacks_branches_and_runs_the_rest(parent, tmp_path, monkeypatch):
    """stacked_runs.run_jobs: branch jobs grouped into stacks, other jobs as runs.run_jobs runs them, the
    results in job order, the same as each branch trained on its own."""
    from rankcollapse.lm import runs as rp

    js = jobs(parent)
    healthy = ("healthy", {"spec": tiny_spec(), "steps": 20, "share_at": 0})
    stage = [("branch", js[0]), healthy, ("branch", js[1]), ("branch", js[2])]
    out = sr.run_jobs(stage, 1)
    assert out[1] == rp.run_jobs([healthy], 1)[0]
    alone = [sr.train_branches([j], root=tmp_path / f"alone{k}")[0] for k, j in enumerate(js)]
    for o, a in zip([out[0], out[2], out[3]], alone):
        _same(o, a)
    again = sr.run_jobs(stage, 2)  # in two spawned workers: the saved states, in the same order
    for o, a in zip(again, out):
        assert o["hist"] == a["hist"] and o.get("key") == a.get("key")


def test_chains_train_as_stages_and_nothing_twice(parent, tmp_path, monkeypatch):
    """Chains through stacked_runs.run_jobs: each segment continues the saved end of the one before, the
    result is each segment trained alone from there; a shared first segment, a duplicate job and a shorter
    branch of one trajectory are trained once (the longer continues the shorter)."""
    from rankcollapse.chapters import branching

    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(tmp_path / "steps.log"))
    held = tiny_spec(alpha_knots=((30, 0.1),))
    seg2 = [tiny_spec(alpha_knots=((30 + d, a),)) for d, a in ((10, 0.5), (10, 0.9), (20, 0.5))]
    stage = [
        ("chain", {"parent": parent, "segments": [(held, 10), (seg2[0], 20)]}),
        ("chain", {"parent": parent, "segments": [(held, 10), (seg2[1], 20)]}),
        ("chain", {"parent": parent, "segments": [(held, 20), (seg2[2], 20)]}),
        ("branch", {"parent": parent, "spec": held, "steps": 10}),
    ]
    out = sr.run_jobs(stage, 1)
    assert [len(o) for o in out[:3]] == [2, 2, 2] and out[3]["key"] == out[0][0]["key"]
    u, n = tr.ledger_counts(tmp_path / "steps.log")
    assert u == n == 20 + 3 * 20  # the held segment to 20 once (10 continued to 20), then three switches
    root = tmp_path / "alone"
    (h10,) = sr.train_branches([{"parent": parent, "spec": held, "steps": 10}], root=root)
    (h20,) = sr.train_branches([{"parent": parent, "spec": held, "steps": 20}], root=root)
    _same(h20, out[2][0])
    for o, (h, s) in zip(out[:3], ((h10, seg2[0]), (h10, seg2[1]), (h20, seg2[2]))):
        (b,) = sr.train_branches(
            [{"parent": str(root / h["key"] / "branch.pt"), "spec": s, "steps": 20}], root=root
        )
        assert b["hist"] == o[1]["hist"] and b["final_probe"] == o[1]["final_probe"]
    assert sr.trajectory_rounds(
        [{"parent": parent, "spec": held, "steps": n} for n in (30, 10, 20)]
        + [{"parent": parent, "spec": seg2[0], "steps": 30}]
    ) == [2, 0, 1, 0]
    # a chapter's stage goes through the stacked engine only when it asks to
    p = type("P", (), {"workers": 1, "stack_branches": True})()
    assert branching.run_stage(p, stage[3:], None)[0]["key"] == out[3]["key"]
    p.stack_branches = False
    assert branching.run_stage(p, stage[3:], None)[0]["key"] == tr.branch(parent, held, 10)["key"]
