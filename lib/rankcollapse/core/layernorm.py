"""Layer normalisation written as matrices, and the rank of a token set before and after it.

For tokens as rows, ``X in R^{n x d}``, LayerNorm with gain ``g`` and bias ``b`` is

    LN(X) = D^{-1} X C G + 1 b^T,

* ``C = I_d - 1 1^T / d``: centring over *features*, a RIGHT multiplication (fixed matrix);
* ``D = diag(sigma_1..sigma_n)``, ``sigma_i = sqrt(var(x_i) + eps)``: per-token scaling, a LEFT
  multiplication by a diagonal matrix that depends on ``X`` (this is what makes LN nonlinear);
* ``G = diag(g)``: the feature gain, a RIGHT multiplication;
* ``1 b^T``: a rank-one shift, the same for every token.

The paper rewrites ``LN(SA(X)) = sum_h P_h X W~_h + 1 b~^T`` with ``W~_h = W_h D_LN^{-1}``, i.e. it
treats the per-token scaling as a right multiplication. :func:`paper_rewrite_error` measures what
that costs; :func:`exact_rewrite` gives the correct form, with ``D^{-1}`` on the left.

Rank measures (tolerances relative to the scale of ``X``, so a near-collapsed set is judged
against its own size): matrix rank, affine rank of the token set (``rank(res(X))``: the
dimension of the affine hull of the rows), the relative residual ``r(X)`` and the stable rank.
"""

from __future__ import annotations

import torch

from .metrics import relative_residual, res, stable_rank

Tensor = torch.Tensor
RANK_RTOL = 1e-9


def layer_norm(X: Tensor, g: Tensor | None = None, b: Tensor | None = None, eps: float = 0.0) -> Tensor:
    """The library's one layer norm, token-wise: ``(x - mean(x)) / sqrt(var(x) + eps) * g + b`` with the
    biased variance (torch's fused kernel, the one ``nn.LayerNorm`` runs). ``g``/``b`` None: the
    parameter-free LN. Each caller states its ``eps``: 0 where the theory's exact LN is meant (this
    module's factorisation :func:`ln_factors`), 1e-5 in the trained toy networks."""
    Y = torch.nn.functional.layer_norm(X, X.shape[-1:], eps=eps)
    if g is not None:
        Y = Y * g
    if b is not None:
        Y = Y + b
    return Y


def ln_factors(X: Tensor, g: Tensor | None = None, b: Tensor | None = None, eps: float = 0.0) -> dict:
    """The matrices of ``LN(X) = Dinv @ X @ C @ G + 1 b^T`` for one token matrix ``X`` (n, d)."""
    n, d = X.shape
    dt = dict(dtype=X.dtype, device=X.device)
    C = torch.eye(d, **dt) - torch.ones(d, d, **dt) / d
    XC = X @ C
    sigma = torch.sqrt((XC**2).mean(dim=-1) + eps)
    g = torch.ones(d, **dt) if g is None else g
    b = torch.zeros(d, **dt) if b is None else b
    return {
        "C": C,
        "Dinv": torch.diag(1.0 / sigma),
        "sigma": sigma,
        "G": torch.diag(g),
        "B": torch.ones(n, 1, **dt) @ b[None, :],
    }


def ln_from_factors(X: Tensor, f: dict) -> Tensor:
    return f["Dinv"] @ X @ f["C"] @ f["G"] + f["B"]


def best_right_factor_error(X: Tensor, Y: Tensor) -> float:
    """``min_R ||Y - X R||_F / ||Y||_F``: how far ``Y`` is from any right multiple of ``X`` (least
    squares)."""
    R = torch.linalg.lstsq(X, Y, driver="gelsd").solution
    return float(torch.linalg.matrix_norm(Y - X @ R) / torch.linalg.matrix_norm(Y))


