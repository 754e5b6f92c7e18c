"""Lipschitz constants and input sensitivity (Corollary 3.2's lambda, the note's sensitivity trade).

Two estimators of the Lipschitz constant ``lambda`` of the token-wise MLP
``f(y) = act(y W_1 + b_1) W_2 + b_2`` (Euclidean norm on each token):

* :func:`mlp_lipschitz_upper` -- the product of spectral norms ``||W_1||_2 ||W_2||_2``.
  With a 1-Lipschitz activation (ReLU) this is a *global upper bound*.
* :func:`jacobian_norm` -- power iteration on ``J^T J`` of any map at a given input
  (Jacobian-vector and vector-Jacobian products, no Jacobian formed). For the
  token-wise MLP it returns ``max_i ||J_f(y_i)||_2``, the *local* Lipschitz
  constant at the data, a lower bound on the global one.

The same power iteration applied to a whole network gives the input sensitivity
``||J_F(X)||_2``: the largest output change per unit input change (Frobenius
norms on the token matrix), in the limit of small perturbations.
"""

from __future__ import annotations

from typing import Callable

import torch

from .san import SAN

Tensor = torch.Tensor


def mlp_lipschitz_upper(san: SAN, l: int) -> float:
    """``||W_1||_2 * ||W_2||_2`` of layer ``l``: an upper bound on the MLP's Lipschitz constant
    (ReLU/linear)."""
    s1 = torch.linalg.matrix_norm(san.W1[l], ord=2)
    s2 = torch.linalg.matrix_norm(san.W2[l], ord=2)
    return float(s1 * s2)


def jacobian_norm(
    f: Callable[[Tensor], Tensor], X: Tensor, iters: int = 50, seed: int = 0, tol: float = 1e-6
) -> float:
    """Largest singular value of the Jacobian of ``f`` at ``X`` by power iteration on ``J^T J``.

    Starts from a seeded Gaussian direction; stops after ``iters`` steps or when the estimate
    changes by less than ``tol`` (relative). Returns a lower estimate that converges from below.
    """
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    v = torch.randn(X.shape, generator=g, dtype=torch.float64).to(dtype=X.dtype, device=X.device)
    v = v / torch.linalg.vector_norm(v)
    est = 0.0
    _, vjp_fn = torch.func.vjp(f, X)
    for _ in range(iters):
        _, Jv = torch.func.jvp(f, (X,), (v,))
        (JtJv,) = vjp_fn(Jv)
        new = float(torch.linalg.vector_norm(Jv))
        nrm = torch.linalg.vector_norm(JtJv)
        if nrm == 0:
            return 0.0
        v = JtJv / nrm
        if abs(new - est) <= tol * max(new, 1e-300):
            est = new
            break
        est = new
    return est


def mlp_lipschitz_local(san: SAN, l: int, Y: Tensor, iters: int = 50, seed: int = 0) -> float:
    """Power-iteration estimate of the MLP's Jacobian norm at the tokens ``Y`` (its input in layer ``l``)."""
    return jacobian_norm(lambda Z: san.mlp(l, Z), Y, iters=iters, seed=seed)


def network_sensitivity(san: SAN, X: Tensor, iters: int = 50, seed: int = 0, tol: float = 1e-4) -> dict:
    """Input sensitivity of the whole network at ``X``.

    ``abs``: ``||J(X)||_2`` (output change per unit input change, Frobenius norms);
    ``rel``: ``abs * ||X||_F / ||F(X)||_F`` (relative output change per relative input change,
    a condition number: blind to the output's overall scale).
    """
    F = lambda Z: san.forward(Z)[0][-1]  # noqa: E731
    j = jacobian_norm(F, X, iters=iters, seed=seed, tol=tol)
    with torch.no_grad():
        Y = F(X)
    return {"abs": j, "rel": j * float(torch.linalg.matrix_norm(X) / torch.linalg.matrix_norm(Y))}


def finite_difference_sensitivity(
    f: Callable[[Tensor], Tensor], X: Tensor, eps: float, n_dirs: int, seed: int = 0
) -> float:
    """Largest ``||f(X + eps U) - f(X)||_F / eps`` over ``n_dirs`` random unit directions ``U``."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    best = 0.0
    with torch.no_grad():
        Y = f(X)
        for _ in range(n_dirs):
            U = torch.randn(X.shape, generator=g, dtype=torch.float64).to(dtype=X.dtype, device=X.device)
            U = U / torch.linalg.vector_norm(U)
            best = max(best, float(torch.linalg.vector_norm(f(X + eps * U) - Y)) / eps)
    return best
