"""The exact path split through post-LayerNorm layers (core/ln_paths.py): against brute-force enumeration
of every path and against the forward pass, to float precision."""

import pytest
import torch

from rankcollapse.core import ln_paths
from rankcollapse.core.san import SAN, SANConfig


def _san(L, H, d, skip=True, seed=0):
    san = SAN.random(SANConfig(L, H, d, skip=skip, layernorm="post"), seed)
    g = torch.Generator().manual_seed(seed + 1)
    san.ln1_g = 1 + 0.3 * torch.randn(L, d, generator=g, dtype=torch.float64)  # a learned-looking affine
    san.ln1_b = 0.2 * torch.randn(L, d, generator=g, dtype=torch.float64)
    return san


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("batch", [None, 3])
def test_recursion_equals_enumeration_and_forward(skip, batch):
    san = _san(3, 2, 6, skip=skip)
    shape = (5, 6) if batch is None else (batch, 5, 6)
    X = torch.randn(*shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    hs, atts, sig = ln_paths.forward_scales(san, X)
    rec = ln_paths.length_components_ln(san, X, atts, sig)
    naive = ln_paths.path_sum_naive_ln(san, X, atts, sig)
    assert torch.allclose(rec.components, naive.components, atol=1e-12)
    assert torch.allclose(rec.bias, naive.bias, atol=1e-12)
    assert torch.allclose(rec.total(), hs[-1], atol=1e-12)
    if not skip:  # only the full-length component exists
        assert rec.components[:-1].abs().max() == 0


def test_float32_forward_is_matched_to_round_off():
    san = _san(6, 3, 12).to(dtype=torch.float32)
    X = torch.randn(4, 8, 12, generator=torch.Generator().manual_seed(3))
    hs, _ = san.forward(X)
    rec = ln_paths.length_components_ln(san, X)
    assert float((rec.total() - hs[-1]).abs().max()) < 1e-5 * float(hs[-1].abs().max())


def test_affine_part_is_not_rank_one_and_components_are_not_trivial():
    """The token-side scales make the affine part a matrix (the pure-SAN split's 1c^T no longer holds),
    and every length carries a nonzero share: a recursion that dropped a term would fail the sum test,
    one that put everything into one length would fail here."""
    san = _san(3, 2, 6)
    X = torch.randn(5, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    rec = ln_paths.length_components_ln(san, X)
    B = rec.bias
    assert float((B - B.mean(0)).norm()) > 1e-3 * float(B.norm())
    assert all(float(c.norm()) > 1e-6 for c in rec.components)


def test_scales_are_what_the_layernorm_divides_by():
    san = _san(2, 2, 6)
    X = torch.randn(5, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    hs, atts, sig = ln_paths.forward_scales(san, X)
    Y = san.mix(0, atts[0], X) + san.b[0] + X
    want = (Y - Y.mean(-1, keepdim=True)) / sig[0] * san.ln1_g[0] + san.ln1_b[0]
    assert torch.allclose(want, hs[1], atol=1e-13)


def test_rejects_networks_it_does_not_split():
    for cfg in (
        SANConfig(2, 2, 4),
        SANConfig(2, 2, 4, layernorm="pre"),
        SANConfig(2, 2, 4, layernorm="post", mlp_hidden=4),
    ):
        with pytest.raises(ValueError, match="layernorm='post'"):
            ln_paths.length_components_ln(SAN.random(cfg, 0), torch.zeros(3, 4, dtype=torch.float64))
