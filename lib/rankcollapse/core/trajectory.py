"""Generic tools for rank-collapse trajectories: float floor, exponent regression, the bound along depth.

Used by the ``collapse`` and ``skip`` chapters (and available to any chapter that
follows ``r(X_l)`` through a network).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .metrics import norm_1inf, relative_residual, relative_residual_fro, res


def trajectory(san, X) -> dict:
    """``r(X_l)``, ``||res(X_l)||_{1,inf}`` and the Frobenius ``r`` for every hidden state of ``san`` on
    ``X``.

    The hidden states themselves are returned under ``_hidden`` (pop them before storing).
    """
    with torch.no_grad():
        hs, _ = san.forward(X)
    return {
        "r": [float(relative_residual(h)) for h in hs],
        "res": [float(norm_1inf(res(h))) for h in hs],
        "r_fro": [float(relative_residual_fro(h)) for h in hs],
        "_hidden": hs,
    }


def float_floor(dtype, mult: float) -> float:
    """The level below which ``r`` is round-off: ``mult`` machine epsilons of ``dtype``."""
    return mult * float(torch.finfo(dtype).eps)


def floor_index(r: list[float], floor: float) -> int | None:
    """First layer index whose relative residual is at or below ``floor`` (None if the curve never gets
    there).

    Also catches underflow and non-finite values (0, nan, inf all count as hitting the floor).
    """
    for i, v in enumerate(r):
        if not math.isfinite(v) or v <= floor:
            return i
    return None


def exponent_fit(res_norms: list[float], floor_at: int | None) -> dict:
    """Least-squares slope of ``log res_l`` on ``log res_{l-1}`` over the layers above the float floor.

    Needs at least two pairs; the slope is ``None`` otherwise. A linear rate (``res_l = q res_{l-1}``) gives
    1; the theorem's one-layer inequality, if tight, gives 3.
    """
    top = floor_at if floor_at is not None else len(res_norms)
    x = [math.log(res_norms[l - 1]) for l in range(1, top)]
    y = [math.log(res_norms[l]) for l in range(1, top)]
    if len(x) < 2 or max(x) - min(x) < 1e-12:
        return {"slope": None, "intercept": None, "pairs": len(x)}
    slope, icpt = np.polyfit(x, y, 1)
    return {"slope": float(slope), "intercept": float(icpt), "pairs": len(x)}


def bound_along_depth(layers: list[dict], res0: float, H: int, dqk: int) -> dict:
    """Theorem 2.2 evaluated with one beta and one gamma for all layers: the largest beta over layers and the
    smallest gamma that makes the one-layer inequality hold at every layer *of this run's own output*.

    Circular, kept for comparison: a gamma fitted so that the inequality holds restates the observed
    residuals and cannot be refuted by them. For a prediction use the a-priori gamma of
    :mod:`rankcollapse.core.bounds`, fitted on other inputs, with :func:`log10_depth_bound`.

    ``layers`` are rows of :func:`rankcollapse.core.bounds.layer_gammas` (``beta``, ``gamma_min``,
    ``res_in/out``). Returns log10 of the depth bound at every depth (0..len(layers)) and of the one-layer
    bound applied to the actual residual of the previous layer.
    """
    g = max(row["gamma_min"] for row in layers)
    b = max(row["beta"] for row in layers)
    f = 4.0 * g * b * H / math.sqrt(dqk)
    lf, lr = math.log10(f), math.log10(res0)
    bound = [(3**l - 1) / 2 * lf + 3**l * lr for l in range(len(layers) + 1)]
    onestep = [lf + 3 * math.log10(row["res_in"]) for row in layers]
    return {
        "gamma": g,
        "beta": b,
        "factor": f,
        "log10_bound": bound,
        "log10_onestep": onestep,
        "gamma_spread": g / min(row["gamma_min"] for row in layers),
    }


def theorem_certifies(layers: list[dict], res0: float, H: int, dqk: int) -> dict:
    """Does Theorem 2.2, with beta and gamma as in :func:`bound_along_depth`, prove that res -> 0 with depth?
    (The old, circular certificate: gamma fitted on the run's own output; see :func:`certificate_margin`
    for one with a gamma from elsewhere.)

    The bound ``f^((3^L-1)/2) res0^(3^L) = (sqrt(f) res0)^(3^L) / sqrt(f)`` goes to zero iff
    ``sqrt(f) res0 < 1``; for ``res0 <= 1`` this is the paper's ``4 gamma beta H < sqrt(d_qk)``.
    """
    if not layers:
        return {"certified": False, "gamma": math.nan, "factor": math.nan}
    g = max(row["gamma_min"] for row in layers)
    b = max(row["beta"] for row in layers)
    f = 4.0 * g * b * H / math.sqrt(dqk)
    return {"certified": 0.5 * math.log(f) + math.log(res0) < 0, "gamma": g, "factor": f}


def trajectory_attention(san, X) -> dict:
    """:func:`trajectory` plus the attention matrices of the same forward pass (one pass): the hidden states
    under ``_hidden`` and the attentions under ``_attention`` (pop both before storing)."""
    with torch.no_grad():
        hs, atts = san.forward(X)
    return {
        "r": [float(relative_residual(h)) for h in hs],
        "res": [float(norm_1inf(res(h))) for h in hs],
        "r_fro": [float(relative_residual_fro(h)) for h in hs],
        "_hidden": hs,
        "_attention": atts,
    }


def decaying_segment(res_norms: list[float], floor_at: int | None) -> tuple[int, int]:
    """The longest run of consecutive layers above the float floor over which the residual decays:
    ``(a, b)`` such that ``res_l < res_{l-1}`` for every ``l`` in ``a+1..b`` (the pairs ``(l-1, l)``);
    ``(0, 0)`` when no pair decays. Ties go to the earliest run."""
    top = floor_at if floor_at is not None else len(res_norms)
    best, start = (0, 0), None
    for l in range(1, top):
        if res_norms[l] < res_norms[l - 1]:
            if start is None:
                start = l - 1
            if l - start > best[1] - best[0]:
                best = (start, l)
        else:
            start = None
    return best


def exponent_fit_decaying(res_norms: list[float], floor_at: int | None) -> dict:
    """:func:`exponent_fit` restricted to the decaying segment (:func:`decaying_segment`): the slope of
    ``log res_l`` on ``log res_{l-1}`` over the pairs in which the residual falls, a per-layer exponent only
    there. (On a growing geometric sequence the same regression gives 1 for any growth factor, which says
    nothing about a rate of collapse.) Needs two pairs; ``slope`` is None otherwise. Also returns the
    segment ``(a, b)``."""
    a, b = decaying_segment(res_norms, floor_at)
    fit = (
        exponent_fit(res_norms[a : b + 1], None)
        if b - a >= 2
        else {"slope": None, "intercept": None, "pairs": b - a}
    )
    return fit | {"segment": (a, b)}


def geometric_factor(values: list[float], floor_at: int | None) -> float | None:
    """Median per-layer ratio ``v_l / v_{l-1}`` over the layers above the float floor (None with fewer than
    two points): above 1 the sequence grows, below 1 it decays, at any constant ratio ``log v_l`` on
    ``log v_{l-1}`` has slope 1."""
    top = floor_at if floor_at is not None else len(values)
    q = [values[l] / values[l - 1] for l in range(1, top) if values[l - 1] > 0]
    return float(np.median(q)) if q else None


def log10_depth_bound(factor: float, res0: float, L: int) -> list[float]:
    """log10 of Theorem 2.2's bound ``factor^((3^l-1)/2) res0^(3^l)`` at every depth ``l = 0..L``."""
    lf, lr = math.log10(factor), math.log10(res0)
    return [(3**l - 1) / 2 * lf + 3**l * lr for l in range(L + 1)]


def certificate_margin(factor: float, res0: float) -> float:
    """``log10(sqrt(factor) res0)``: Theorem 2.2's bound goes to zero with depth iff this is negative; its
    negation is also log10 of the largest input scale ``c`` for which the input ``c X`` is certified
    (``res`` scales with ``c``; ``factor`` holds if gamma does)."""
    return 0.5 * math.log10(factor) + math.log10(res0)
