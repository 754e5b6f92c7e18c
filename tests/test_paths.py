"""Theorem 2.1: the three ways of computing the path split agree with each other and the forward pass."""

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
