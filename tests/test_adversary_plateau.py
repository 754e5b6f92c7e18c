"""The batched adversarial search and the search run to a plateau (skip chapter, part (c))."""

import math

import pytest
import torch

from rankcollapse.core import adversary as A
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
