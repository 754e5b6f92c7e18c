"""The a-priori gamma of ``core.bounds``: the identity behind it, the bound it gives, and its use."""

import math

import pytest
import torch

from rankcollapse.core import bounds as B
from rankcollapse.core.metrics import norm_1inf, res
from rankcollapse.core.san import SAN, SANConfig, random_tokens
from rankcollapse.core.trajectory import float_floor


@pytest.mark.parametrize("H", [1, 3])
def test_head_residual_is_the_attention_deviation_times_the_residual(H):
    """res(P_h X W_h) = Delta_h res(X) W_h exactly (Delta_h = P_h minus its mean row)."""
    san = SAN.random(SANConfig(2, H, 12, weight_scale=1.5), 3)
    X = random_tokens(9, 12, 4)
    P = san.attention(0, X)
    W = san.head_maps(0)
    lhs = res(P @ X @ W)
    rhs = (P - P.mean(dim=-2, keepdim=True)) @ res(X) @ W
    assert torch.allclose(lhs, rhs, rtol=0, atol=1e-12 * float(lhs.abs().max()))


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("H", [1, 4])
def test_the_a_priori_bound_holds_above_the_float_floor(scale, H):
    """Computed from the input and the attention only, the bound is never below the observed residual of
    the layer's output (where that residual is above round-off), per head and per layer; the layer bound
    is below the sum of the head bounds."""
    cfg = SANConfig(8, H, 32, weight_scale=scale)
    floor = float_floor(torch.float64, 100.0)
    checked = 0
    for seed in range(3):
        san = SAN.random(cfg, seed)
        X = random_tokens(16, 32, seed + 100)
        hs, atts = san.forward(X)
        for l, row in enumerate(B.layer_bounds(san, hs, atts)):
            if norm_1inf(res(hs[l + 1])) / norm_1inf(hs[l + 1]) <= floor or not math.isfinite(row["bound"]):
                break
            assert row["res_out"] <= row["bound"] * (1 + 1e-9)
            g = B.attention_gamma(hs[l], san.WQ[l], san.WK[l], san.head_maps(l), atts[l])
            out_h = atts[l] @ hs[l] @ san.head_maps(l)
            per_head = norm_1inf(res(out_h))
            # a head whose attention rows are all equal (saturated) has bound 0: its residual is round-off
            assert torch.all(per_head <= g["bound_h"] * (1 + 1e-9) + 1e-12 * norm_1inf(out_h))
            # the composite is not a norm: the layer bound sqrt(sum a_h * sum b_h) is at least the sum
            # of the head bounds (Cauchy-Schwarz), and it is the one that holds for the sum of the heads
            assert float(g["bound"]) >= float(g["bound_h"].sum()) * (1 - 1e-12)
            # the theorem's form: bound = 4 gamma beta H / sqrt(d_qk) ||R||^3
            f = B.one_layer_factor(row["gamma"], row["beta"], H, cfg.dqk)
            assert math.isclose(f * row["res_in"] ** 3, row["bound"], rel_tol=1e-9)
            checked += 1
    assert checked >= 3


def test_gamma_depends_on_the_input_side_only():
    """Changing the values (W_V) changes the output residual but not gamma_h: gamma is a property of the
    attention entries, the input residual and W_QK."""
    san = SAN.random(SANConfig(1, 2, 16), 5)
    X = random_tokens(8, 16, 6)
    P = san.attention(0, X)
    g1 = B.attention_gamma(X, san.WQ[0], san.WK[0], san.head_maps(0), P)
    g2 = B.attention_gamma(X, san.WQ[0], san.WK[0], 3.0 * san.head_maps(0), P)
    assert torch.equal(g1["gamma_h"], g2["gamma_h"])
    assert torch.allclose(g2["bound"], 3.0 * g1["bound"])


def test_gamma_stays_bounded_as_the_residual_shrinks():
    """In the small-logit regime the attention's deviation is linear in the logits, so gamma_h stays of
    one order while res(X) falls by orders of magnitude: the cubic rate."""
    san = SAN.random(SANConfig(1, 1, 16), 7)
    X0 = random_tokens(8, 16, 8)
    mean = X0.mean(dim=0, keepdim=True)
    gs = []
    for eps in (1e-1, 1e-2, 1e-3, 1e-4):
        X = mean + eps * res(X0)
        g = B.attention_gamma(X, san.WQ[0], san.WK[0], san.head_maps(0), san.attention(0, X))
        gs.append(float(g["gamma_h"][0]))
    assert max(gs) / min(gs) < 3.0


def test_batched_inputs_give_the_per_input_values():
    san = SAN.random(SANConfig(1, 2, 8), 9)
    X = random_tokens(6, 8, 10, batch=3)
    P = san.attention(0, X)
    g = B.attention_gamma(X, san.WQ[0], san.WK[0], san.head_maps(0), P)
    for i in range(3):
        gi = B.attention_gamma(
            X[i], san.WQ[0], san.WK[0], san.head_maps(0), P[..., i, :, :, :] if P.dim() == 5 else P[i]
        )
        assert torch.allclose(g["gamma_h"][i], gi["gamma_h"])
        assert torch.allclose(g["bound"][i], gi["bound"])


def test_layer_bounds_refuses_networks_it_does_not_bound():
    san = SAN.random(SANConfig(2, 1, 8, skip=True), 1)
    X = random_tokens(4, 8, 2)
    hs, atts = san.forward(X)
    with pytest.raises(ValueError, match="without skips"):
        B.layer_bounds(san, hs, atts)
