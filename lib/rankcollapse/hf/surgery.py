"""Model surgery on real Hugging Face transformers: the four variants of Dong et al.'s Figure 2.

The variants (the paper's names):

* ``"transformer"`` — the model unchanged.
* ``"SAN+skip"``    — the MLP sublayer removed; the attention skip kept.
* ``"SAN+MLP"``     — the attention skip removed; the MLP sublayer kept (with its own residual and
  LayerNorm).
* ``"SAN"``         — both removed: attention, output projection and the attention LayerNorm only.

Two primitives per architecture do all the work:

``remove attention skip``
    The attention sublayer of BERT, ALBERT and XLNet (post-LN) computes
    ``LN(x + Dropout(Attn(x) W_O))``. The surgery drops ``x +`` and keeps the
    LayerNorm: ``LN(Dropout(Attn(x) W_O))``, as the authors did. The attention
    itself (Q/K/V projections, biases, softmax, XLNet's relative-position and
    segment terms) is untouched.
``remove MLP``
    The feed-forward sublayer ``LN(h + FFN(h))`` is replaced *as a whole* — both
    linear maps, the activation, the residual ``h +`` and its LayerNorm — by the
    identity ``h ↦ h``. The authors did this for BERT; for ALBERT their surgery
    replaced only the two linear maps, leaving ``LN(gelu(a) + a)`` inside the
    "SAN" (an activation, a residual and a LayerNorm per layer). Here ALBERT gets
    the same treatment as BERT: the layer's output is the attention sublayer's
    output, nothing else.

Surgery never edits transformers' source and never copies weights: it binds a
replacement method on the *instance* (``module.forward = ...`` and friends), so
it is undone by deleting that attribute. :func:`apply` returns a
:class:`Patches` record whose :meth:`Patches.restore` removes every patch, and
:func:`variant` is a context manager doing both. ALBERT shares one layer across
all its depth: patching that one module changes all 12 applications of it,
which is exactly the variant (every layer loses its skip / MLP).

:data:`CUTS` says which primitives each variant applies; :data:`SURGERY` maps
``(arch, variant)`` to the function built from it (model, :class:`Patches`).
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field
from typing import Callable

from torch import nn

VARIANTS = ("SAN", "SAN+MLP", "SAN+skip", "transformer")
ARCHITECTURES = ("bert", "albert", "xlnet")


def architecture_of(model: nn.Module) -> str:
    """``"bert"``, ``"albert"`` or ``"xlnet"`` from ``model.config.model_type``."""
    t = getattr(getattr(model, "config", None), "model_type", None)
    if t not in ARCHITECTURES:
        raise ValueError(f"model type {t!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
    return t


@dataclass
class Patches:
    """Instance attributes set by surgery, so they can be removed again."""

    items: list = field(default_factory=list)  # (module, attribute name)

    def bind(self, module: nn.Module, name: str, fn: Callable) -> None:
        if name in module.__dict__:
            raise RuntimeError(f"{type(module).__name__}.{name} is already patched")
        setattr(module, name, types.MethodType(fn, module))
        self.items.append((module, name))

    def restore(self) -> None:
        for module, name in reversed(self.items):
            delattr(module, name)
        self.items.clear()


def layers_of(model: nn.Module, arch: str) -> list[nn.Module]:
    """The distinct layer modules (ALBERT: the shared layer(s), once each)."""
    if arch == "bert":
        return list(model.encoder.layer)
    if arch == "albert":
        return [lay for g in model.encoder.albert_layer_groups for lay in g.albert_layers]
    if arch == "xlnet":
        return list(model.layer)
    raise ValueError(arch)


# -- replacement methods ---------------------------------------------------------------------------------
def _identity_chunk(self, x):
    """The MLP sublayer replaced, with its residual and LayerNorm, by the identity."""
    return x


def _bert_self_output_no_skip(self, hidden_states, input_tensor):
    """BertSelfOutput without ``+ input_tensor``: ``LN(Dropout(dense(h)))``."""
    return self.LayerNorm(self.dropout(self.dense(hidden_states)))


def albert_attention_projection(att: nn.Module, hidden_states, attention_mask=None, **kwargs):
    """ALBERT's attention sublayer up to (not including) the residual add and LayerNorm.

    Returns ``(Dropout(Attn(x) W_O + b_O), attention weights)``; the unmodified
    sublayer is ``LN(x + that)`` (checked in the tests).
    """
    from transformers.models.albert import modeling_albert as ma

    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, att.attention_head_size)
    q = att.query(hidden_states).view(*hidden_shape).transpose(1, 2)
    k = att.key(hidden_states).view(*hidden_shape).transpose(1, 2)
    v = att.value(hidden_states).view(*hidden_shape).transpose(1, 2)
    interface = ma.ALL_ATTENTION_FUNCTIONS.get_interface(
        att.config._attn_implementation, ma.eager_attention_forward
    )
    out, weights = interface(
        att,
        q,
        k,
        v,
        attention_mask,
        dropout=0.0 if not att.training else att.attention_dropout.p,
        scaling=att.scaling,
        **kwargs,
    )
    out = out.reshape(*input_shape, -1).contiguous()
    return att.output_dropout(att.dense(out)), weights


def _albert_attention_no_skip(self, hidden_states, attention_mask=None, **kwargs):
    """AlbertAttention without ``hidden_states +``: ``LN(Dropout(Attn(x) W_O))``."""
    proj, weights = albert_attention_projection(self, hidden_states, attention_mask, **kwargs)
    return self.LayerNorm(proj), weights


def _albert_layer_no_mlp(self, hidden_states, attention_mask=None, **kwargs):
    """AlbertLayer whose output is the attention sublayer's: ffn, activation, ffn_output,
    the residual add and ``full_layer_layer_norm`` are all gone."""
    attention_output, _ = self.attention(hidden_states, attention_mask, **kwargs)
    return attention_output


def _xlnet_post_attention_no_skip(self, h, attn_vec, residual=True):
    """XLNet's post-attention with the residual forced off: ``LN(Dropout(attn_vec · o))``."""
    return type(self).post_attention(self, h, attn_vec, residual=False)


