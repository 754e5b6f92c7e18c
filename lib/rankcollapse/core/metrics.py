"""Rank metrics on token matrices (tokens are rows: X has shape (..., n, d)).

The residual is taken against the *token mean*: ``res(X) = X - 1 x^T`` with
``x`` the mean token. The paper defines ``x`` as a minimiser; the authors'
public code uses the mean, and so does this book. The choice lives in
:func:`res` alone.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def res(X: Tensor) -> Tensor:
    """Residual ``X - 1 x^T`` with ``x`` the mean over tokens (rows)."""
    return X - X.mean(dim=-2, keepdim=True)


def norm_1(X: Tensor) -> Tensor:
    """``||X||_1``: the largest absolute column sum."""
    return X.abs().sum(dim=-2).amax(dim=-1)


def norm_inf(X: Tensor) -> Tensor:
    """``||X||_inf``: the largest absolute row sum."""
    return X.abs().sum(dim=-1).amax(dim=-1)


def norm_1inf(X: Tensor) -> Tensor:
    """The paper's composite ``||X||_{1,inf} = sqrt(||X||_1 ||X||_inf)``.

    It is not a norm (it fails the triangle inequality); the paper says so.
    """
    return torch.sqrt(norm_1(X) * norm_inf(X))


def relative_residual(X: Tensor) -> Tensor:
    """``r(X) = ||res(X)||_{1,inf} / ||X||_{1,inf}`` (0 for a rank-1 token set)."""
    return norm_1inf(res(X)) / norm_1inf(X)


def relative_residual_fro(X: Tensor) -> Tensor:
    """Frobenius version of :func:`relative_residual`."""
    return torch.linalg.matrix_norm(res(X)) / torch.linalg.matrix_norm(X)


def stable_rank(X: Tensor, centre: bool = True) -> Tensor:
    """``srank = ||X~||_F^2 / sigma_1^2`` on tokens centred over the sequence."""
    Y = res(X) if centre else X
    s = torch.linalg.svdvals(Y)
    return (s**2).sum(dim=-1) / s[..., 0] ** 2


def q_spread(X: Tensor) -> Tensor:
    """``Q = sqrt(srank - 1) = ||E||_F / sigma_1`` with ``E`` the centred tokens minus their top singular
    part."""
    Y = res(X)
    s = torch.linalg.svdvals(Y)
    return torch.sqrt((s[..., 1:] ** 2).sum(dim=-1)) / s[..., 0]
