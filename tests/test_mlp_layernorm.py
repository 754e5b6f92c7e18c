"""The identities the `mlp` and `layernorm` chapters rely on: SAN extensions, Lipschitz estimators, LN as
matrices."""

import math

import pytest
import torch

from rankcollapse.chapters.mlp import experiments as mlp_experiments
from rankcollapse.core import layernorm as lnm
from rankcollapse.core import paths
from rankcollapse.core.lipschitz import (
    finite_difference_sensitivity,
    jacobian_norm,
    mlp_lipschitz_local,
    mlp_lipschitz_upper,
    network_sensitivity,
)
from rankcollapse.core.san import SAN, SANConfig, random_tokens


# -- SAN extensions ----------------------------------------------------------------------------------
def test_optional_parts_do_not_change_attention_draws():
    base = SAN.random(SANConfig(3, 2, 8), seed=5)
    ext = SAN.random(SANConfig(3, 2, 8, mlp_hidden=16, layernorm="post"), seed=5)
    for k in ("WQ", "WK", "WV", "WO", "b"):
        assert torch.equal(getattr(base, k), getattr(ext, k))
    assert base.W1 is None and ext.W1.shape == (3, 8, 16)


def test_plain_forward_unchanged_by_new_code_path():
    """A plain SAN's layer is the original formula, bit for bit."""
    san = SAN.random(SANConfig(2, 2, 8, skip=True), seed=1)
    X = random_tokens(5, 8, seed=2)
    P = san.attention(0, X)
    ref = san.mix(0, P, X) + san.b[0] + X
    assert torch.equal(san.layer(0, X)[0], ref)
    # the general path (sublayers) agrees to round-off
    A, Z, _ = san.sublayers(0, X)
    assert torch.allclose(Z, ref, atol=1e-14) and torch.equal(A, Z)


def test_mlp_scale_multiplies_the_mlp_exactly():
    cfg1 = SANConfig(2, 1, 6, mlp_hidden=12, mlp_scale=1.0)
    cfg3 = SANConfig(2, 1, 6, mlp_hidden=12, mlp_scale=3.0)
    a, b = SAN.random(cfg1, 0), SAN.random(cfg3, 0)
    Y = random_tokens(4, 6, seed=1)
    assert torch.allclose(b.mlp(1, Y), 3.0 * a.mlp(1, Y), rtol=1e-14, atol=1e-14)
    assert mlp_lipschitz_upper(b, 1) == pytest.approx(3.0 * mlp_lipschitz_upper(a, 1), rel=1e-12)


def test_sublayers_compose_as_documented():
    san = SAN.random(SANConfig(1, 2, 6, mlp_hidden=8, layernorm="post", skip=True), 0)
    X = random_tokens(4, 6, seed=1)
    P = san.attention(0, X)
    Y = lnm.layer_norm(san.mix(0, P, X) + san.b[0] + X, eps=san.cfg.ln_eps)
    Z = lnm.layer_norm(san.mlp(0, Y) + Y, eps=san.cfg.ln_eps)
    A, out, _ = san.sublayers(0, X)
    assert torch.allclose(A, Y, atol=1e-14) and torch.allclose(out, Z, atol=1e-14)
    pre = SAN.random(SANConfig(1, 2, 6, layernorm="pre"), 0)
    Xn = lnm.layer_norm(X, eps=pre.cfg.ln_eps)
    assert torch.allclose(pre.layer(0, X)[0], pre.mix(0, pre.attention(0, Xn), Xn) + pre.b[0], atol=1e-14)


def test_bad_config_and_paths_refuse_extended_networks():
    with pytest.raises(ValueError):
        SANConfig(1, 1, 4, layernorm="sideways")
    with pytest.raises(ValueError):
        SANConfig(1, 1, 4, mlp_hidden=-1)
    san = SAN.random(SANConfig(2, 1, 4, mlp_hidden=4), 0)
    X = random_tokens(3, 4, seed=0)
    with pytest.raises(ValueError, match="pure SANs"):
        paths.length_components(san, X)


# -- Lipschitz estimators -------------------------------------------------------------------------------
def test_power_iteration_on_a_linear_map():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(5, 5, generator=g, dtype=torch.float64)
    B = torch.randn(4, 4, generator=g, dtype=torch.float64)
    X = torch.randn(5, 4, generator=g, dtype=torch.float64)
    exact = float(torch.linalg.matrix_norm(A, ord=2) * torch.linalg.matrix_norm(B, ord=2))  # ||A (.) B||_op
    assert jacobian_norm(lambda Z: A @ Z @ B, X, iters=500, tol=1e-14) == pytest.approx(exact, rel=1e-8)


def test_lambda_check_known_constants():
    chk = mlp_experiments.lambda_check(8, 16, seed=0, iters=20)
    assert chk["max_rel_err_power"] < 1e-6
    assert chk["diag_product"] == pytest.approx(3.0) and chk["diag_power"] == pytest.approx(3.0, rel=1e-9)
    assert chk["linear_product"] >= chk["linear_exact"] - 1e-12  # product of norms is an upper bound


