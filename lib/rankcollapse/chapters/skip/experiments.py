"""Chapter `skip`, experiments: what is computed, from the parameters. Part (a), the constructions that
keep the residual exactly (:func:`constructions`, checked by :func:`preservation` against each case's
round-off scale); part (b), pure SANs against SAN+skip networks at random initialisation
(:func:`skip_curves`); part (c), the lower-bound frontier (:func:`frontier`, the search machinery in
:mod:`rankcollapse.core.adversary`) and the search input's scale (:func:`input_scale`). Each returns plain
data.
"""

from __future__ import annotations

import math

import torch

from ...core import adversary as A
from ...core import explosion
from ...core.metrics import norm_1inf, res
from ...core.san import SAN, SANConfig, random_tokens
from ...core.trajectory import float_floor, floor_index, trajectory


def ratio(san: SAN, X) -> float:
    with torch.no_grad():
        return float(A.residual_ratio(san, X))


EPS64 = float(torch.finfo(torch.float64).eps)
LOST_DIGITS = 1e-4  # a case whose round-off scale exceeds this has too few digits left to check anything


def preservation(san: SAN, X) -> dict:
    """The residual ratio, and the round-off scale it can be checked to: subtracting a token mean of size
    ``||X_L||`` from every token costs about ``eps * ||X_L|| / ||res(X)||`` in the ratio. ``exact`` when
    ``|ratio - 1| <= 100 * (eps + that scale)``; ``overflow`` when the forward pass leaves the float
    range."""
    with torch.no_grad():
        hs, _ = san.forward(X)
        num, den = float(norm_1inf(res(hs[-1]))), float(norm_1inf(res(X)))
        scale = EPS64 * float(norm_1inf(hs[-1])) / den
    r = num / den
    ok = math.isfinite(r) and math.isfinite(scale)
    lost = ok and scale > LOST_DIGITS
    return {
        "ratio": r if ok else None,
        "roundoff": scale if ok else None,
        "overflow": not ok,
        "precision_lost": lost,
        "checkable": ok and not lost,
        "dev_in_roundoff": abs(r - 1) / (EPS64 + scale) if ok else None,
        "exact": ok and abs(r - 1) <= 100 * (EPS64 + scale),
    }


# -- (a) constructions -----------------------------------------------------------------------
def zero_value_san(cfg: SANConfig, seed: int) -> SAN:
    """The one-line construction: random W_Q, W_K, bias, but W_V = 0. Every layer is X + 1 b^T."""
    san = SAN.random(cfg, seed)
    san.WV.zero_()
    return san


def uniform_attention_san(cfg: SANConfig, seed: int) -> SAN:
    """W_Q = 0: every attention row is uniform, so P X W_h = 1 xbar^T W_h is rank one; values are random."""
    san = SAN.random(cfg, seed)
    san.WQ.zero_()
    return san


def subspace_tokens(n: int, d: int, k: int, seed: int):
    """Tokens ``1 x^T + R`` with a random mean ``x`` and residual rows ``R`` in the first ``k``
    coordinates."""
    g = torch.Generator().manual_seed(int(seed))
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    R = res(X)
    R[:, k:] = 0
    return R + torch.randn(1, d, generator=g, dtype=torch.float64)


def orthogonal_value_san(cfg: SANConfig, k: int, beta: float, seed: int) -> SAN:
    """The non-trivial family: random queries, keys, outputs, bias; values ``W_V = (I - Pi_k) G`` that
    annihilate the residual subspace (first ``k`` coordinates); every head scaled onto ``beta_h = beta``.

    On inputs from :func:`subspace_tokens` the attention is arbitrary and not uniform, the values are not
    zero, yet every layer adds ``P (1 x^T) W_h = 1 (x^T W_h)``: ``res`` is preserved exactly at any depth and
    any beta.
    """
    san = SAN.random(cfg, seed)
    san.WV[:, :, :k, :] = 0
    A.project_beta(san, beta, exact=True)
    return san


def constructions(n, d, H, depths, betas, k, seed, skip=True) -> list[dict]:
    """Residual ratio ``||res(X_L)||/||res(X)||`` (composite norm) of each construction, depth and beta.
    ``skip=False``: the same constructions (same weights) without their skip connections, C2's control."""
    rows = []
    for L in depths:
        cfg = SANConfig(L, H, d, skip=skip)
        Xg = random_tokens(n, d, seed + 1)
        z = zero_value_san(cfg, seed)
        rows.append(
            {"family": "zero values", "L": L, "beta": float(A.head_betas(z).max()), **preservation(z, Xg)}
        )
        u = uniform_attention_san(cfg, seed)
        rows.append(
            {
                "family": "uniform attention",
                "L": L,
                "beta": float(A.head_betas(u).max()),
                **preservation(u, Xg),
            }
        )
        Xs = subspace_tokens(n, d, k, seed + 2)
        for b in betas:
            o = orthogonal_value_san(cfg, k, b, seed)
            with torch.no_grad():
                P = o.attention(0, Xs)
            rows.append(
                {
                    "family": "residual-orthogonal values",
                    "L": L,
                    "beta": float(A.head_betas(o).max()),
                    "beta_target": b,
                    **preservation(o, Xs),
                    "attention_from_uniform": float((P - 1.0 / n).abs().max()),
                }
            )
        # the same family on generic inputs (residual not in a subspace): not preserved in general
        o = orthogonal_value_san(cfg, k, 1.0, seed)
        rows.append(
            {
                "family": "residual-orthogonal values, generic input",
                "L": L,
                "beta": 1.0,
                **preservation(o, Xg),
            }
        )
    return rows


