"""The pieces of the `layernorm` chapter's C4 attack: the trajectory with and without LN, the depth of
collapse, the block construction on the budget, the constrained search, and the LN2 rank gap."""

import math

import torch

from rankcollapse.chapters.layernorm import verdicts as ln_verdicts
from rankcollapse.core import layernorm as lnm
from rankcollapse.core import ln_attack as lna
from rankcollapse.core.adversary import head_betas
from rankcollapse.core.metrics import relative_residual
from rankcollapse.core.san import SAN, SANConfig, random_tokens


def test_collapse_depth_counts_layers_from_one_and_censors():
    assert lna.collapse_depth([0.5, 1e-3, 1e-7, 1e-9], 1e-6) == 3
    assert lna.collapse_depth([0.5, 0.4], 1e-6) == 3  # none within the horizon: L + 1
    assert lna.collapse_depth([float("nan"), 0.5], 1e-6) == 1  # a NaN never counts as uncollapsed


def test_trajectory_matches_the_forward_pass_and_sees_before_ln():
    san = SAN.random(SANConfig(3, 2, 8, layernorm="post"), 0)
    X = random_tokens(5, 8, 1)
    tr = lna.trajectory(san, X)
    hs, _ = san.forward(X)
    assert torch.allclose(tr["state"], torch.stack([relative_residual(h) for h in hs[1:]]), atol=1e-14)
    Y = san.mix(0, san.attention(0, X), X) + san.b[0]
    assert math.isclose(float(tr["partner"][0]), float(relative_residual(Y)), rel_tol=1e-12)
    pre = lna.with_layernorm(san, "pre")
    hp, _ = pre.forward(X)
    tp = lna.trajectory(pre, X)
    assert torch.allclose(tp["state"], torch.stack([relative_residual(h) for h in hp[1:]]), atol=1e-14)
    plain = lna.trajectory(lna.with_layernorm(san, "none"), X)
    assert torch.equal(plain["state"], plain["partner"])


def test_block_construction_sits_on_the_budget_and_ln_decides_the_collapse():
    cfg = SANConfig(12, 2, 16, bias=False)
    X = random_tokens(8, 16, 1)
    for c in (0.25, 2.0):
        san = lna.block_construction(cfg, 1.0 / c, c)
        assert torch.allclose(head_betas(san), torch.ones(12, 2, dtype=torch.float64))
    shrink = lna.compare_ln(lna.block_construction(cfg, 4.0, 0.25), X, 1e-6)
    assert shrink["depth_ln"] == 13 and shrink["depth_plain"] <= 6 and shrink["delta"] > 5
    assert set(shrink["depth_ln_per_eps"]) == {"1e-05", "0.001"}
    assert shrink["minvar_over_eps"] > 10  # LN never divides a vanishing spread
    grow = lna.compare_ln(lna.block_construction(cfg, 0.5, 2.0), X, 1e-6)
    assert grow["depth_plain"] == 13 and grow["delta"] < -5


def test_ln_search_stays_on_the_constraint_and_does_not_lose_ground():
    cfg = SANConfig(6, 2, 8, bias=False)
    X = random_tokens(5, 8, 2)
    gen = torch.Generator().manual_seed(0)
    info, san = lna.ln_search(cfg, X, 1.0, 5, 0.05, gen, "post")
    assert torch.allclose(head_betas(san), torch.ones(6, 2, dtype=torch.float64), rtol=1e-9)
    start = lna.with_layernorm(info["start"], "post", 1e-5)
    f0 = float(torch.log(lna.r_min(lna.trajectory(start, X)) + 1e-14).mean())
    assert info["best"] >= f0 - 1e-12


def test_rank_gap_decades():
    X = torch.tensor([[0.0, 1.0], [0.0, 2.0]], dtype=torch.float64)  # affine rank 1, clearly
    assert lnm.rank_gap_decades(X) > 100  # the dropped singular value is an exact zero
    Z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    assert lnm.rank_gap_decades(Z) == math.inf  # none dropped
    Y = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 1e-10]], dtype=torch.float64)  # nearly collinear
    assert lnm.affine_rank(Y) == 1 and 8 < lnm.rank_gap_decades(Y) < 12


def test_old_c4_rule_kept_for_the_comparison():
    calm = {"depth_ln": 4, "depth_plain": 3, "dA": 0.5, "collapsed_ln": 1.0, "collapsed_san": 1.0}
    assert ln_verdicts.old_verdict_c4([calm]) == "supported"
    assert ln_verdicts.old_verdict_c4([calm | {"depth_ln": 10}]) == "refuted"
    assert ln_verdicts.old_verdict_c4([calm | {"depth_ln": 8}]) == "inconclusive"
