"""Where the gradient goes in the small LM of :mod:`rankcollapse.lm.model`: per-block gradient norms on the
attention input weights and on their query–key part, and the stable rank of weight matrices.

The attention input weight of a block is ``qkv.weight`` (``3d x d``); its rows ``[0, d)`` are the query
weights, ``[d, 2d)`` the key weights, ``[2d, 3d)`` the value weights (the layout
:meth:`rankcollapse.lm.model.Block.attention` reads). So ``|g_attn|^2 = |g_qk|^2 + |g_v|^2`` exactly.

"Numerically zero": a gradient whose norm is below ``eps_float32 * |W|`` (``W`` the same weight block) is
below what a single-precision weight can register as a relative change; it is flagged, not hidden.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from . import training as tr
from .model import TinyLM

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


def matrix_srank(W: Tensor) -> float:
    """Stable rank ``|W|_F^2 / sigma_1^2`` of a weight matrix (not centred)."""
    s = torch.linalg.svdvals(W.detach().double())
    return float((s**2).sum() / s[0] ** 2)


def weight_sranks(model: TinyLM) -> dict:
    """Per block: stable rank of the query, key, value, MLP-in and MLP-out weights."""
    d = model.cfg.d_model
    out = {"query": [], "key": [], "value": [], "mlp_in": [], "mlp_out": []}
    for b in model.blocks:
        W = b.qkv.weight
        out["query"].append(matrix_srank(W[:d]))
        out["key"].append(matrix_srank(W[d : 2 * d]))
        out["value"].append(matrix_srank(W[2 * d :]))
        out["mlp_in"].append(matrix_srank(b.fc.weight))
        out["mlp_out"].append(matrix_srank(b.out.weight))
    return out


def trace_weights(spec: tr.RunSpec, steps: int, every: int = 50) -> dict:
    """Train ``spec`` from its initialisation for ``steps`` steps (the same deterministic run as the cached
    driver of that spec, repeated in memory and not saved) and every ``every`` steps record, beside the last
    block's token srank and alpha, the stable rank of each weight kind (median over blocks). Returns the
    series and the token srank history of the whole run (to check it against the cached driver's)."""
    if every % spec.measure_every:
        raise ValueError(f"every = {every} must be a multiple of measure_every = {spec.measure_every}")
    out = {
        "step": [],
        "alpha": [],
        "token_srank": [],
        **{k: [] for k in ("query", "key", "value", "mlp_in", "mlp_out")},
    }

    def hook(st, m):
        if st.step % every == 0:
            out["step"].append(st.step)
            out["alpha"].append(st.model.alpha)
            out["token_srank"].append(m["srank"][-1])
            for k, v in weight_sranks(st.model).items():
                out[k].append(float(statistics.median(v)))

    st = tr.train(spec, tr.new_state(spec), steps, on_measure=hook)
    out["srank_history"] = [s[-1] for s in st.hist["srank"]]
    return out