# -- (b) SAN vs SAN+skip at random init -----------------------------------------------------------
def skip_curves(n, d, H, L, scales, seeds, floor_mult, seed, device, log=print) -> list[dict]:
    floor = float_floor(torch.float64, floor_mult)
    rows = []
    for s in scales:
        for skip in (False, True):
            for i in range(seeds):
                san = SAN.random(
                    SANConfig(L, H, d, skip=skip, weight_scale=s), seed + 1000 * i, device=device
                )
                X = random_tokens(n, d, seed + 1000 * i + 1, device=device)
                tr = trajectory(san, X)
                hs = tr.pop("_hidden")
                growth = explosion.growth(torch.linalg.matrix_norm(hs[-1]), torch.linalg.matrix_norm(X))
                rows.append(
                    {
                        "scale": s,
                        "skip": skip,
                        "seed": i,
                        "r": tr["r"],
                        "res": tr["res"],
                        "floor_at": floor_index(tr["r"], floor),
                        "growth": growth,
                        "exploded": explosion.exploded(growth, L),
                    }
                )
        log(f"curves at scale {s} done")
    return rows


# -- (c) the lower-bound frontier ------------------------------------------------------------------
def frontier(
    n, d, H, depths, betas, samples, steps, starts, levels, tol, lr, seed, log=print, skip=True
) -> list[dict]:
    """Smallest ``||res(X_L)||/||res(X)||`` found with skips under ``beta_h <= beta``, per (depth, beta): by
    random search, the structured sharpen-and-subtract family, the best network of the next shallower
    depth padded with quiet layers, and adversarial gradient descent from ``starts`` random draws and from
    those two candidates, run to a plateau (:func:`rankcollapse.core.adversary.search_to_plateau`: the
    steps doubled at each effort level until four times the effort lowers the random restarts' best by
    less than ``tol``, or ``levels`` levels). Each value is achieved by a network on the constraint; the
    cell's ``best`` is the smallest, ``converged`` is the descent's. Float64, CPU (small sizes; the
    restarts are batched). ``skip=False``: the same search (input, seeds, candidates, effort) on pure
    self-attention networks, Q1's control."""
    X = random_tokens(n, d, seed + 1)
    rows, best_san = [], {}
    for L in sorted(depths):
        cfg = SANConfig(L, H, d, skip=skip, bias=False)
        for b in betas:
            cell_seed = int(seed) + 7919 * L + int(1000 * b)
            g = torch.Generator().manual_seed(cell_seed)
            r_best, r_san = A.random_search(cfg, X, b, samples, g)
            s_best, s_san = A.structured_search(cfg, X, b)
            shallower = [k for k in best_san if k[1] == b and k[0] < L]
            p_best, p_san = math.inf, None
            if shallower:
                p_san = A.pad_with_quiet_layers(best_san[max(shallower)], L, b, g)
                p_best = A.checked_ratio(p_san, X)
            extra = tuple(x for x in (p_san, s_san) if x is not None)
            run = A.search_to_plateau(cfg, X, b, cell_seed + 1, starts, steps, levels, tol, lr, extra)
            cands = {
                "random": (r_best, r_san),
                "structured": (s_best, s_san),
                "padded": (p_best, p_san),
                "adversarial": (run["best"], run["san"]),
            }
            src = min((k for k in cands if cands[k][1] is not None), key=lambda k: cands[k][0])
            best, best_san[(L, b)] = cands[src]
            rows.append(
                {
                    "L": L,
                    "beta": b,
                    "random": r_best,
                    "structured": s_best,
                    "padded": p_best if shallower else None,
                    "adversarial": run["best"],
                    "adversarial_random": run["random_best"],
                    "adversarial_from_candidates": run["extra_best"],
                    "best": best,
                    "best_from": src,
                    "per_layer": best ** (1.0 / L),
                    "converged": run["converged"],
                    "levels": run["levels"],
                    "effort": run["levels"][-1]["effort"],
                }
            )
            tag = "" if skip else " (no skip)"
            log(
                f"frontier{tag} L={L} beta={b:g}: random {r_best:.3g}, structured {s_best:.3g}, padded "
                f"{p_best:.3g}, adversarial {run['random_best']:.3g} (from candidates "
                f"{run['extra_best']:.3g}) after {run['levels'][-1]['steps']} steps x "
                f"{starts} restarts ({'converged' if run['converged'] else 'not converged'})"
            )
    return rows


def input_scale(n, d, seed) -> dict:
    X = random_tokens(n, d, seed + 1)
    G = X @ X.T
    return {
        "res_1inf": float(norm_1inf(res(X))),
        "mean_sq_norm": float((X**2).sum(-1).mean()),
        "self_max": bool((G.argmax(dim=-1) == torch.arange(n)).all()),
    }
