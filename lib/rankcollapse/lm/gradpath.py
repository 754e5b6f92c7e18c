"""Where the gradient goes in the small LM of :mod:`rankcollapse.lm.model`: per-block gradient norms on the
attention input weights and on their query–key part, and the stable rank of weight matrices.

The attention input weight of a block is ``qkv.weight`` (``3d x d``); its rows ``[0, d)`` are the query
weights, ``[d, 2d)`` the key weights, ``[2d, 3d)`` the value weights (the layout
:meth:`rankcollapse.lm.model.Block.attention` reads). So ``|g_attn|^2 = |g_qk|^2 + |g_v|^2`` exactly.

"Numerically zero": a gradient whose norm is below ``eps_float32 * |W|`` (``W`` the same weight block) is
below what a single-precision weight can register as a relative change; it is flagged, not hidden.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import training as tr
from .model import TinyLM, matrix_srank, weight_sranks  # noqa: F401  (re-exported)

Tensor = torch.Tensor
EPS32 = float(torch.finfo(torch.float32).eps)


def block_grad_norms(
    model: TinyLM, x: Tensor, y: Tensor, term: tr.Term | None = None, alpha: float | None = None
) -> dict:
    """Per-block gradient norms (float64 sums of squares) of the task loss (cross-entropy on ``x -> y``) and,
    if given, of ``term`` (``beta *`` its raw value on the block outputs), with respect to each block's
    attention input weight (``*_attn``) and its query–key rows (``*_qk``). Also the weights' own norms
    (``w_attn``, ``w_qk``) and whether each gradient is numerically zero (``*_zero``). The model's alpha is
    set to ``alpha`` for the call if given and restored afterwards. Nothing in the model changes."""
    old = model.alpha
    if alpha is not None:
        model.alpha = float(alpha)
    try:
        d = model.cfg.d_model
        Ws = [b.qkv.weight for b in model.blocks]
        logits, hs, _ = model(x, hidden=True)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        out = {
            "loss": float(loss.detach()),
            "w_attn": [_n(W) for W in Ws],
            "w_qk": [_n(W[: 2 * d]) for W in Ws],
        }
        g = torch.autograd.grad(loss, Ws, retain_graph=term is not None)
        out["task_attn"] = [_n(gi) for gi in g]
        out["task_qk"] = [_n(gi[: 2 * d]) for gi in g]
        if term is not None:
            added = term.beta * tr.term_value(term, hs)
            gt = torch.autograd.grad(added, Ws, allow_unused=True)
            out["term_value"] = float(added.detach())
            out["term_attn"] = [0.0 if gi is None else _n(gi) for gi in gt]
            out["term_qk"] = [0.0 if gi is None else _n(gi[: 2 * d]) for gi in gt]
        for k in ("task", "term"):
            if f"{k}_attn" in out:
                out[f"{k}_attn_zero"] = numerically_zero(out[f"{k}_attn"], out["w_attn"])
                out[f"{k}_qk_zero"] = numerically_zero(out[f"{k}_qk"], out["w_qk"])
        return out
    finally:
        model.alpha = old


def numerically_zero(gnorms: list, wnorms: list) -> list:
    """``|g| < eps_float32 * |W|`` per block."""
    return [bool(g < EPS32 * w) for g, w in zip(gnorms, wnorms)]


def _n(t: Tensor) -> float:
    return float(torch.sqrt((t.detach().double() ** 2).sum()))
