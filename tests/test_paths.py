"""Theorem 2.1: the three ways of computing the path split agree with each other and the forward pass."""

import itertools
import math

import pytest
import torch

from rankcollapse.core import paths
from rankcollapse.core.metrics import res
from rankcollapse.core.san import SAN, SANConfig, random_tokens


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("L,H", [(1, 1), (2, 3), (3, 2), (4, 1)])
def test_three_methods_agree_with_forward(L, H, skip):
    san = SAN.random(SANConfig(L, H, 12, skip=skip), seed=3)
    X = random_tokens(6, 12, seed=4)
    hs, atts = san.forward(X)
    splits = [
        paths.path_sum_naive(san, X, atts),
        paths.path_sum_enumerated(san, X, atts),
        paths.length_components(san, X, atts),
    ]
    for s in splits:
        assert torch.allclose(s.total(), hs[-1], rtol=0, atol=1e-12)
    for s in splits[1:]:
        assert torch.allclose(s.components, splits[0].components, rtol=0, atol=1e-12)
    if not skip:  # only length-L paths exist
        assert splits[2].components[:L].abs().max() == 0


def test_bias_term_is_rank_one_and_has_no_residual():
    san = SAN.random(SANConfig(3, 2, 8, skip=True), seed=0)
    X = random_tokens(5, 8, seed=1)
    B = paths.length_components(san, X).bias
    assert res(B).abs().max() < 1e-12
    assert B.abs().max() > 1e-3


def test_batched_input():
    san = SAN.random(SANConfig(3, 2, 8, skip=True), seed=0)
    X = random_tokens(5, 8, seed=1, batch=4)
    hs, atts = san.forward(X)
    assert torch.allclose(paths.length_components(san, X, atts).total(), hs[-1], atol=1e-12)


def test_path_counts():
    assert paths.path_count(12, 12, 0) == 1
    assert paths.path_count(12, 12, 12) == 12**12
    assert sum(paths.path_count(5, 3, l) for l in range(6)) == 4**5
    assert paths.path_count(4, 3, 2, skip=False) == 0 and paths.path_count(4, 3, 4, skip=False) == 81
    dist = paths.path_length_distribution(12, 12)
    assert sum(dist) == pytest.approx(1.0, abs=1e-14)
    assert sum(l * p for l, p in enumerate(dist)) == pytest.approx(12 * 12 / 13, rel=1e-12)
    assert len(list(paths.iter_paths(3, 2, skip=True))) == 27
    assert math.comb(6, 2) * 4**2 == paths.path_count(6, 4, 2)


# -- the head-mixed T application against an explicit per-head reference ----------------------------------
def explicit_T(san, l, P, Y):
    """``sum_h P_h Y W_V,h W_O,h`` one matrix and one head at a time, with 2-D products only: an independent
    reference for ``SAN.mix`` (whose GEMMs take the values of all heads at once and project the
    concatenated heads). ``Y`` (..., n, d) and ``P`` (..., H, n, n) broadcast over their leading dims."""
    batch = torch.broadcast_shapes(Y.shape[:-2], P.shape[:-3])
    Yb, Pb = Y.expand(*batch, *Y.shape[-2:]), P.expand(*batch, *P.shape[-3:])
    out = torch.zeros(*batch, *Y.shape[-2:], dtype=Y.dtype)
    for idx in itertools.product(*(range(s) for s in batch)):
        for h in range(san.cfg.n_heads):
            out[idx] += Pb[idx][h] @ Yb[idx] @ san.WV[l, h] @ san.WO[l, h]
    return out