def test_local_lambda_below_product_bound_and_finite_differences():
    san = SAN.random(SANConfig(1, 1, 8, mlp_hidden=32), 3)
    Y = random_tokens(6, 8, seed=4)
    loc = mlp_lipschitz_local(san, 0, Y, iters=200)
    assert loc <= mlp_lipschitz_upper(san, 0) + 1e-12
    fd = finite_difference_sensitivity(lambda Z: san.mlp(0, Z), Y, eps=1e-7, n_dirs=20, seed=0)
    assert fd <= loc * (1 + 1e-4)


def test_network_sensitivity_relative_is_scale_free_for_a_linear_network():
    san = SAN.random(SANConfig(1, 1, 6, mlp_hidden=6, mlp_act="linear", bias=False), 0)
    X = random_tokens(4, 6, seed=1)
    s = network_sensitivity(san, X, iters=100)
    assert s["abs"] > 0 and s["rel"] > 0


def test_rank_preservation_helpers():
    assert mlp_experiments.preservation([1.0, 1e-2, 1e-20]) == pytest.approx((0 - 2 - 13) / 3)
    assert mlp_experiments.depth_to_collapse([1.0, 0.5, 1e-7, 1e-9], 1e-6) == 2
    assert mlp_experiments.depth_to_collapse([1.0, 0.5], 1e-6) == 2


# -- LN as matrices ----------------------------------------------------------------------------------------
def test_layer_norm_matches_torch_and_the_matrix_form():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(7, 5, generator=g, dtype=torch.float64)
    gain = torch.randn(5, generator=g, dtype=torch.float64)
    bias = torch.randn(5, generator=g, dtype=torch.float64)
    ref = torch.nn.functional.layer_norm(X, (5,), gain, bias, eps=1e-5)
    assert torch.allclose(lnm.layer_norm(X, gain, bias, 1e-5), ref, atol=1e-13)
    f = lnm.ln_factors(X, gain, bias, 1e-5)
    assert torch.allclose(lnm.ln_from_factors(X, f), ref, atol=1e-13)
    chk = lnm.side_checks(X, gain, bias)
    assert chk["centre_is_right"] < 1e-14 and chk["scale_is_left"] < 1e-14
    assert chk["scale_as_right"] > 1e-3  # n > d: the per-token scaling is no right multiplication


def test_rewrite_correct_form_exact_paper_form_not():
    san = SAN.random(SANConfig(1, 2, 6), 0)
    X = random_tokens(5, 6, seed=1)
    P = san.attention(0, X)
    one = torch.ones(6, dtype=torch.float64)
    out = lnm.exact_rewrite(P, X, san.head_maps(0), san.b[0], one, 0 * one)
    assert out["err_correct"] < 1e-13 and out["err_paper"] > 1e-3
    # with equal per-token spreads the paper's form is exact: a single token repeated
    Xr = X[:1].repeat(5, 1)
    out = lnm.exact_rewrite(P, Xr, san.head_maps(0), san.b[0], one, 0 * one)
    assert out["err_paper"] < 1e-12


def test_affine_rank_constructions():
    # three collinear tokens off the origin (after centring): affine rank 1 -> 2
    X = torch.tensor([[0.0, 0, 1], [1, 0, 1], [2, 0, 1]], dtype=torch.float64)
    assert lnm.affine_rank(X) == 1 and lnm.affine_rank(lnm.layer_norm(X)) == 2
    # positive multiples: affine rank 1 -> 0
    X = torch.tensor([[0.0, 1.0], [0.0, 2.0]], dtype=torch.float64)
    assert lnm.affine_rank(X) == 1 and lnm.affine_rank(lnm.layer_norm(X)) == 0
    # generic n > d: loses exactly one
    X = random_tokens(9, 4, seed=0)
    assert lnm.affine_rank(X) == 4 and lnm.affine_rank(lnm.layer_norm(X)) == 3
    # generic n < d: preserved
    X = random_tokens(4, 9, seed=0)
    assert lnm.affine_rank(X) == 3 and lnm.affine_rank(lnm.layer_norm(X)) == 3
    assert lnm.matrix_rank(torch.zeros(3, 3, dtype=torch.float64)) == 0


def test_ln_restores_a_collapse_onto_ones():
    g = torch.Generator().manual_seed(0)
    X = 5.0 * torch.ones(6, 8, dtype=torch.float64) + 1e-4 * torch.randn(
        6, 8, generator=g, dtype=torch.float64
    )
    out = lnm.check_claims(X)
    assert out["before"]["r"] < 1e-3 and out["after"]["r"] > 0.5


def test_counterexample_search():
    sizes = [(2, 2), (2, 3), (3, 2), (3, 3)]
    assert (
        lnm.search_counterexample("rank_no_increase", sizes, 40, 0) is None
    )  # proved: D^-1 X C has rank <= rank X
    ce = lnm.search_counterexample("affine_rank_equal", sizes, 40, 0)
    assert ce is not None and ce["before"]["affine_rank"] != ce["after"]["affine_rank"]
    X = torch.tensor(ce["X"], dtype=torch.float64)
    assert lnm.affine_rank(X) == ce["before"]["affine_rank"]
    assert math.isfinite(ce["after"]["r"])
