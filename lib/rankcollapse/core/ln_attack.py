"""C4 under an adversary: does layer normalisation change the depth at which a SAN collapses?

The same weights with and without LN (:func:`with_layernorm`), the residual of each layer and of its LN
partner (:func:`trajectory`), the depth of collapse and its change (:func:`collapse_depth`,
:func:`compare_ln`), a construction under which LN decides the collapse both ways
(:func:`block_construction`) and a gradient search on the per-head beta budget (:func:`ln_search`). Used by
the ``layernorm`` chapter; kept apart from :mod:`rankcollapse.core.layernorm` (LN as matrices, which the toy
networks import) so that changing the attack never changes the toy networks' code key.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def with_layernorm(san, layernorm: str, eps: float | None = None):
    """The same weights under another LN placement (``"none"``, ``"post"``, ``"pre"``) and LN ``eps``
    (gain 1, bias 0)."""
    import dataclasses

    from .san import SAN

    cfg = dataclasses.replace(
        san.cfg, layernorm=layernorm, ln_eps=san.cfg.ln_eps if eps is None else float(eps)
    )
    return SAN(cfg, san.WQ, san.WK, san.WV, san.WO, san.b)


def trajectory(san, X: Tensor) -> dict:
    """Per layer ``l = 1..L`` of a SAN without MLP: ``r`` of the hidden state ``X_l`` and of its LN partner
    (post-LN: the attention sublayer's output before it is normalised; pre-LN: ``LN(X_l)``, what the next
    attention sees; no LN: ``X_l`` itself), and the smallest per-token variance over features that an LN
    divides by in that layer (``inf`` without LN). Differentiable in the weights.

    A layer counts as collapsed when either of the two residuals is below the tolerance, so the
    normalisation can never make a collapsed token set look uncollapsed: ``r`` before LN is the one a
    pre-normalisation measurement would report."""
    from .metrics import relative_residual as rr

    cfg = san.cfg
    h = X
    state, partner, minvar = [], [], []
    for l in range(cfg.n_layers):
        if cfg.layernorm == "pre":
            A = san.layernorm(h, san.ln1_g[l], san.ln1_b[l])
            v = ((h - h.mean(-1, keepdim=True)) ** 2).mean(-1).min()
            P = san.attention(l, A)
            h = san.mix(l, P, A) + san.b[l]
            part = san.layernorm(h, san.ln1_g[l], san.ln1_b[l])
        else:
            P = san.attention(l, h)
            Y = san.mix(l, P, h) + san.b[l]
            if cfg.layernorm == "post":
                v = ((Y - Y.mean(-1, keepdim=True)) ** 2).mean(-1).min()
                part, h = Y, san.layernorm(Y, san.ln1_g[l], san.ln1_b[l])
            else:
                v = torch.tensor(float("inf"), dtype=Y.dtype)
                part = h = Y
        state.append(rr(h))
        partner.append(rr(part))
        minvar.append(v)
    return {"state": torch.stack(state), "partner": torch.stack(partner), "minvar": torch.stack(minvar)}


def collapse_depth(r, tol: float) -> int:
    """The first layer ``l >= 1`` with ``r_l < tol`` (``r`` lists layers 1..L); ``L + 1``: none within the
    horizon."""
    r = [float(x) for x in r]
    return next((l + 1 for l, x in enumerate(r) if not x >= tol), len(r) + 1)


def r_min(tr: dict) -> Tensor:
    """Per layer, the smaller of the hidden state's and its LN partner's residual."""
    return torch.minimum(tr["state"], tr["partner"])


def compare_ln(san, X: Tensor, tol: float, eps_list=(1e-5, 1e-3), layernorm: str = "post") -> dict:
    """Depth of collapse of the same weights with LN (the earliest over ``eps_list``: a finding must not
    hinge on one eps) and without; ``delta`` = depth with LN minus depth without (positive: LN delays)."""
    with torch.no_grad():
        plain = trajectory(with_layernorm(san, "none"), X)
        runs = {e: trajectory(with_layernorm(san, layernorm, e), X) for e in eps_list}
    d_plain = collapse_depth(plain["state"], tol)
    d_ln = {e: collapse_depth(r_min(t), tol) for e, t in runs.items()}
    e0 = eps_list[0]
    return {
        "depth_ln": min(d_ln.values()),
        "depth_ln_per_eps": {f"{e:g}": v for e, v in d_ln.items()},
        "depth_plain": d_plain,
        "delta": min(d_ln.values()) - d_plain,
        "r_ln": [float(x) for x in runs[e0]["state"]],
        "r_ln_before": [float(x) for x in runs[e0]["partner"]],
        "r_plain": [float(x) for x in plain["state"]],
        "minvar_over_eps": float(runs[e0]["minvar"].min()) / e0,
    }


def block_construction(cfg, a: float, c: float, dtype=torch.float64):
    """Constructed weights in the spirit of Wu et al. (2024): head ``h`` owns the ``h``-th block of
    ``k = min(d_qk, d_v)`` coordinates, with ``W_QK,h = a * Pi_h`` (sharp attention that prefers the
    token itself, since after LN every token has the same norm ``sqrt d``) and ``W_VO,h = c * Pi_h``, so
    the heads together map ``X`` to ``c X`` when the attention is the identity. ``beta_h = a c``; no bias.
    LN removes the scale ``c`` again; without LN the tokens shrink (``c < 1``) or grow (``c > 1``) by ``c``
    per layer, and the attention's sharpness with them."""
    import math

    from .san import SAN

    L, H, d, dqk, dv = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.dqk, cfg.dv
    k = min(dqk, dv)
    if H * k > d:
        raise ValueError(f"block construction needs H * min(d_qk, d_v) <= d, not {H} * {k} > {d}")
    WQ = torch.zeros(L, H, d, dqk, dtype=dtype)
    WK = torch.zeros_like(WQ)
    WV = torch.zeros(L, H, d, dv, dtype=dtype)
    WO = torch.zeros(L, H, dv, d, dtype=dtype)
    eye = torch.eye(k, dtype=dtype)
    for h in range(H):
        s = h * k
        WQ[:, h, s : s + k, :k] = math.sqrt(a) * eye
        WK[:, h, s : s + k, :k] = math.sqrt(a) * eye
        WV[:, h, s : s + k, :k] = math.sqrt(c) * eye
        WO[:, h, :k, s : s + k] = math.sqrt(c) * eye
    return SAN(cfg, WQ, WK, WV, WO, torch.zeros(L, d, dtype=dtype))


