"""Searching SAN parameterisations under a beta constraint: the residual ratio, projection, random and
gradient-based (adversarial) search.

The constraint is the one of Theorems 2.2/2.3: for every layer and head,
``beta_h = ||W_Q,h W_K,h^T||_1 * ||W_V,h W_O,h||_{1,inf} <= beta``. ``beta_h`` is
homogeneous of degree 4 in the four factors, so multiplying each of them by
``(beta / beta_h)^(1/4)`` puts a head exactly on the constraint; :func:`project_beta`
does that to every head above it (a feasible retraction, not the Euclidean projection).
"""

from __future__ import annotations

import math

import torch

from .metrics import norm_1, norm_1inf, res
from .san import SAN, SANConfig

Tensor = torch.Tensor


def residual_ratio(san: SAN, X: Tensor) -> Tensor:
    """``||res(X_L)||_{1,inf} / ||res(X)||_{1,inf}`` (differentiable in the weights)."""
    hs, _ = san.forward(X)
    return norm_1inf(res(hs[-1])) / norm_1inf(res(X))


TRUST_DIGITS = 1e4  # a ratio is trusted only if it is at least this many times its round-off scale


def checked_ratio(san: SAN, X: Tensor) -> float:
    """The residual ratio as a float, or ``inf`` when it cannot be trusted: when the forward pass leaves the
    float range, or when the ratio is within ``TRUST_DIGITS`` of its round-off scale
    ``eps * ||X_L|| / ||res(X)||`` (a token mean grown so large that subtracting it wipes out the residual
    would otherwise read as collapse)."""
    with torch.no_grad():
        hs, _ = san.forward(X)
        den = float(norm_1inf(res(X)))
        if not den > 0:
            return math.inf
        v = float(norm_1inf(res(hs[-1]))) / den
        scale = float(torch.finfo(X.dtype).eps) * float(norm_1inf(hs[-1])) / den
    if not (math.isfinite(v) and math.isfinite(scale)) or v < TRUST_DIGITS * scale:
        return math.inf
    return v


def head_betas(san: SAN) -> Tensor:
    """``beta_h`` of every layer and head: shape (L, H)."""
    WQK = san.WQ @ san.WK.transpose(-1, -2)
    return norm_1(WQK) * norm_1inf(san.WV @ san.WO)


def project_beta(san: SAN, beta: float, exact: bool = False) -> None:
    """In place: scale every head with ``beta_h > beta`` (all heads with ``beta_h > 0`` if ``exact``) onto
    ``beta_h = beta``, by the factor ``(beta / beta_h)^(1/4)`` on each of W_Q, W_K, W_V, W_O."""
    with torch.no_grad():
        bh = head_betas(san)
        mask = (bh > 0) if exact else (bh > beta)
        t = torch.where(mask, (beta / bh.clamp_min(1e-300)) ** 0.25, torch.ones_like(bh))
        t = t[..., None, None]
        for w in (san.WQ, san.WK, san.WV, san.WO):
            w.mul_(t)


def random_on_constraint(cfg: SANConfig, beta: float, gen: torch.Generator, dtype=torch.float64) -> SAN:
    """Gaussian weights (with a log-uniform scale in [0.1, 10] per draw) put exactly on ``beta_h = beta``."""
    L, H, d, dqk, dv = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.dqk, cfg.dv
    s = 10 ** (2 * float(torch.rand((), generator=gen, dtype=torch.float64)) - 1)

    def draw(*shape):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * s / math.sqrt(shape[-2])).to(dtype)

    san = SAN(
        cfg,
        draw(L, H, d, dqk),
        draw(L, H, d, dqk),
        draw(L, H, d, dv),
        draw(L, H, dv, d),
        torch.zeros(L, d, dtype=dtype),
    )
    project_beta(san, beta, exact=True)
    return san


def sharpen_subtract(cfg: SANConfig, a: float, c: float, dtype=torch.float64) -> SAN:
    """A structured candidate: head 0 of every layer has ``W_QK = a * Pi`` (sharp, near-identity attention)
    and ``W_h = -c * Pi`` (subtract the attended token), ``Pi`` the projector on the first ``min(d_qk, d_v)``
    coordinates; other heads are zero. Then ``beta_0 = a * c``, and ``X + P X W_h -> 0`` as ``P -> I``,
    c -> 1."""
    L, H, d, dqk, dv = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.dqk, cfg.dv
    WQ = torch.zeros(L, H, d, dqk, dtype=dtype)
    WK = torch.zeros_like(WQ)
    WV = torch.zeros(L, H, d, dv, dtype=dtype)
    WO = torch.zeros(L, H, dv, d, dtype=dtype)
    k = min(dqk, dv, d)
    eye = torch.eye(k, dtype=dtype)
    WQ[:, 0, :k, :k] = math.sqrt(a) * eye
    WK[:, 0, :k, :k] = math.sqrt(a) * eye
    WV[:, 0, :k, :k] = -math.sqrt(c) * eye
    WO[:, 0, :k, :k] = math.sqrt(c) * eye
    return SAN(cfg, WQ, WK, WV, WO, torch.zeros(L, d, dtype=dtype))