def side_checks(X: Tensor, g: Tensor, b: Tensor, eps: float = 0.0) -> dict:
    """Which factor acts on which side, verified numerically on one input ``X`` (n, d).

    * ``factor_err``: the matrix form against the direct LN;
    * ``centre_is_right``: ``X - rowmean(X)`` against ``X C`` (a fixed right factor);
    * ``scale_is_left``: the per-token scaling against ``Dinv (X C)`` (a left diagonal factor);
    * ``scale_as_right``: the best right factor ``R`` with ``(X C) R ~ Dinv X C`` (0 only if one exists);
    * ``scale_as_scalar``: the error when the per-token scales are replaced by one common scale (their mean).
    """
    f = ln_factors(X, g, b, eps)
    Y = layer_norm(X, g, b, eps)
    XC = X @ f["C"]
    fro = lambda A, B: float(torch.linalg.matrix_norm(A - B) / torch.linalg.matrix_norm(B))  # noqa: E731
    scaled = (X - X.mean(-1, keepdim=True)) / torch.sqrt(
        ((X - X.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True) + eps
    )
    return {
        "factor_err": fro(ln_from_factors(X, f), Y),
        "centre_is_right": fro(XC, X - X.mean(-1, keepdim=True)),
        "scale_is_left": fro(f["Dinv"] @ XC, scaled),
        "scale_as_right": best_right_factor_error(XC, f["Dinv"] @ XC),
        "scale_as_scalar": fro(XC / f["sigma"].mean(), f["Dinv"] @ XC),
        "sigma_spread": float(f["sigma"].std() / f["sigma"].mean()),
    }


def exact_rewrite(
    P: Tensor, X: Tensor, W: Tensor, b_sa: Tensor, g: Tensor, b_ln: Tensor, eps: float = 0.0
) -> dict:
    """``LN(sum_h P_h X W_h + 1 b^T)`` in the correct matrix form and in the paper's form.

    Correct: ``sum_h (Dinv P_h) X (W_h C G) + Dinv 1 (b^T C G) + 1 b_ln^T`` -- the per-token scaling joins
    the attention matrices on the left, which then are no longer row-stochastic, and the bias term is no
    longer the same for every token.
    Paper's form: ``sum_h P_h X W~_h + 1 b~^T`` with ``W~_h = W_h C G / sigma`` for one common ``sigma``
    (the only way a per-token scaling can be a right factor); here ``sigma`` is the mean of the ``sigma_i``.
    ``P`` (H, n, n), ``W`` (H, d, d), ``b_sa``, ``g``, ``b_ln`` (d,).
    """
    Ysa = (P @ X @ W).sum(0) + b_sa
    f = ln_factors(Ysa, g, b_ln, eps)
    target = layer_norm(Ysa, g, b_ln, eps)
    C, G, Dinv = f["C"], f["G"], f["Dinv"]
    n = X.shape[0]
    one = torch.ones(n, 1, dtype=X.dtype, device=X.device)
    correct = (Dinv @ P @ X @ W @ C @ G).sum(0) + Dinv @ one @ (b_sa[None] @ C @ G) + one @ b_ln[None]
    s = f["sigma"].mean()
    paper = (P @ X @ (W @ C @ G / s)).sum(0) + one @ ((b_sa[None] @ C @ G) / s + b_ln[None])
    fro = lambda A: float(torch.linalg.matrix_norm(A - target) / torch.linalg.matrix_norm(target))  # noqa: E731
    bias_term = Dinv @ one @ (b_sa[None] @ C @ G)
    return {
        "err_correct": fro(correct),
        "err_paper": fro(paper),
        "left_row_sums": (Dinv @ P).sum(-1),  # (H, n): 1/sigma_i, not 1
        "bias_term_residual": float(
            torch.linalg.matrix_norm(res(bias_term))
            / max(float(torch.linalg.matrix_norm(bias_term)), 1e-300)
        ),
        "sigma_spread": float(f["sigma"].std() / f["sigma"].mean()),
    }


# -- rank measures ---------------------------------------------------------------------------------
def _rank(M: Tensor, scale: float) -> int:
    if scale == 0:
        return 0
    s = torch.linalg.svdvals(M)
    return int((s > RANK_RTOL * scale).sum())


def matrix_rank(X: Tensor) -> int:
    """Numerical rank, singular values below ``1e-9 * ||X||_2`` counted as zero."""
    s = torch.linalg.svdvals(X)
    return _rank(X, float(s[0]) if len(s) else 0.0)


def affine_rank(X: Tensor) -> int:
    """Dimension of the affine hull of the tokens: ``rank(X - 1 xbar^T)``, tolerance relative to
    ``||X||_2``."""
    scale = float(torch.linalg.svdvals(X)[0])
    return _rank(res(X), scale)


def measures(X: Tensor) -> dict:
    """Matrix rank, affine rank, ``r(X)`` and the stable rank of the centred tokens."""
    R = res(X)
    sr = (
        float(stable_rank(X))
        if float(torch.linalg.matrix_norm(R)) > RANK_RTOL * float(torch.linalg.matrix_norm(X))
        else 0.0
    )
    return {
        "rank": matrix_rank(X),
        "affine_rank": affine_rank(X),
        "r": float(relative_residual(X)),
        "srank": sr,
    }


# -- claims about rank under LN ------------------------------------------------------------------------
REL = 1e-9  # slack for float comparisons of r and srank

CLAIMS = {
    "rank_no_increase": (
        "matrix rank does not increase: rank LN(X) <= rank X",
        lambda a, b: b["rank"] <= a["rank"],
    ),
    "rank_no_decrease": (
        "matrix rank does not decrease: rank LN(X) >= rank X",
        lambda a, b: b["rank"] >= a["rank"],
    ),
    "affine_rank_equal": (
        "affine rank is preserved exactly (Cirrincione)",
        lambda a, b: b["affine_rank"] == a["affine_rank"],
    ),
    "affine_rank_no_increase": (
        "affine rank does not increase",
        lambda a, b: b["affine_rank"] <= a["affine_rank"],
    ),
    "affine_rank_no_decrease": (
        "affine rank does not decrease",
        lambda a, b: b["affine_rank"] >= a["affine_rank"],
    ),
    "r_no_increase": (
        "the relative residual does not increase: r(LN X) <= r(X)",
        lambda a, b: b["r"] <= a["r"] * (1 + REL) + 1e-15,
    ),
    "srank_no_increase": (
        "the stable rank does not increase: srank LN(X) <= srank X",
        lambda a, b: b["srank"] <= a["srank"] * (1 + REL) + 1e-12,
    ),
    "srank_no_decrease": (
        "the stable rank does not decrease: srank LN(X) >= srank X",
        lambda a, b: b["srank"] >= a["srank"] * (1 - REL) - 1e-12,
    ),
}


def check_claims(X: Tensor, g=None, b=None, eps: float = 0.0) -> dict:
    """Measures before and after LN and, per claim, whether it holds on this input."""
    a, bb = measures(X), measures(layer_norm(X, g, b, eps))
    return {"before": a, "after": bb, "holds": {k: bool(fn(a, bb)) for k, (_, fn) in CLAIMS.items()}}


def ln_defined(X: Tensor) -> bool:
    """With ``eps = 0`` LN needs every token to have nonzero variance over features."""
    return bool(((X - X.mean(-1, keepdim=True)).abs().amax(-1) > 0).all())


def search_counterexample(
    claim: str,
    sizes: list[tuple[int, int]],
    trials: int,
    seed: int,
    entries: int = 2,
    with_bias: bool = False,
    stats: dict | None = None,
) -> dict | None:
    """The first input (smallest size first, then draw order) on which ``claim`` fails.

    Inputs alternate between integer matrices with entries in ``[-entries, entries]`` and integer token sets
    on a line (``1 p^T + t q^T``), since low-rank inputs are where rank can change; with ``with_bias``
    the LN bias is an integer vector too (gain 1). ``eps = 0``; inputs with a constant token are skipped.
    Returns ``None`` when no counterexample is found. ``stats``, when given, receives ``tested``: the
    number of inputs on which LN was defined and the claim was checked (the counterexample included).
    """
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    _, fn = CLAIMS[claim]
    ri = lambda *s: torch.randint(-entries, entries + 1, s, generator=g).to(torch.float64)  # noqa: E731
    for n, d in sizes:
        for k in range(trials):
            if k % 2 == 0:  # a generic integer matrix
                X = ri(n, d)
            else:  # a degenerate one: tokens on a line, 1 p^T + t q^T (affine rank <= 1)
                X = torch.ones(n, 1, dtype=torch.float64) @ ri(1, d) + ri(n, 1) @ ri(1, d)
            bvec = (
                torch.randint(-entries, entries + 1, (d,), generator=g).to(torch.float64)
                if with_bias
                else None
            )
            if not ln_defined(X):
                continue
            if stats is not None:
                stats["tested"] = stats.get("tested", 0) + 1
            out = check_claims(X, None, bvec)
            if not out["holds"][claim]:
                return {
                    "n": n,
                    "d": d,
                    "X": X.tolist(),
                    "b": None if bvec is None else bvec.tolist(),
                    "LN": layer_norm(X, None, bvec).tolist(),
                    "before": out["before"],
                    "after": out["after"],
                    "rank_gap_decades": min(
                        rank_gap_decades(X), rank_gap_decades(layer_norm(X, None, bvec))
                    ),
                }
    return None


def constructed_inputs(n: int, d: int, seed: int) -> dict[str, Tensor]:
    """Deliberately built token sets where LN's nonlinearity shows (each (n, d), float64)."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    t = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)[:, None]
    p, q = rnd(1, d), rnd(1, d)
    one = torch.ones(1, d, dtype=torch.float64)
    E = rnd(n, d)
    return {
        "collinear, off the origin": p + t * q,  # affine rank 1; LN bends the line onto a sphere
        "positive multiples of one token": (2.0 + t) * p,  # affine rank 1; LN maps all to one point
        "shifts along the all-ones vector": p + 3.0 * t * one,  # affine rank 1; centring removes it
        "near-collapsed along all-ones": 5.0 * torch.ones(n, d, dtype=torch.float64) + 1e-4 * E,  # r tiny
        "near-collapsed, generic direction": torch.ones(n, 1, dtype=torch.float64) @ p + 1e-4 * E,
        "tokens of very different norms": torch.exp(2.0 * rnd(n, 1)) * rnd(n, d),
        "more tokens than features": rnd(max(n, d + 2), d),
    }


# -- C4 under an adversary: does LN change the depth at which a SAN collapses? ---------------------------
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
def rank_gap_decades(X: Tensor) -> float:
    """How clearly ``affine_rank(X)`` is determined: log10 of the ratio between the smallest singular value
    of ``res(X)`` counted as nonzero and the largest counted as zero (floored at ``1e-300``); ``inf`` when
    none is zero or none is nonzero."""
    import math

    scale = float(torch.linalg.svdvals(X)[0])
    s = torch.linalg.svdvals(res(X))
    kept, dropped = s[s > RANK_RTOL * scale], s[s <= RANK_RTOL * scale]
    if len(kept) == 0 or len(dropped) == 0:
        return math.inf
    return math.log10(float(kept.min()) / max(float(dropped.max()), 1e-300))
