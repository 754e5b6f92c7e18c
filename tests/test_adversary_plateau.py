"""The batched adversarial search and the search run to a plateau (skip chapter, part (c))."""

import math

import pytest
import torch

from rankcollapse.core import adversary as A
from rankcollapse.core.metrics import norm_1inf
from rankcollapse.core.san import SANConfig, random_tokens


def test_batched_search_follows_each_start_as_alone():
    cfg = SANConfig(2, 1, 4, skip=True, bias=False)
    X = random_tokens(5, 4, 1)
    g = torch.Generator().manual_seed(0)
    starts = [A.random_on_constraint(cfg, 0.5, g) for _ in range(3)]
    alone = [A.adversarial_search(s, X, 0.5, 20, 0.01)[0] for s in starts]
    vals, san, noted = A.batched_adversarial_search(starts, X, 0.5, 20, 0.01, checkpoints=(5, 20))
    assert vals == pytest.approx(alone, rel=1e-9)
    assert float(A.head_betas(san).max()) <= 0.5 * (1 + 1e-12)
    assert min(vals) == pytest.approx(A.checked_ratio(san, X), rel=1e-12)
    assert len(noted) == 2 and noted[1] <= noted[0]


def test_judged_restarts_and_stop():
    cfg = SANConfig(1, 1, 4, skip=True, bias=False)
    X = random_tokens(5, 4, 1)
    g = torch.Generator().manual_seed(0)
    starts = [A.random_on_constraint(cfg, 0.5, g) for _ in range(2)] + [A.structured_search(cfg, X, 0.5)[1]]
    vals, _, noted = A.batched_adversarial_search(
        starts, X, 0.5, 40, 0.01, (0, 10, 40), lambda n: len(n) == 2, judged=2
    )
    assert len(noted) == 2  # stopped at the second checkpoint
    assert noted[0] == pytest.approx(min(A.checked_ratio(s, X) for s in starts[:2]), rel=1e-12)


def test_padding_keeps_beta_and_barely_acts():
    cfg = SANConfig(2, 2, 6, skip=True, bias=False)
    X = random_tokens(5, 6, 1)
    g = torch.Generator().manual_seed(3)
    san = A.random_on_constraint(cfg, 0.7, g)
    deep = A.pad_with_quiet_layers(san, 5, 0.7, g)
    assert deep.cfg.n_layers == 5
    assert torch.allclose(A.head_betas(deep), torch.full((5, 2), 0.7, dtype=torch.float64), rtol=1e-10)
    assert A.checked_ratio(deep, X) == pytest.approx(A.checked_ratio(san, X), rel=1e-2)


def test_plateau_levels_and_convergence():
    cfg = SANConfig(1, 1, 4, skip=True, bias=False)
    X = random_tokens(5, 4, 1)
    out = A.search_to_plateau(cfg, X, 0.3, 7, restarts=3, steps0=5, levels=4, tol=0.05, lr=0.01)
    lv = out["levels"]
    assert [x["steps"] for x in lv] == [5, 10, 20, 40][: len(lv)]
    assert all(x["effort"] == 3 * x["steps"] for x in lv)
    assert all(b["best"] <= a["best"] for a, b in zip(lv, lv[1:]))  # the same descent, noted later
    conv = len(lv) >= 3 and lv[-1]["best"] >= 0.95 * lv[-3]["best"]
    assert out["converged"] == conv and (conv or len(lv) == 4)
    # a tolerance no descent can beat converges at the first chance (level 2); none never converges
    assert A.search_to_plateau(cfg, X, 0.3, 7, 3, 5, 6, 0.9, 0.01)["converged"]
    never = A.search_to_plateau(cfg, X, 0.3, 7, 3, 5, 3, 1e-6, 0.01)
    assert len(never["levels"]) == 3  # ran to the cap or converged there
    assert math.isfinite(out["best"]) and out["extra_best"] == math.inf


@pytest.mark.parametrize("skip", [True, False])
def test_batched_ratio_is_the_forward_pass_with_or_without_skips(skip):
    cfg = SANConfig(3, 2, 6, skip=skip, bias=False)
    X = random_tokens(5, 6, 2)
    g = torch.Generator().manual_seed(4)
    sans = [A.random_on_constraint(cfg, 0.8, g) for _ in range(3)]
    theta = [torch.stack([getattr(s, n) for s in sans]) for n in ("WQ", "WK", "WV", "WO")]
    ratio, top = A._batched_ratio(theta, X, 0.8, cfg.dqk, skip)
    for i, s in enumerate(sans):
        hs, _ = s.forward(X)
        assert float(ratio[i]) == pytest.approx(float(A.residual_ratio(s, X)), rel=1e-12)
        assert float(top[i]) == pytest.approx(float(norm_1inf(hs[-1])), rel=1e-12)
    if skip:  # the default is the skip network, bit for bit
        default = A._batched_ratio(theta, X, 0.8, cfg.dqk)
        assert torch.equal(default[0], ratio) and torch.equal(default[1], top)
    else:  # and the two networks differ
        assert not torch.allclose(ratio, A._batched_ratio(theta, X, 0.8, cfg.dqk)[0])


def test_search_and_padding_keep_the_networks_skip():
    cfg = SANConfig(1, 1, 4, skip=False, bias=False)
    X = random_tokens(5, 4, 1)
    g = torch.Generator().manual_seed(0)
    deep = A.pad_with_quiet_layers(A.random_on_constraint(cfg, 0.5, g), 3, 0.5, g)
    assert deep.cfg.n_layers == 3 and not deep.cfg.skip
    starts = [A.random_on_constraint(cfg, 0.5, g) for _ in range(2)]
    vals, san, _ = A.batched_adversarial_search(starts, X, 0.5, 5, 0.01)
    assert not san.cfg.skip
    assert min(vals) == pytest.approx(A.checked_ratio(san, X), rel=1e-12)


def test_a_search_whose_restarts_all_leave_the_float_range_notes_every_checkpoint():
    # beta so large that the first forward pass overflows: nothing is trusted, every restart is dead at once,
    # and the checkpoints ahead note what running on would have noted (nothing found)
    cfg = SANConfig(4, 1, 4, skip=False, bias=False)
    X = random_tokens(5, 4, 1) * 1e3
    g = torch.Generator().manual_seed(0)
    starts = [A.random_on_constraint(cfg, 1e300, g) for _ in range(2)]
    vals, san, noted = A.batched_adversarial_search(starts, X, 1e300, 40, 0.01, (10, 20, 40))
    assert noted == [math.inf] * 3 and san is None and all(v == math.inf for v in vals)
    out = A.search_to_plateau(cfg, X, 1e300, 1, restarts=2, steps0=5, levels=4, tol=0.05, lr=0.01)
    assert len(out["levels"]) == 4 and not out["converged"] and out["best"] == math.inf