def clone(san: SAN) -> SAN:
    return SAN(san.cfg, *(t.detach().clone() for t in (san.WQ, san.WK, san.WV, san.WO, san.b)))


def random_search(
    cfg: SANConfig, X: Tensor, beta: float, samples: int, gen: torch.Generator
) -> tuple[float, SAN]:
    """Smallest residual ratio over ``samples`` random parameterisations on the constraint."""
    best, best_san = math.inf, None
    with torch.no_grad():
        for _ in range(samples):
            san = random_on_constraint(cfg, beta, gen, X.dtype)
            v = checked_ratio(san, X)
            if v < best:
                best, best_san = v, san
    return best, best_san


def structured_search(cfg: SANConfig, X: Tensor, beta: float, grid: int = 25) -> tuple[float, SAN]:
    """Best :func:`sharpen_subtract` candidate with ``a * c = beta`` over a log grid of ``a``."""
    best, best_san = math.inf, None
    with torch.no_grad():
        for i in range(grid):
            a = beta * 10 ** (-3 + 6 * i / (grid - 1)) if beta > 0 else 0.0
            a = max(a, 1e-12)
            c = beta / a
            san = sharpen_subtract(cfg, a, c, X.dtype)
            v = checked_ratio(san, X)
            if v < best:
                best, best_san = v, san
    return best, best_san


def on_constraint(cfg: SANConfig, theta: list[Tensor], beta: float) -> SAN:
    """The SAN whose every head is ``theta``'s head scaled onto ``beta_h = beta`` (differentiable in
    ``theta``)."""
    Q, K, V, O = theta
    bh = norm_1(Q @ K.transpose(-1, -2)) * norm_1inf(V @ O)
    t = ((beta / bh.clamp_min(1e-300)) ** 0.25)[..., None, None]
    return SAN(cfg, Q * t, K * t, V * t, O * t, torch.zeros(cfg.n_layers, cfg.d_model, dtype=Q.dtype))


def adversarial_search(start: SAN, X: Tensor, beta: float, steps: int, lr: float) -> tuple[float, SAN]:
    """Gradient descent (Adam) on ``log`` of the residual ratio, every head held on ``beta_h = beta`` by a
    scale-invariant parameterisation (``theta`` free, weights = ``theta`` scaled onto the constraint), from
    ``start``; keeps the best point. Returns (smallest ratio, its SAN)."""
    with torch.no_grad():
        bh = (
            head_betas(start).clamp_min(1e-300)[..., None, None] ** 0.25
        )  # theta normalised to beta_h(theta) = 1
        theta = [(w / bh).clone().requires_grad_(True) for w in (start.WQ, start.WK, start.WV, start.WO)]
    opt = torch.optim.Adam(theta, lr=lr)
    eps = float(torch.finfo(X.dtype).eps)
    best, best_san = math.inf, None
    for _ in range(steps + 1):
        opt.zero_grad()
        san = on_constraint(start.cfg, theta, beta)
        hs, _ = san.forward(X)
        den = norm_1inf(res(X))
        ratio = norm_1inf(res(hs[-1])) / den
        if not torch.isfinite(ratio):
            break
        v = float(ratio.detach())
        scale = eps * float(norm_1inf(hs[-1].detach())) / float(den)
        if (
            not math.isfinite(scale) or v < TRUST_DIGITS * scale
        ):  # only trusted values count (see checked_ratio)
            v = math.inf
        if v < best:
            best, best_san = v, clone(san)
        torch.log(ratio).backward()
        opt.step()
    return best, best_san


