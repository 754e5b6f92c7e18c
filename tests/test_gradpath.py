import pytest
import torch
import torch.nn.functional as F

from rankcollapse.lm import gradpath as gp
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import LMConfig, build_model


def _tiny():
    torch.set_num_threads(1)
    m = build_model(LMConfig(depth=2, d_model=8, heads=2, ctx=6), seed=3)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (3, 6), generator=g)
    y = torch.randint(0, 256, (3, 6), generator=g)
    return m, x, y


def test_block_grad_norms_match_backward():
    m, x, y = _tiny()
    out = gp.block_grad_norms(m, x, y, alpha=0.5)
    m.alpha = 0.5
    F.cross_entropy(m(x).flatten(0, 1), y.flatten()).backward()
    for i, b in enumerate(m.blocks):
        g = b.qkv.weight.grad.double()
        assert out["task_attn"][i] == pytest.approx(float(g.norm()), rel=1e-6)
        assert out["task_qk"][i] == pytest.approx(float(g[:16].norm()), rel=1e-6)
        v = float(g[16:].norm())
        assert out["task_attn"][i] ** 2 == pytest.approx(out["task_qk"][i] ** 2 + v**2, rel=1e-9)


def test_alpha_restored_and_term():
    m, x, y = _tiny()
    m.alpha = 0.7
    out = gp.block_grad_norms(m, x, y, term=tr.Term("hinge", 1.0, 100.0), alpha=0.2)
    assert m.alpha == 0.7
    assert len(out["term_qk"]) == 2 and all(v > 0 for v in out["term_qk"])
    # a hinge with s0 = 0 is identically zero: no gradient
    out0 = gp.block_grad_norms(m, x, y, term=tr.Term("hinge", 1.0, 0.0))
    assert out0["term_attn"] == [0.0, 0.0] and out0["term_attn_zero"] == [True, True]


def test_numerically_zero_rule():
    eps = torch.finfo(torch.float32).eps
    assert gp.numerically_zero([0.5 * eps, 2 * eps], [1.0, 1.0]) == [True, False]


def test_matrix_srank_hand_cases():
    assert gp.matrix_srank(torch.eye(4)) == pytest.approx(4.0)
    assert gp.matrix_srank(torch.diag(torch.tensor([2.0, 1.0]))) == pytest.approx(1.25)
    assert gp.matrix_srank(torch.ones(3, 5)) == pytest.approx(1.0)
    m, _, _ = _tiny()
    ws = gp.weight_sranks(m)
    assert set(ws) == {"query", "key", "value", "mlp_in", "mlp_out"} and all(
        len(v) == 2 for v in ws.values()
    )