@pytest.mark.parametrize(
    "y_lead,p_batch",
    [
        ((), ()),
        ((4,), ()),
        ((2, 3), ()),
        ((2,), (2,)),
        ((3, 2), (2,)),
        ((2, 2, 3), (3,)),
        ((), (2,)),
        ((3,), (1,)),
        ((2, 1), (3,)),
    ],
    ids=[
        "one",
        "stack4",
        "stack2x3",
        "batch2",
        "stack3-batch2",
        "stack2x2-batch3",
        "Y-broadcast-over-P",
        "P-batch-of-1",
        "both-broadcast",
    ],
)
@pytest.mark.parametrize("grad", [False, True], ids=["no-autograd", "autograd"])
def test_head_mixed_T_equals_explicit_per_head_sum(y_lead, p_batch, grad):
    """``SAN.mix`` on one matrix, on a stack of them sharing ``P`` (the recursion's batch of components),
    with an input batch, and broadcasting either way, against the explicit per-head sum; both with and
    without autograd recording (the heads' values then come from differently laid out products)."""
    # d_v = 5 and d_qk = 3, not d / H, so that a wrong split of the concatenated heads cannot pass
    san = SAN.random(SANConfig(2, 3, 12, d_qk=3, d_v=5, skip=True), seed=7)
    n, l = 6, 1
    X = random_tokens(n, 12, seed=8, batch=math.prod(p_batch) if p_batch else None).reshape(*p_batch, n, 12)
    P = san.attention(l, X)  # (*p_batch, H, n, n)
    g = torch.Generator().manual_seed(9)
    Y = torch.randn(*y_lead, n, 12, generator=g, dtype=torch.float64).requires_grad_(grad)
    with torch.no_grad():
        ref = explicit_T(san, l, P, Y)
    got = san.mix(l, P, Y)
    assert got.requires_grad == grad and got.shape == ref.shape
    got = got.detach()
    assert torch.allclose(got, ref, rtol=0, atol=1e-13 * ref.abs().max())
    # the comparison can fail: an output projection paired with the wrong heads, or the concatenated heads
    # read in the wrong order (d_v-major instead of head-major), is far off the explicit reference
    H, dv, d = san.cfg.n_heads, san.cfg.dv, san.cfg.d_model
    for WO_bad in (san.WO.roll(1, dims=1), san.WO.reshape(2, dv, H, d).transpose(1, 2)):
        bad = SAN(san.cfg, san.WQ, san.WK, san.WV, WO_bad.contiguous(), san.b)
        assert (bad.mix(l, P, Y).detach() - ref).abs().max() > 1e-2 * ref.abs().max()


def test_forward_layer_equals_explicit_per_head_formula():
    """One layer is ``X + sum_h softmax(X W_Q,h W_K,h^T X^T / sqrt(d_qk)) X W_V,h W_O,h + 1 b^T``, head by
    head, for an input batch and without it."""
    san = SAN.random(SANConfig(2, 3, 12, d_qk=3, d_v=5, skip=True), seed=7)
    traced = SAN(san.cfg, *(t.clone().requires_grad_() for t in (san.WQ, san.WK, san.WV, san.WO, san.b)))
    for X in (random_tokens(6, 12, seed=8), random_tokens(6, 12, seed=8, batch=2)):
        hs, atts = san.forward(X)
        hs_g, atts_g = traced.forward(X)  # under autograd: the GEMMs on the concatenated weights
        assert torch.allclose(hs_g[-1].detach(), hs[-1], rtol=0, atol=1e-13 * hs[-1].abs().max())
        assert torch.allclose(torch.stack(atts_g).detach(), torch.stack(atts), rtol=0, atol=1e-14)
        Y = X
        for l in range(2):
            out = Y + san.b[l]
            Ps = []
            for h in range(3):
                logits = (Y @ san.WQ[l, h]) @ (Y @ san.WK[l, h]).transpose(-1, -2) / math.sqrt(3)
                Ph = torch.softmax(logits, dim=-1)
                Ps.append(Ph)
                out = out + Ph @ Y @ san.WV[l, h] @ san.WO[l, h]
            assert torch.allclose(atts[l], torch.stack(Ps, dim=-3), rtol=0, atol=1e-14)
            assert torch.allclose(hs[l + 1], out, rtol=0, atol=1e-13 * out.abs().max())
            Y = out


@pytest.mark.parametrize("skip", [False, True])
def test_recursion_with_non_stochastic_attention(skip):
    """The bias term's rank-one shortcut needs row-stochastic ``P``; other fixed matrices take the general
    recursion, and the split still adds up to the affine network they define."""
    san = SAN.random(SANConfig(3, 2, 8, skip=skip), seed=0)
    X = random_tokens(5, 8, seed=1)
    _, atts = san.forward(X)
    rows = torch.linspace(0.3, 1.2, 5, dtype=X.dtype)[:, None]
    atts = [P * rows for P in atts]  # rows sum to 0.3 .. 1.2
    Y = X
    for l in range(3):
        Y = (Y if skip else 0) + explicit_T(san, l, atts[l], Y) + san.b[l]
    split = paths.length_components(san, X, atts)
    assert torch.allclose(split.total(), Y, rtol=0, atol=1e-12)
    B = torch.zeros_like(X)
    for l in range(3):
        B = (B if skip else 0) + explicit_T(san, l, atts[l], B) + san.b[l]
    assert torch.allclose(split.bias, B, rtol=0, atol=1e-12)
    assert res(split.bias).abs().max() > 1e-6  # no longer rank one