# -- a batched search: many restarts in one computation, run to a plateau ------------------------
def _batched_ratio(
    theta: list[Tensor], X: Tensor, beta: float, dqk: int, skip: bool = True
) -> tuple[Tensor, Tensor]:
    """Residual ratio of every restart of a stack of SANs without bias, with skip connections (``skip``, the
    default) or without (pure self-attention), each head scaled onto ``beta_h = beta`` (the map of
    :func:`on_constraint`, batched over the first dimension ``R``).

    ``theta`` = (Q, K, V, O) of shapes (R, L, H, d, d_qk), (R, L, H, d, d_qk), (R, L, H, d, d_v),
    (R, L, H, d_v, d). Returns (ratios (R,), ``||X_L||_{1,inf}`` (R,)), the latter for the round-off scale.
    The same arithmetic as ``SAN.forward`` with the same ``skip``: ``X <- X + sum_h softmax(X Q_h K_h^T X^T
    / sqrt(d_qk)) X V_h O_h``, without the ``X +`` when ``skip`` is False."""
    Q, K, V, O = theta
    bh = norm_1(Q @ K.transpose(-1, -2)) * norm_1inf(V @ O)  # (R, L, H)
    t = ((beta / bh.clamp_min(1e-300)) ** 0.25)[..., None, None]
    Q, K, V, O = Q * t, K * t, V * t, O * t
    R, L = Q.shape[:2]
    Y = X.expand(R, *X.shape)
    for l in range(L):
        q = torch.einsum("rnd,rhdk->rhnk", Y, Q[:, l])
        k = torch.einsum("rnd,rhdk->rhnk", Y, K[:, l])
        P = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dqk), dim=-1)
        v = torch.einsum("rnd,rhdv->rhnv", Y, V[:, l])
        mixed = torch.einsum("rhnv,rhve->rne", P @ v, O[:, l])
        Y = Y + mixed if skip else mixed
    return norm_1inf(res(Y)) / norm_1inf(res(X)), norm_1inf(Y)


def batched_adversarial_search(
    starts: list[SAN],
    X: Tensor,
    beta: float,
    steps: int,
    lr: float,
    checkpoints=(),
    stop=None,
    judged: int | None = None,
) -> tuple[list[float], SAN | None, list[float]]:
    """:func:`adversarial_search` from every start at once: the restarts are stacked into one batched
    computation (Adam is elementwise, so each restart follows its own descent); the network is the starts'
    (``starts[0].cfg``: with or without skip connections, no bias). Only trusted values count
    (see :func:`checked_ratio`); a restart that leaves the float range stops counting.

    ``checkpoints``: step counts at which the smallest trusted ratio so far over the first ``judged``
    restarts (all if None) is noted; after each, ``stop(noted_so_far)`` may return True to end the search
    there. When every restart has left the float range the descent ends early, and the checkpoints still
    ahead note the best found, which is what they would note had it run on. Returns (the smallest
    trusted ratio of each restart, the SAN of the smallest of all, checked again by ``SAN.forward``, the
    noted values)."""
    cfg = starts[0].cfg
    with torch.no_grad():
        theta = []
        for name in ("WQ", "WK", "WV", "WO"):
            ws = [
                getattr(s, name) / head_betas(s).clamp_min(1e-300)[..., None, None] ** 0.25 for s in starts
            ]
            theta.append(torch.stack(ws).requires_grad_(True))
    opt = torch.optim.Adam(theta, lr=lr)
    eps = float(torch.finfo(X.dtype).eps)
    den = float(norm_1inf(res(X)))
    R = len(starts)
    best = torch.full((R,), math.inf, dtype=torch.float64)
    best_theta = [w.detach().clone() for w in theta]
    alive = torch.ones(R, dtype=torch.bool)
    marks, noted = set(int(c) for c in checkpoints), []
    for step in range(steps + 1):
        opt.zero_grad()
        ratio, top = _batched_ratio(theta, X, beta, cfg.dqk, cfg.skip)
        with torch.no_grad():
            v = ratio.detach().to(torch.float64)
            scale = eps * top.detach().to(torch.float64) / den
            alive &= torch.isfinite(v) & torch.isfinite(scale) & (v > 0)
            trusted = alive & (v >= TRUST_DIGITS * scale)
            better = trusted & (v < best)
            best = torch.where(better, v, best)
            for b, w in zip(best_theta, theta):
                b[better] = w.detach()[better]
        if step in marks:
            noted.append(float(best[:judged].min()))
            if stop is not None and stop(noted):
                break
        if step == steps:
            break
        if not bool(alive.any()):
            # every restart is frozen (``alive`` never returns, ``best`` moves only while alive): each
            # checkpoint still ahead would note the best of now, so note it there, as running on would
            for m in sorted(c for c in marks if step < c <= steps):
                noted.append(float(best[:judged].min()))
                if stop is not None and stop(noted):
                    break
            break
        torch.log(ratio[alive]).sum().backward()
        with torch.no_grad():  # a restart out of the float range is frozen: no gradient, no step
            for w in theta:
                w.grad[~alive] = 0
                w.grad.nan_to_num_(0.0, 0.0, 0.0)
        opt.step()
    vals = [float(b) for b in best]
    i = min(range(R), key=lambda j: vals[j])
    if not math.isfinite(vals[i]):
        return vals, None, noted
    san = clone(on_constraint(cfg, [w[i].detach() for w in best_theta], beta))
    vals[i] = checked_ratio(san, X)
    return vals, san, noted