# -- primitives ---------------------------------------------------------------------------------------------
def bert_remove_attention_skip(model, patches: Patches) -> None:
    """Every BertSelfOutput computes ``LN(Dropout(dense(h)))`` instead of ``LN(Dropout(dense(h)) + x)``."""
    for lay in layers_of(model, "bert"):
        patches.bind(lay.attention.output, "forward", _bert_self_output_no_skip)


def bert_remove_mlp(model, patches: Patches) -> None:
    """Every BertLayer's feed-forward chunk (intermediate, output dense, residual, LayerNorm) becomes the
    identity."""
    for lay in layers_of(model, "bert"):
        patches.bind(lay, "feed_forward_chunk", _identity_chunk)


def albert_remove_attention_skip(model, patches: Patches) -> None:
    """The shared AlbertAttention computes ``LN(Dropout(Attn(x) W_O))`` (no ``x +``)."""
    for lay in layers_of(model, "albert"):
        patches.bind(lay.attention, "forward", _albert_attention_no_skip)


def albert_remove_mlp(model, patches: Patches) -> None:
    """The shared AlbertLayer returns its attention sublayer's output: the whole MLP block, its residual and
    ``full_layer_layer_norm`` removed (the authors kept ``LN(gelu(a) + a)``)."""
    for lay in layers_of(model, "albert"):
        patches.bind(lay, "forward", _albert_layer_no_mlp)


def xlnet_remove_attention_skip(model, patches: Patches) -> None:
    """Every XLNetRelativeAttention's post-attention runs with ``residual=False`` (LayerNorm kept)."""
    for lay in layers_of(model, "xlnet"):
        patches.bind(lay.rel_attn, "post_attention", _xlnet_post_attention_no_skip)


def xlnet_remove_mlp(model, patches: Patches) -> None:
    """Every XLNetLayer's ``ff_chunk`` (layer_1, activation, layer_2, residual, LayerNorm) becomes the
    identity."""
    for lay in layers_of(model, "xlnet"):
        patches.bind(lay, "ff_chunk", _identity_chunk)


_PRIMS = {
    "bert": (bert_remove_attention_skip, bert_remove_mlp),
    "albert": (albert_remove_attention_skip, albert_remove_mlp),
    "xlnet": (xlnet_remove_attention_skip, xlnet_remove_mlp),
}


# -- the variants, built from one table -----------------------------------------------------------------
# which of the two primitive cuts each variant makes (the same for every architecture)
CUTS = {
    "SAN": ("attention skip", "MLP"),
    "SAN+MLP": ("attention skip",),
    "SAN+skip": ("MLP",),
    "transformer": (),
}


def _surgery(arch: str, variant: str):
    remove_skip, remove_mlp = _PRIMS[arch]
    steps = [{"attention skip": remove_skip, "MLP": remove_mlp}[c] for c in CUTS[variant]]

    def cut(model, patches):
        for step in steps:
            step(model, patches)

    cut.__name__ = f"{arch}_{variant.lower().replace('+', '_')}"
    cut.__doc__ = f"{arch}: {' and '.join(CUTS[variant])} removed" if CUTS[variant] else f"{arch} unchanged"
    return cut


SURGERY = {(arch, v): _surgery(arch, v) for arch in ARCHITECTURES for v in VARIANTS}


def apply(model: nn.Module, name: str) -> Patches:
    """Apply variant ``name`` (one of :data:`VARIANTS`) to ``model`` in place; returns the patches to undo
    it."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; variants: {', '.join(VARIANTS)}")
    patches = Patches()
    SURGERY[(architecture_of(model), name)](model, patches)
    return patches


@contextlib.contextmanager
def variant(model: nn.Module, name: str):
    """``with variant(model, "SAN"): ...`` runs the model as that variant and restores it afterwards."""
    patches = apply(model, name)
    try:
        yield model
    finally:
        patches.restore()


def patched_attributes(model: nn.Module) -> list[str]:
    """Names of instance-level method patches currently on the model (empty when unmodified)."""
    out = []
    for mod_name, mod in model.named_modules():
        for attr in ("forward", "feed_forward_chunk", "ff_chunk", "post_attention"):
            if attr in mod.__dict__:
                out.append(f"{mod_name}.{attr}")
    return out
