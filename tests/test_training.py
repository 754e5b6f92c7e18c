"""Training by the library: an interrupted run resumes to bit-identical weights; the cache is keyed by
content."""

import torch

from rankcollapse.toy import nets as tn
from rankcollapse.toy import tasks as tt
from rankcollapse.toy import training as tr

CFG = tn.ToyNetConfig(2, 2, 8, 10, skip=True, vocab=10, n_pos=8)


def _loss(p, batch):
    x, y = batch
    out = tn.forward(CFG, p, x)
    return torch.nn.functional.cross_entropy(out.reshape(-1, 10), y.reshape(-1))


def _batch(g, step):
    return tt.sort_batch(g, 4)


def test_resume_is_bit_identical(tmp_path):
    steps = 8
    ref = tr.train(tn.init_params(CFG, 3), _loss, _batch, steps, lr=1e-2, seed=5, log=lambda s: None)
    ck = tmp_path / "ckpt.pt"
    try:
        tr.train(
            tn.init_params(CFG, 3),
            _loss,
            _batch,
            steps,
            lr=1e-2,
            seed=5,
            ckpt_path=ck,
            ckpt_every=steps // 2,
            interrupt_at=steps // 2 + 1,
            log=lambda s: None,
        )  # dies one step after the checkpoint
        raise AssertionError("expected an interruption")
    except tr.TrainingInterrupted:
        pass
    assert ck.exists()
    # a fresh process: new initial weights (overwritten by the checkpoint), new optimiser, new generators
    res = tr.train(
        tn.init_params(CFG, 3),
        _loss,
        _batch,
        steps,
        lr=1e-2,
        seed=5,
        ckpt_path=ck,
        ckpt_every=steps // 2,
        log=lambda s: None,
    )
    assert res.resumed_from == steps // 2
    for k in ref.params:
        assert torch.equal(ref.params[k], res.params[k]), k
    assert ref.losses == res.losses
    # and training actually changed the weights
    assert not torch.equal(ref.params["WQ"], tn.init_params(CFG, 3)["WQ"])


def test_cached_train_interrupt_resume_and_reload(tmp_path):
    spec = {"task": "sorttest", "cfg": CFG.as_dict()}
    kw = dict(lr=1e-2, seed=1, log=lambda s: None, cache_dir=tmp_path, ckpt_every=3)
    init = lambda: tn.init_params(CFG, 0)  # noqa: E731
    ref = tr.train(init(), _loss, _batch, 6, lr=1e-2, seed=1, log=lambda s: None)
    try:
        tr.cached_train(spec, init, _loss, _batch, 6, interrupt_at=4, **kw)
    except tr.TrainingInterrupted:
        pass
    r1 = tr.cached_train(spec, init, _loss, _batch, 6, **kw)
    assert r1.resumed_from == 3 and not r1.cached
    r2 = tr.cached_train(spec, init, _loss, _batch, 6, **kw)
    assert r2.cached
    for k in ref.params:
        assert torch.equal(ref.params[k], r1.params[k]) and torch.equal(r1.params[k], r2.params[k])
    # another step count is another model
    r3 = tr.cached_train(spec, init, _loss, _batch, 7, **kw)
    assert not r3.cached and len(list(tmp_path.iterdir())) == 2


def test_content_key():
    a = tr.content_key({"task": "x", "steps": 1})
    assert a == tr.content_key({"steps": 1, "task": "x"})
    assert a != tr.content_key({"task": "x", "steps": 2})


def test_a_corrupt_cached_network_or_checkpoint_is_retrained(tmp_path, capsys):
    import pytest

    from test_store import CORRUPTIONS

    spec = {"task": "corrupttest", "cfg": CFG.as_dict()}
    kw = dict(lr=1e-2, seed=1, log=lambda s: None, cache_dir=tmp_path, ckpt_every=3)
    init = lambda: tn.init_params(CFG, 0)  # noqa: E731
    ref = tr.cached_train(spec, init, _loss, _batch, 6, **kw)
    (folder,) = tmp_path.iterdir()
    for how in ("truncate", "zero a block", "random bytes", "no sidecar"):
        CORRUPTIONS[how](folder / "final.pt")
        r = tr.cached_train(spec, init, _loss, _batch, 6, **kw)
        assert not r.cached, how  # retrained, not loaded
        assert f"{folder / 'final.pt'} is corrupt" in capsys.readouterr().err, how
        for k in ref.params:
            assert torch.equal(ref.params[k], r.params[k]), (how, k)
    # a corrupt checkpoint: the interrupted run starts again from scratch, to the same weights
    with pytest.raises(tr.TrainingInterrupted):
        tr.cached_train(spec, init, _loss, _batch, 7, interrupt_at=4, **kw)
    (ck,) = tmp_path.glob("*/ckpt.pt")
    CORRUPTIONS["zero a block"](ck)
    r = tr.cached_train(spec, init, _loss, _batch, 7, **kw)
    assert r.resumed_from == 0 and f"{ck} is corrupt" in capsys.readouterr().err
    want = tr.train(init(), _loss, _batch, 7, lr=1e-2, seed=1, log=lambda s: None)
    for k in want.params:
        assert torch.equal(want.params[k], r.params[k]), k
