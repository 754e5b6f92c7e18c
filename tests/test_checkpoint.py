"""One checkpoint format for both training loops; a file of another format is moved aside, never used."""

import pytest

from rankcollapse import checkpoint, store
from rankcollapse.lm import training as lmt
from rankcollapse.toy import nets as tn
from rankcollapse.toy import tasks as tt
from rankcollapse.toy import training as tr
from test_training import CFG, _loss  # the toy network and loss the training tests use


def _toy(ck, steps, **kw):
    return tr.train(
        tn.init_params(CFG, 3),
        _loss,
        lambda g, s: tt.sort_batch(g, 4),
        steps,
        lr=1e-2,
        seed=5,
        ckpt_path=ck,
        ckpt_every=2,
        log=lambda s: None,
        **kw,
    )


def test_both_loops_write_the_one_format(tmp_path):
    with pytest.raises(tr.TrainingInterrupted):
        _toy(tmp_path / "toy.pt", 6, interrupt_at=3)
    toy = store.load_checked(tmp_path / "toy.pt", record=False)
    spec = lmt.RunSpec(
        model=lmt.LMConfig(depth=2, d_model=8, heads=2, ctx=8),
        seed=3,
        batch=2,
        probe_batch=2,
        alpha_knots=lmt.driver_knots(20, 40, 0.02),
    )
    with pytest.raises(lmt.Stop):
        lmt.driver(lmt.DriverSpec(spec, 60), root=tmp_path / "lm", ckpt_every=20, stop_at=50)
    (lm_ck,) = (tmp_path / "lm").glob("*/ckpt.pt")
    lm = store.load_checked(lm_ck, record=False)
    for d in (toy, lm):
        assert checkpoint.problem(d) is None, checkpoint.problem(d)
        assert sorted(d) == sorted(checkpoint.FIELDS)
    assert toy["step"] == 2 and toy["data_rng"] is not None and toy["cfg"] is None
    assert lm["step"] == 40 and lm["data_rng"] is None and lm["cfg"]["depth"] == 2


@pytest.mark.parametrize(
    "foreign",
    [
        {"step": 2, "params": {}, "losses": []},  # the toy loop's old format
        dict.fromkeys(checkpoint.FIELDS, None) | {"format": checkpoint.FORMAT + 1},  # a newer format
        [1, 2, 3],  # not a dict
    ],
)
def test_a_checkpoint_of_another_format_is_moved_aside_and_the_run_starts_again(tmp_path, foreign, capsys):
    ref = _toy(None, 4)
    ck = tmp_path / "ckpt.pt"
    store.save_checked(foreign, ck, record=False)  # sound bytes, matching hash: only the content is foreign
    assert checkpoint.load(ck, then="x") is None
    assert (
        not ck.exists()
        and len([p for p in tmp_path.glob("ckpt.pt.corrupt-*") if p.suffix != ".sha256"]) == 1
    )
    assert "is corrupt" in capsys.readouterr().err
    store.save_checked(foreign, ck, record=False)
    res = _toy(ck, 4)
    assert res.resumed_from == 0 and res.losses == ref.losses


def test_save_refuses_what_is_not_a_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="not a checkpoint of format"):
        checkpoint.save({"step": 1}, tmp_path / "x.pt")
