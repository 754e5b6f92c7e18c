"""The stacked engine: several networks of one shape as one batched computation. Each network's numbers
must not depend on which networks it is stacked with (bitwise, alone against among others, in any
position); its states are the library's (they continue in the eager loop)."""

from dataclasses import replace

import pytest
import torch

from rankcollapse.lm import model as lm
from rankcollapse.lm import stacked as st
from rankcollapse.lm import training as tr

CFG = lm.LMConfig(depth=2, d_model=16, heads=2, ctx=8)


def spec(**kw):
    base = tr.RunSpec(model=CFG, seed=0, batch=3, probe_batch=2, alpha_knots=((0, 1.0),))
    return replace(base, **kw)


def test_a_forward_does_not_depend_on_the_stack():
    torch.set_num_threads(1)
    seeds = [0, 1, 2]
    S = st.StackedLM([lm.build_model(CFG, s) for s in seeds])
    idx = torch.randint(0, 256, (3, 4, 8), generator=torch.Generator().manual_seed(0))
    a = torch.tensor([1.0, 0.5, 0.1])
    with torch.no_grad():
        logits, hs = S(idx, a, hidden=True)
        for k, s in enumerate(seeds):
            one, hs1 = st.StackedLM([lm.build_model(CFG, s)])(idx[k : k + 1], a[k : k + 1], hidden=True)
            assert torch.equal(one[0], logits[k]) and all(torch.equal(h1[0], h[k]) for h1, h in zip(hs1, hs))
            m = lm.build_model(CFG, s)
            m.alpha = float(a[k])
            assert torch.allclose(m(idx[k]), logits[k], atol=1e-5)  # the same model (other kernels)


def _branch_states(specs):
    return [tr.new_state(s) for s in specs]


def test_training_in_a_stack_equals_training_alone():
    """Three runs (held alpha, a hinge term with its rho steps, a ramp) trained as one stack and each alone:
    the same history, weights and optimiser state, bitwise."""
    torch.set_num_threads(1)
    specs = [
        spec(seed=0, alpha_knots=((0, 0.5),)),
        spec(seed=1, term=tr.Term("hinge", 0.3, 2.0)),
        spec(seed=2, alpha_knots=((0, 1.0), (10, 0.2))),
    ]
    together = st.train_stacked(specs, _branch_states(specs), 24)
    for k, s in enumerate(specs):
        (alone,) = st.train_stacked([s], _branch_states([s]), 24)
        assert alone.hist == together[k].hist and alone.step == together[k].step == 24
        a, b = alone.model.state_dict(), together[k].model.state_dict()
        assert all(torch.equal(a[n], b[n]) for n in a)
        oa, ob = alone.opt.state_dict()["state"], together[k].opt.state_dict()["state"]
        assert all(torch.equal(oa[i][f], ob[i][f]) for i in oa for f in oa[i])
    h = together[1].hist
    assert h["rho_step"] == [0, 10, 20] and all(r > 0 for r in h["rho"])  # the term's gradient was read
    assert h["w_step"] == [0] and h["m_step"] == [0, 10, 20]
    assert together[2].hist["alpha"] == pytest.approx([1.0, 0.2, 0.2])


def test_a_stacked_state_continues_in_the_eager_loop():
    torch.set_num_threads(1)
    s = spec(seed=4)
    (state,) = st.train_stacked([s], _branch_states([s]), 12)
    d = state.to_dict()
    again = tr.state_from_dict(s, d)  # the library's format: AdamW moments and step included
    assert float(again.opt.state_dict()["state"][0]["step"]) == 12.0
    tr.train(s, again, 20)
    assert again.step == 20 and len(again.hist["loss"]) == 20
    S, opt = st.from_states([again])  # and back into a stack, moments and step included
    assert torch.equal(opt.m[0][0], again.opt.state_dict()["state"][0]["exp_avg"])


def test_runs_that_cannot_stack_are_refused():
    a, b = spec(), spec(lr=2e-3)
    assert st.stackable([a, a]) is None and st.stackable([a, b]) == "lr"
    with pytest.raises(ValueError, match="lr"):
        st.train_stacked([a, b], _branch_states([a, b]), 5)
    s1, s2 = _branch_states([a, a])
    s2.step = 3
    with pytest.raises(ValueError, match="one step"):
        st.train_stacked([a, a], [s1, s2], 5)


def test_an_interrupted_stack_leaves_its_states_as_they_were(monkeypatch):
    s = spec()
    (state,) = _branch_states([s])
    calls = {"n": 0}
    real = st.clip_per_network

    def boom(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(st, "clip_per_network", boom)
    w0 = {n: t.clone() for n, t in state.model.state_dict().items()}
    with pytest.raises(KeyboardInterrupt):
        st.train_stacked([s], [state], 10)
    assert state.step == 0 and state.hist["loss"] == [] and state.hist["m_step"] == []
    assert all(torch.equal(w0[n], t) for n, t in state.model.state_dict().items())


def test_the_stack_trains_the_same_model_as_the_eager_loop():
    """Not bitwise (other kernels), but the same computation: the first losses and gradient norms agree to
    float32 round-off grown over a few steps. (At a small alpha, where the top singular value of the tokens
    is well separated: where it is nearly degenerate the penalty's gradient is not defined to round-off.)"""
    torch.set_num_threads(1)
    s = spec(seed=5, term=tr.Term("penalty", 0.2), alpha_knots=((0, 0.1),))
    (stacked,) = st.train_stacked([s], _branch_states([s]), 6)
    eager = tr.train(s, tr.new_state(s), 6)
    assert stacked.hist["loss"] == pytest.approx(eager.hist["loss"], rel=1e-4)
    assert stacked.hist["gnorm"] == pytest.approx(eager.hist["gnorm"], rel=1e-3)
    assert stacked.hist["rho"] == pytest.approx(eager.hist["rho"], rel=1e-3)


def test_the_compiled_stack_does_not_depend_on_the_stack_either():
    """The compiled engine (``spec.engine == 'compiled'``): a network trained among others equals it trained
    alone, bitwise, as in the eager stack."""
    torch.set_num_threads(1)
    specs = [
        spec(seed=0, alpha_knots=((0, 0.5),), engine="compiled"),
        spec(seed=1, term=tr.Term("hinge", 0.3, 2.0), engine="compiled"),
    ]
    together = st.train_stacked(specs, _branch_states(specs), 12)
    for k, s in enumerate(specs):
        (alone,) = st.train_stacked([s], _branch_states([s]), 12)
        assert alone.hist == together[k].hist
        a, b = alone.model.state_dict(), together[k].model.state_dict()
        assert all(torch.equal(a[n], b[n]) for n in a)
    assert st.stackable([specs[0], replace(specs[0], engine="eager")]) == "engine"
