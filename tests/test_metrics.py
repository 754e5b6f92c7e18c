"""Metric functions against cases computed by hand."""

import math

import pytest
import torch

from rankcollapse.core import metrics as M


def test_norms_by_hand():
    X = torch.tensor([[1.0, -2.0], [3.0, 4.0]], dtype=torch.float64)
    # column abs sums 4, 6 -> ||X||_1 = 6 ; row abs sums 3, 7 -> ||X||_inf = 7
    assert M.norm_1(X).item() == 6.0
    assert M.norm_inf(X).item() == 7.0
    assert M.norm_1inf(X).item() == pytest.approx(math.sqrt(42.0), rel=1e-15)


def test_composite_is_not_a_norm():
    # the paper's remark, on a pair done by hand: it fails the triangle inequality
    U = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)  # ||U||_1 = 1, ||U||_inf = 2 -> sqrt 2
    V = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)  # ||V||_1 = 2, ||V||_inf = 1 -> sqrt 2
    assert M.norm_1inf(U).item() == pytest.approx(math.sqrt(2))
    assert M.norm_1inf(V).item() == pytest.approx(math.sqrt(2))
    # U + V = [[2, 1], [1, 0]]: column sums 3, 1; row sums 3, 1 -> 3 > 2 sqrt 2
    assert M.norm_1inf(U + V).item() == pytest.approx(3.0)
    assert M.norm_1inf(U + V).item() > M.norm_1inf(U).item() + M.norm_1inf(V).item()


def test_residual_uses_token_mean():
    X = torch.tensor([[1.0, 2.0], [3.0, 6.0]], dtype=torch.float64)
    R = M.res(X)
    assert torch.equal(R, torch.tensor([[-1.0, -2.0], [1.0, 2.0]], dtype=torch.float64))
    # r(X) = ||res||_{1,inf}/||X||_{1,inf} = sqrt(2*4... ) by hand:
    # res: col sums 2, 4 -> 4; row sums 3, 3 -> 3 -> sqrt(12); X: col 4, 8 -> 8; rows 3, 9 -> 9 -> sqrt(72)
    assert M.relative_residual(X).item() == pytest.approx(math.sqrt(12 / 72), rel=1e-14)


def test_rank_one_token_set_has_zero_residual():
    x = torch.randn(5, dtype=torch.float64)
    X = torch.ones(7, 1, dtype=torch.float64) * x
    assert M.relative_residual(X).item() == pytest.approx(0.0, abs=1e-15)


def test_stable_rank_and_q():
    # centred tokens with singular values 3 and 1 -> srank = (9 + 1)/9, Q = 1/3
    Y = torch.tensor([[3.0, 0.0], [0.0, 1.0], [-3.0, 0.0], [0.0, -1.0]], dtype=torch.float64) / math.sqrt(2)
    assert M.stable_rank(Y).item() == pytest.approx(10 / 9, rel=1e-12)
    assert M.q_spread(Y).item() == pytest.approx(1 / 3, rel=1e-12)
    assert M.q_spread(Y).item() ** 2 == pytest.approx(M.stable_rank(Y).item() - 1, rel=1e-12)


def test_beta_and_gamma_by_hand():
    from rankcollapse.core import bounds
    from rankcollapse.core.san import SAN, SANConfig

    cfg = SANConfig(1, 1, 2, d_qk=2, d_v=2, skip=False, bias=False)
    I = torch.eye(2, dtype=torch.float64)
    WQ = torch.tensor([[[[1.0, 2.0], [0.0, 1.0]]]], dtype=torch.float64)  # W_QK = WQ @ I
    WV = torch.tensor([[[[1.0, -1.0], [2.0, 0.0]]]], dtype=torch.float64)  # W_h = WV @ I
    san = SAN(
        cfg, WQ, I.expand(1, 1, 2, 2), WV, I.expand(1, 1, 2, 2), torch.zeros(1, 2, dtype=torch.float64)
    )
    # ||W_QK||_1 = max col abs sum of [[1,2],[0,1]] = 3 ; ||W_h||_1 = 3, ||W_h||_inf = 2 -> sqrt 6
    assert bounds.beta(san, 0) == pytest.approx(3 * math.sqrt(6), rel=1e-14)
    g = bounds.gamma_min(res_in=0.5, res_out=0.01, beta_l=2.0, n_heads=1, d_qk=4)
    # 0.01 = 4 g 2 / 2 * 0.125 -> g = 0.02
    assert g == pytest.approx(0.02, rel=1e-14)
    assert bounds.one_layer_factor(g, 2.0, 1, 4) * 0.5**3 == pytest.approx(0.01, rel=1e-14)
    assert bounds.depth_bound(0.5, 1.0, 2) == pytest.approx(0.5**4, rel=1e-14)
