"""Theorem 2.1: the output of a SAN as a sum over paths, and its exact split by path length.

With the attention matrices of the actual forward pass held fixed, layer ``l``
is the affine map ``Y -> [skip] Y + T_l(Y) + 1 b_l^T`` with
``T_l(Y) = sum_h P_{l,h} Y W_{l,h}``. A *path* picks one head per layer (head
``0`` = the skip branch, when there is one); its term is
``P_path X W_path = P_{L,h_L} ... P_{1,h_1} X W_{1,h_1} ... W_{L,h_L}``.
Its *length* is the number of layers it does not skip.

Three ways to get the terms, from slowest to fastest:

* :func:`path_sum_naive` builds every path's product from scratch,
* :func:`path_sum_enumerated` enumerates paths level by level sharing common
  prefixes (the fastest honest enumeration; used as the benchmark reference),
* :func:`length_components` never enumerates: the length-``k`` component obeys
  ``S_l^(k) = [skip] S_{l-1}^(k) + T_l(S_{l-1}^(k-1))``, O(L^2) layer applications, each layer's
  components stacked into one batch and its heads mixed in large GEMMs (:meth:`SAN.mix`).

All three return the same :class:`PathSplit`: per-length sums of the linear
terms and the rank-one bias term ``1 c^T`` (which Theorem 2.1 writes as 1b^T).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from .san import SAN

Tensor = torch.Tensor


# -- counting -------------------------------------------------------------------------
def path_count(L: int, H: int, length: int, skip: bool = True) -> int:
    """Number of paths of a given length: ``C(L, l) H^l`` with skips; ``H^L`` (length L only) without."""
    if not skip:
        return H**L if length == L else 0
    return math.comb(L, length) * H**length


def path_length_distribution(L: int, H: int) -> list[float]:
    """Fraction of the ``(H+1)^L`` paths of a SAN with skips that have length ``0..L``.

    Computed with exact integers, then divided: ``C(L,l) H^l / (H+1)^L``.
    """
    total = (H + 1) ** L
    return [math.comb(L, l) * H**l / total for l in range(L + 1)]


def iter_paths(L: int, H: int, skip: bool):
    """All head choices ``(h_1..h_L)``; ``0`` means skip (only when ``skip``)."""
    heads = range(0 if skip else 1, H + 1)
    return itertools.product(heads, repeat=L)


# -- results container ----------------------------------------------------------------
@dataclass
class PathSplit:
    """``components[k]`` = sum of the path terms of length ``k`` (shape (n, d)); ``bias`` = ``1 c^T``."""

    components: Tensor  # (L+1, ..., n, d)
    bias: Tensor  # (..., n, d)

    def total(self) -> Tensor:
        return self.components.sum(dim=0) + self.bias

    def up_to(self, k: int) -> Tensor:
        """Output restricted to paths of length ``<= k`` (plus the bias term)."""
        return self.components[: k + 1].sum(dim=0) + self.bias


def _require_plain(san: SAN) -> None:
    if not getattr(san.cfg, "plain", True):
        raise ValueError(
            "the path decomposition (Theorem 2.1) holds for pure SANs only: "
            "this network has an MLP or layer normalisation"
        )


def _row_stochastic(P: Tensor) -> bool:
    """True when every row of every attention matrix sums to 1 up to round-off (as softmax rows do)."""
    tol = 1e3 * torch.finfo(P.dtype).eps if P.is_floating_point() else 0.0
    return bool(((P.sum(dim=-1) - 1).abs() <= tol).all())


def _bias_term(san: SAN, atts: list[Tensor], like: Tensor) -> Tensor:
    """The affine part ``B_l = [skip] B_{l-1} + T_l(B_{l-1}) + 1 b_l^T``, ``B_0 = 0``.

    With row-stochastic attention matrices ``P_h 1 = 1``, so ``B_l = 1 c_l^T`` stays rank one with
    ``c_l = [skip] c_{l-1} + sum_h W_O,h^T W_V,h^T c_{l-1} + b_l``: a vector recursion, computed with
    the same head-mixed products as :meth:`SAN.mix` (values of all heads, then the output projection on
    the concatenated heads). Other ``atts`` get the general matrix recursion.
    """
    _require_plain(san)
    L, H, dv, skip = san.cfg.n_layers, san.cfg.n_heads, san.cfg.dv, san.cfg.skip
    if all(_row_stochastic(P) for P in atts[:L]):
        c = torch.zeros(like.shape[-1], dtype=like.dtype, device=like.device)
        for l in range(L):
            t = (c @ san.WV[l]).reshape(H * dv) @ san.WO[l].reshape(H * dv, -1)  # (H, dv) -> (d,)
            c = (c if skip else 0) + t + san.b[l]
        return torch.zeros_like(like) + c
    B = torch.zeros_like(like)
    for l in range(L):
        B = (B if skip else 0) + san.mix(l, atts[l], B) + san.b[l]
    return B


# -- 1. naive: every path from scratch -------------------------------------------------
def path_term(san: SAN, atts: list[Tensor], X: Tensor, path) -> Tensor:
    """``P_path X W_path`` for one path, built from scratch."""
    Y = X
    for l, h in enumerate(path):
        if h == 0:
            continue
        Y = atts[l][..., h - 1, :, :] @ Y @ san.WV[l, h - 1] @ san.WO[l, h - 1]
    return Y


def path_sum_naive(san: SAN, X: Tensor, atts: list[Tensor]) -> PathSplit:
    L, H = san.cfg.n_layers, san.cfg.n_heads
    comps = torch.zeros((L + 1,) + X.shape, dtype=X.dtype, device=X.device)
    for path in iter_paths(L, H, san.cfg.skip):
        comps[sum(h > 0 for h in path)] += path_term(san, atts, X, path)
    return PathSplit(comps, _bias_term(san, atts, X))


# -- 2. enumeration sharing common prefixes --------------------------------------------
def path_sum_enumerated(san: SAN, X: Tensor, atts: list[Tensor]) -> PathSplit:
    """Enumerate every path, level by level, reusing each prefix product once.

    After layer ``l`` the tensor ``Ys`` holds the ``(H+1)^l`` prefix products
    ``P_{l,h_l}..P_{1,h_1} X W_{1,h_1}..W_{l,h_l}``; each is extended by every head
    in one batched step. This does ``(H+1)^L - 1`` head applications, each exactly
    once, and is the fair reference for :func:`length_components`.
    Input ``X`` is one token matrix (n, d).
    """
    L, H, skip = san.cfg.n_layers, san.cfg.n_heads, san.cfg.skip
    Ys = X.unsqueeze(0)  # (N, n, d)
    lengths = torch.zeros(1, dtype=torch.long)
    for l in range(L):
        V = Ys.unsqueeze(1) @ san.WV[l]  # (N, H, n, dv)
        heads = (atts[l] @ V) @ san.WO[l]  # (N, H, n, d)
        new = heads.reshape(-1, *X.shape)
        new_len = (lengths + 1).repeat_interleave(H)
        if skip:
            Ys, lengths = torch.cat([Ys, new]), torch.cat([lengths, new_len])
        else:
            Ys, lengths = new, new_len
    comps = torch.zeros((L + 1,) + X.shape, dtype=X.dtype, device=X.device)
    comps.index_add_(0, lengths.to(X.device), Ys)
    return PathSplit(comps, _bias_term(san, atts, X))


# -- 3. the O(L^2) recursion -----------------------------------------------------------
def length_components(san: SAN, X: Tensor, atts: list[Tensor] | None = None) -> PathSplit:
    """Exact per-length components without enumerating paths.

    ``S_l^(k) = [skip] S_{l-1}^(k) + T_l(S_{l-1}^(k-1))``, with all ``k`` of a layer
    pushed through ``T_l`` in one batched call: :meth:`SAN.mix` on the stack of the ``l`` components,
    i.e. the values of all heads of all components in one GEMM, each ``P_h`` applied to every component
    at once, and the output projection on the concatenated heads in one GEMM. If ``atts`` is None the
    forward pass is run first to get them. Works for ``X`` of shape (n, d) or (B, n, d).
    """
    _require_plain(san)
    L = san.cfg.n_layers
    if atts is None:
        _, atts = san.forward(X)
    S = torch.zeros((L + 1,) + X.shape, dtype=X.dtype, device=X.device)
    S[0] = X
    for l in range(L):
        if san.cfg.skip:
            # components of length 0..l exist after l layers; push them all through T_{l+1}
            S[1 : l + 2] += san.mix(l, atts[l], S[: l + 1])
        else:
            # without skips only the length-l component exists
            S_next = torch.zeros_like(S)
            S_next[l + 1] = san.mix(l, atts[l], S[l])
            S = S_next
    return PathSplit(S, _bias_term(san, atts, X))
