"""Theorem 2.1 through post-LayerNorm layers: the exact split of a BERT-style SAN's output by path length.

A post-LN layer (BERT's attention block without its MLP) is ``X' = LN([skip] X + T(X) + 1 b^T)`` with
``T(X) = sum_h P_h X W_h`` and ``LN(Y) = D^-1 (Y C) diag(g) + 1 beta^T``: ``C = I - 11^T/d`` centres each
token over its features, ``D = diag(sigma)`` holds each token's standard deviation ``sqrt(var(y) + eps)``.
With the attention matrices ``P_h`` **and** the per-token scales ``sigma`` of the actual forward pass held
fixed, ``N(Y) = D^-1 (Y C) diag(g)`` is linear, so the layer is affine in its input and the length-``k``
component obeys the same O(L^2) recursion as in :func:`rankcollapse.core.paths.length_components`:

    S_l^(k) = N_l([skip] S_{l-1}^(k) + T_l(S_{l-1}^(k-1))),
    B_l     = N_l([skip] B_{l-1} + T_l(B_{l-1}) + 1 b_l^T) + 1 beta_l^T,   B_0 = 0,

and ``sum_k S_L^(k) + B_L`` is the network's output. ``D`` acts on the token side, so the affine part
``B_l`` is no longer rank one (each token's row is scaled by its own ``sigma``): it is carried as a matrix.

A path's term is the product along the path of ``Z -> N_l(P_h Z W_h)`` (head ``h`` chosen in layer ``l``)
or ``Z -> N_l(Z)`` (layer skipped): :func:`path_sum_naive_ln` builds every one from scratch, the
brute-force reference ``tests/test_ln_paths.py`` checks the recursion against.

The networks are :class:`~rankcollapse.core.san.SAN` with ``layernorm="post"`` and no MLP; this module is
apart from :mod:`rankcollapse.core.paths` (which the ``decomposition`` chapter uses for pure SANs).
"""

from __future__ import annotations

import torch

from .paths import PathSplit, iter_paths
from .san import SAN

Tensor = torch.Tensor


def _require_post_ln(san: SAN) -> None:
    cfg = san.cfg
    if cfg.mlp_hidden or cfg.layernorm != "post":
        raise ValueError(
            "the path split through LayerNorm needs a SAN with layernorm='post' and no MLP "
            f"(this one: layernorm={cfg.layernorm!r}, mlp_hidden={cfg.mlp_hidden}); pure SANs use "
            "rankcollapse.core.paths.length_components"
        )


def forward_scales(san: SAN, X: Tensor) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """The forward pass with what the linearisation holds fixed: hidden states ``[X_0..X_L]``, attention
    matrices ``[P_1..P_L]`` and each layer's per-token LayerNorm scales ``sigma_l`` (shape (..., n, 1)).
    The states are the SAN's own forward (:meth:`SAN.forward`)."""
    _require_post_ln(san)
    hs, atts = san.forward(X)
    sig = []
    for l in range(san.cfg.n_layers):
        Xp = hs[l]
        Y = san.mix(l, atts[l], Xp) + san.b[l]
        if san.cfg.skip:
            Y = Y + Xp
        sig.append(torch.sqrt(Y.var(dim=-1, unbiased=False, keepdim=True) + san.cfg.ln_eps))
    return hs, atts, sig


def norm_map(san: SAN, l: int, sigma: Tensor, Z: Tensor) -> Tensor:
    """``N_l(Z) = D_l^-1 (Z C) diag(g_l)``: layer ``l``'s LayerNorm with its scales held at ``sigma``,
    without its bias (linear in ``Z``). ``Z`` may carry leading stack dimensions beyond ``sigma``'s."""
    return (Z - Z.mean(dim=-1, keepdim=True)) / sigma * san.ln1_g[l]


def length_components_ln(
    san: SAN, X: Tensor, atts: list[Tensor] | None = None, sigmas: list[Tensor] | None = None
) -> PathSplit:
    """Exact per-length components of a post-LN SAN (no MLP), attention and LayerNorm scales of the forward
    pass on ``X`` held fixed (computed when not given, :func:`forward_scales`). ``components[k]`` sums
    the paths of length ``k``; ``bias`` is the affine part ``B_L`` (a matrix). Their total is the
    network's output; ``X`` of shape (n, d) or (B, n, d)."""
    _require_post_ln(san)
    if atts is None or sigmas is None:
        _, atts, sigmas = forward_scales(san, X)
    L, skip = san.cfg.n_layers, san.cfg.skip
    S = torch.zeros((L + 1,) + X.shape, dtype=X.dtype, device=X.device)
    S[0] = X
    B = torch.zeros_like(X)
    for l in range(L):
        P, sig = atts[l], sigmas[l]
        if skip:
            new = S.clone()
            new[1 : l + 2] += san.mix(l, P, S[: l + 1])
        else:
            new = torch.zeros_like(S)
            new[l + 1] = san.mix(l, P, S[l])
        S = norm_map(san, l, sig, new)
        B = norm_map(san, l, sig, (B if skip else 0) + san.mix(l, P, B) + san.b[l]) + san.ln1_b[l]
    return PathSplit(S, B)


def path_term_ln(san: SAN, atts: list[Tensor], sigmas: list[Tensor], X: Tensor, path) -> Tensor:
    """One path's term, from scratch: ``Z -> N_l(P_h Z W_V,h W_O,h)`` where the path takes head ``h``
    in layer ``l``, ``Z -> N_l(Z)`` where it skips the layer."""
    Z = X
    for l, h in enumerate(path):
        if h:
            Z = atts[l][..., h - 1, :, :] @ Z @ san.WV[l, h - 1] @ san.WO[l, h - 1]
        Z = norm_map(san, l, sigmas[l], Z)
    return Z


def path_sum_naive_ln(san: SAN, X: Tensor, atts=None, sigmas=None) -> PathSplit:
    """Every path of the post-LN SAN built from scratch and added by length; the affine part by its own
    recursion. The brute-force reference for :func:`length_components_ln` (``(H+1)^L`` paths)."""
    _require_post_ln(san)
    if atts is None or sigmas is None:
        _, atts, sigmas = forward_scales(san, X)
    L, H, skip = san.cfg.n_layers, san.cfg.n_heads, san.cfg.skip
    comps = torch.zeros((L + 1,) + X.shape, dtype=X.dtype, device=X.device)
    for path in iter_paths(L, H, skip):
        comps[sum(h > 0 for h in path)] += path_term_ln(san, atts, sigmas, X, path)
    B = torch.zeros_like(X)
    for l in range(L):
        PB = sum(atts[l][..., h, :, :] @ B @ san.WV[l, h] @ san.WO[l, h] for h in range(H))
        B = norm_map(san, l, sigmas[l], (B if skip else 0) + PB + san.b[l]) + san.ln1_b[l]
    return PathSplit(comps, B)