def ln_search(
    cfg, X: Tensor, beta: float, steps: int, lr: float, gen: torch.Generator, objective: str
) -> tuple[dict, object]:
    """Gradient ascent (Adam) on the mean over layers of ``log(r_l + 1e-14)``, every head held on
    ``beta_h = beta`` (the parameterisation of :func:`rankcollapse.core.adversary.on_constraint`), from one
    random point on the constraint. ``objective``: ``"post"`` (r of the post-LN SAN, the smaller of before
    and after LN per layer, eps 1e-5) or ``"none"`` (the plain SAN: the best the same search finds without
    LN). Returns ``({"start": SAN, "best": objective value}, best SAN)``; the best point is kept."""
    import math

    from . import adversary as adv

    start = adv.random_on_constraint(cfg, beta, gen, X.dtype)
    with torch.no_grad():
        bh = adv.head_betas(start).clamp_min(1e-300)[..., None, None] ** 0.25
        theta = [(w / bh).clone().requires_grad_(True) for w in (start.WQ, start.WK, start.WV, start.WO)]
    opt = torch.optim.Adam(theta, lr=lr)
    best, best_san = -math.inf, adv.clone(start)
    for _ in range(steps + 1):
        opt.zero_grad()
        san = with_layernorm(adv.on_constraint(cfg, theta, beta), objective, 1e-5)
        tr = trajectory(san, X)
        f = torch.log(r_min(tr) + 1e-14).mean()
        if not torch.isfinite(f):
            break
        if float(f.detach()) > best:
            best, best_san = float(f.detach()), adv.clone(san)
        (-f).backward()
        opt.step()
    return {"start": start, "best": best}, best_san


# -- LN2: how clearly an affine rank is determined ------------------------------------------------------