def pad_with_quiet_layers(
    san: SAN, depth: int, beta: float, gen: torch.Generator, quiet: float = 1e-2
) -> SAN:
    """``san`` extended to ``depth`` layers by heads on the constraint that barely act: random heads whose
    queries and keys are scaled by ``1/quiet`` and values and outputs by ``quiet`` (``beta_h`` unchanged),
    so their contribution ``P X W_h`` is ``quiet^2`` of a typical head's. A deeper network that starts
    near a shallower network's best point: the frontier can only fall with depth, and this start lets the
    search see it. The padding keeps ``san``'s skip connections or their absence; without skips a quiet
    layer is no longer near the identity (it maps ``X`` to ``P X W_h``, about ``quiet^2`` of it), so there
    the padded network is one more candidate on the constraint, not a shallower network's value kept."""
    c = san.cfg
    if depth <= c.n_layers:
        return clone(san)
    extra = random_on_constraint(
        SANConfig(depth - c.n_layers, c.n_heads, c.d_model, d_qk=c.dqk, d_v=c.dv, skip=c.skip, bias=False),
        beta,
        gen,
        san.WQ.dtype,
    )
    ws = []
    for name, f in (("WQ", 1 / quiet), ("WK", 1 / quiet), ("WV", quiet), ("WO", quiet)):
        ws.append(torch.cat([getattr(san, name).detach(), getattr(extra, name) * f]))
    cfg = SANConfig(depth, c.n_heads, c.d_model, d_qk=c.dqk, d_v=c.dv, skip=c.skip, bias=False)
    return SAN(cfg, *ws, torch.zeros(depth, c.d_model, dtype=san.WQ.dtype))


def search_to_plateau(
    cfg: SANConfig,
    X: Tensor,
    beta: float,
    gen_seed: int,
    restarts: int,
    steps0: int,
    levels: int,
    tol: float,
    lr: float,
    extra_starts: tuple[SAN, ...] = (),
) -> dict:
    """The adversarial search run until more effort stops paying.

    ``restarts`` random starts on the constraint (from a generator seeded with ``gen_seed``) descend
    together, with the ``extra_starts`` (hand-made candidates) beside them; effort level ``e`` = 0, 1, ...
    is reached after ``steps0 * 2^e`` steps (effort = steps x restarts, doubling at each level), where the
    smallest ratio the random restarts found so far is noted. The search has **converged** at the first
    level ``e >= 2`` whose noted best is at least ``(1 - tol)`` times that of level ``e - 2`` (four times
    the effort lowered it by less than the fraction ``tol``); it stops there, or after ``levels`` levels
    (not converged). The plateau is judged on the random restarts only: a good hand-made start that the
    descent cannot improve would hold the best still and fake a plateau. Returns the per-level records
    (steps, restarts, effort, best of the random restarts), the best ratio of all starts and its SAN,
    ``converged``, and the best of the extra starts after their descent (``extra_best``, inf if none)."""
    g = torch.Generator().manual_seed(int(gen_seed))
    starts = [random_on_constraint(cfg, beta, g, X.dtype) for _ in range(restarts)] + list(extra_starts)
    marks = [steps0 * 2**e for e in range(levels)]

    def plateau(noted):
        e = len(noted) - 1
        return e >= 2 and math.isfinite(noted[e - 2]) and noted[e] >= (1 - tol) * noted[e - 2]

    vals, san, noted = batched_adversarial_search(starts, X, beta, marks[-1], lr, marks, plateau, restarts)
    levels_out = [
        {"level": e, "steps": marks[e], "restarts": restarts, "effort": marks[e] * restarts, "best": v}
        for e, v in enumerate(noted)
    ]
    return {
        "levels": levels_out,
        "best": min(vals),
        "san": san,
        "converged": plateau(noted),
        "random_best": min(vals[:restarts]),
        "extra_best": min(vals[restarts:], default=math.inf),
    }
