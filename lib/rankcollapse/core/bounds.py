"""The quantities of Theorems 2.2/2.3 and Corollary 3.2: beta from the weights, gamma from the attention.

One layer of an H-head SAN without skips satisfies (Dong et al., Thm 2.3)

    ||res(SA(X))||_{1,inf} <= (4 gamma beta H / sqrt(d_qk)) * ||res(X)||_{1,inf}^3,

with ``beta >= ||W_QK,h||_1 ||W_h||_{1,inf}`` for every head (``W_QK,h = W_Q,h W_K,h^T``,
``W_h = W_V,h W_O,h``) and ``gamma`` "a term that depends on the attention entries". The paper's own
expression for gamma is not among this book's sources, so gamma is defined here, a priori, from the
attention entries of the actual forward pass and the layer's *input* (never its output):

* with ``R = res(X)`` and ``P_h`` the head's attention, ``res(P_h X W_h) = Delta_h R W_h`` exactly, where
  ``Delta_h = P_h - 1 p_h^T`` is the attention minus its mean row ``p_h`` (because
  ``(I - 11^T/n) P_h = Delta_h`` and ``(I - 11^T/n) 1 = 0``);
* so ``||res(P_h X W_h)||_{1,inf} <= ||Delta_h||_{1,inf} ||R||_{1,inf} ||W_h||_{1,inf}`` (the 1- and
  inf-norms are submultiplicative, hence their geometric mean is too), which is the theorem's form with

      gamma_h = sqrt(d_qk) ||Delta_h||_{1,inf} / (4 ||W_QK,h||_1 ||R||_{1,inf}^2):

  the attention's deviation from rank one, in units of the logit scale ``||W_QK||_1 ||R||^2 / sqrt(d_qk)``
  that the proof bounds it by. The theorem's content is that this stays bounded as ``R -> 0`` (the
  attention's deviation is linear in the logits ``R W_QK R^T / sqrt(d_qk)``), which is what makes the rate
  cubic; the bound itself always holds (tested), and how loose it is is a measurement.
* for H heads, ``||res(SA(X))||_1 <= sum_h ||Delta_h||_1 ||W_h||_1 ||R||_1`` and likewise for inf, so the
  layer's a-priori bound is ``sqrt(sum_h a_h * sum_h b_h) ||R||_{1,inf}`` (:func:`attention_gamma`), and
  the layer gamma is the value that writes it as ``4 gamma beta H / sqrt(d_qk) ||R||^3`` with
  ``beta = max_h beta_h``.

The older, circular quantity is kept for comparison: :func:`gamma_min`, the smallest gamma making the
one-layer inequality hold on the observed output, restates the output and can certify nothing.
"""

from __future__ import annotations

import math

import torch

from .metrics import norm_1, norm_1inf, norm_inf, res
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


def attention_gamma(X: Tensor, WQ: Tensor, WK: Tensor, Wmaps: Tensor, P: Tensor) -> dict:
    """A-priori gamma and the one-layer bound from the attention entries and the layer's input.

    ``X`` (..., n, d) is the layer's input, ``P`` (..., H, n, n) the attention matrices of the forward pass,
    ``WQ, WK`` (H, d, d_qk) and ``Wmaps`` (H, d, d) the value-output maps ``W_V,h W_O,h``. Float64.
    Returns (leading dims ``...`` kept):

    * ``beta_h`` (H,): ``||W_QK,h||_1 ||W_h||_{1,inf}``; ``beta`` its max;
    * ``gamma_h`` (..., H): see the module docstring; ``bound_h`` (..., H) = ``4 gamma_h beta_h /
      sqrt(d_qk) ||R||^3``, an upper bound on ``||res(P_h X W_h)||_{1,inf}``;
    * ``bound`` (...): the layer's a-priori upper bound on ``||res(sum_h P_h X W_h)||_{1,inf}`` (a bias
      adds ``1 b^T`` and changes no residual); ``gamma`` (...): the layer gamma with
      ``bound = 4 gamma beta H / sqrt(d_qk) ||R||^3``;
    * ``res_in`` (...): ``||R||_{1,inf}``; ``delta_h`` (..., H): ``||Delta_h||_{1,inf}``.
    """
    X, P = X.double(), P.double()
    WQ, WK, Wmaps = WQ.double(), WK.double(), Wmaps.double()
    H, dqk = WQ.shape[0], WQ.shape[-1]
    R = res(X)
    D = P - P.mean(dim=-2, keepdim=True)  # Delta_h = P_h - 1 p_h^T, p_h the mean row
    d1, dinf = norm_1(D), norm_inf(D)  # (..., H)
    w1, winf = norm_1(Wmaps), norm_inf(Wmaps)  # (H,)
    qk1 = norm_1(WQ @ WK.transpose(-1, -2))  # (H,)
    beta_h = qk1 * torch.sqrt(w1 * winf)
    r = norm_1inf(R)  # (...)
    delta_h = torch.sqrt(d1 * dinf)
    rr = r.unsqueeze(-1)
    gamma_h = math.sqrt(dqk) * delta_h / (4.0 * qk1 * rr**2)
    bound_h = delta_h * torch.sqrt(w1 * winf) * rr
    bound = torch.sqrt((d1 * w1).sum(-1) * (dinf * winf).sum(-1)) * r
    beta = beta_h.max()
    gamma = bound * math.sqrt(dqk) / (4.0 * beta * H * r**3)
    return {
        "beta_h": beta_h,
        "beta": float(beta),
        "gamma_h": gamma_h,
        "bound_h": bound_h,
        "bound": bound,
        "gamma": gamma,
        "res_in": r,
        "delta_h": delta_h,
    }


