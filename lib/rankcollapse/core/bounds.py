"""The quantities of Theorems 2.2/2.3 and Corollary 3.2: beta from the weights, gamma from the data.

One layer of an H-head SAN without skips satisfies (Dong et al., Thm 2.3)

    ||res(SA(X))||_{1,inf} <= (4 gamma beta H / sqrt(d_qk)) * ||res(X)||_{1,inf}^3,

with ``beta >= ||W_QK,h||_1 ||W_h||_{1,inf}`` for every head (``W_QK,h = W_Q,h W_K,h^T``,
``W_h = W_V,h W_O,h``) and ``gamma`` a term depending on the attention entries.
This module computes beta exactly from the weights and ``gamma`` as the
*smallest* value for which the one-layer inequality holds on the actual input,
so a bound can be evaluated honestly rather than with an assumed gamma.
"""

from __future__ import annotations

import math

import torch

from .metrics import norm_1, norm_1inf, res
from .san import SAN

Tensor = torch.Tensor


def beta_heads(san: SAN, l: int) -> Tensor:
    """Per-head ``||W_Q,h W_K,h^T||_1 * ||W_V,h W_O,h||_{1,inf}`` of layer ``l``: shape (H,)."""
    WQK = san.WQ[l] @ san.WK[l].transpose(-1, -2)
    return norm_1(WQK) * norm_1inf(san.head_maps(l))


def beta(san: SAN, l: int) -> float:
    """The smallest beta valid for every head of layer ``l``: the largest per-head product."""
    return float(beta_heads(san, l).max())


def gamma_min(res_in: float, res_out: float, beta_l: float, n_heads: int, d_qk: int) -> float:
    """Smallest gamma with ``res_out <= 4 gamma beta H / sqrt(d_qk) * res_in^3``."""
    return res_out * math.sqrt(d_qk) / (4.0 * beta_l * n_heads * res_in**3)


def one_layer_factor(gamma: float, beta_l: float, n_heads: int, d_qk: int, lipschitz: float = 1.0) -> float:
    """``4 gamma beta H lambda / sqrt(d_qk)``; collapse is guaranteed when it is below 1 (Thm 2.2 /
    Cor 3.2)."""
    return 4.0 * gamma * beta_l * n_heads * lipschitz / math.sqrt(d_qk)


def depth_bound(factor: float, res0: float, L: int) -> float:
    """``factor^((3^L - 1)/2) * res0^(3^L)`` (Theorem 2.2), computed in log space; returns +inf on
    overflow."""
    e = 3**L
    log_b = (e - 1) / 2 * math.log(factor) + e * math.log(res0) if res0 > 0 else -math.inf
    return math.exp(log_b) if log_b < 700 else math.inf


def layer_gammas(san: SAN, hidden: list[Tensor]) -> list[dict]:
    """For each layer of a SAN without skips: beta, the residuals in and out, and the smallest gamma.

    ``hidden`` are the states ``[X_0..X_L]`` of ``san.forward`` for one input (n, d).
    """
    rows = []
    for l in range(san.cfg.n_layers):
        b = beta(san, l)
        r_in, r_out = float(norm_1inf(res(hidden[l]))), float(norm_1inf(res(hidden[l + 1])))
        g = gamma_min(r_in, r_out, b, san.cfg.n_heads, san.cfg.dqk) if r_in > 0 else math.nan
        rows.append(
            {
                "layer": l + 1,
                "beta": b,
                "res_in": r_in,
                "res_out": r_out,
                "gamma_min": g,
                "factor": one_layer_factor(g, b, san.cfg.n_heads, san.cfg.dqk) if g == g else math.nan,
            }
        )
    return rows
