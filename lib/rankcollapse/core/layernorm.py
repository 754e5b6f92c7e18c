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