def layer_bounds(san: SAN, hidden: list[Tensor], attentions: list[Tensor]) -> list[dict]:
    """Per layer of a SAN without skips, MLP or LN: the a-priori gamma (:func:`attention_gamma`) and the
    one-layer bound it gives, against the observed residual of the layer's output.

    ``hidden`` ``[X_0..X_L]`` and ``attentions`` ``[P_1..P_L]`` are what ``san.forward`` returns for one
    input (n, d). Each row: ``layer``, ``beta``, ``gamma`` (layer), ``gamma_heads`` (list),
    ``res_in``, ``res_out`` (observed), ``bound`` (a priori), ``tightness`` = res_out / bound (<= 1 up to
    round-off, by construction of the bound), ``factor`` = ``4 gamma beta H / sqrt(d_qk)``, and the fitted,
    circular ``gamma_min`` for comparison.
    """
    if not san.cfg.plain or san.cfg.skip:
        raise ValueError("layer_bounds: the one-layer bound is for a SAN without skips, MLP or LN")
    H, dqk = san.cfg.n_heads, san.cfg.dqk
    rows = []
    for l in range(san.cfg.n_layers):
        g = attention_gamma(hidden[l], san.WQ[l], san.WK[l], san.head_maps(l), attentions[l])
        r_in, r_out = float(g["res_in"]), float(norm_1inf(res(hidden[l + 1])))
        ok = r_in > 0 and math.isfinite(r_in)
        gam = float(g["gamma"]) if ok else math.nan
        rows.append(
            {
                "layer": l + 1,
                "beta": g["beta"],
                "gamma": gam,
                "gamma_heads": [float(x) for x in g["gamma_h"]] if ok else [],
                "res_in": r_in,
                "res_out": r_out,
                "bound": float(g["bound"]),
                "tightness": r_out / float(g["bound"]) if float(g["bound"]) > 0 else math.nan,
                "factor": one_layer_factor(gam, g["beta"], H, dqk) if ok else math.nan,
                "gamma_min": gamma_min(r_in, r_out, g["beta"], H, dqk) if ok else math.nan,
            }
        )
    return rows


def calibrated_gamma(san: SAN, Xs: Tensor, r_min: float) -> dict:
    """A gamma for all layers of ``san``, fitted on calibration inputs ``Xs`` (b, n, d), never on the input
    it will be applied to: the largest a-priori layer gamma (:func:`attention_gamma`) over the forward
    passes of ``Xs``, at every layer whose input's relative residual exceeds ``r_min``.

    Choose ``r_min`` above round-off *squared*: ``Delta_h`` is quadratic in the residual (the logits' part
    that differs between rows is ``R W_QK R^T``), while the logits' round-off scales with ``||X||^2``, so
    below ``r ~ sqrt(eps)`` the ratio ``Delta / R^2`` is round-off over a small number and grows without
    meaning (the chapter uses the square root of its float floor).

    Returns ``gamma`` (the largest; nan when no pair qualified), ``per_layer`` (the largest per layer, nan
    where none) and ``pairs`` (how many (input, layer) pairs entered)."""
    from .metrics import relative_residual

    with torch.no_grad():
        hs, atts = san.forward(Xs)
    per_layer, pairs = [], 0
    for l in range(san.cfg.n_layers):
        g = attention_gamma(hs[l], san.WQ[l], san.WK[l], san.head_maps(l), atts[l])
        ok = (relative_residual(hs[l].double()) > r_min) & torch.isfinite(g["gamma"])
        pairs += int(ok.sum())
        per_layer.append(float(g["gamma"][ok].max()) if bool(ok.any()) else math.nan)
    finite = [x for x in per_layer if x == x]
    return {"gamma": max(finite) if finite else math.nan, "per_layer": per_layer, "pairs": pairs}
