"""Small BERT, ALBERT and XLNet pretrained here, offline, through the store (issue #19).

The book's Figure 2 wants trained checkpoints of three architectures; the paper's (``bert-base-cased``,
``albert-base-v2``, ``xlnet-base-cased``) cannot be downloaded at build time. This module trains scaled-down
ones itself, with transformers' own classes, on text that ships with Python, and stores them as folders
that :func:`rankcollapse.hf.models.check_checkpoint` and :func:`~rankcollapse.hf.models.load_pretrained`
accept (config, weights, and a byte tokenizer that ``AutoTokenizer`` loads).

**Text.** ``pydoc_data/topics.py`` (the language reference's topics, real English prose): topics in sorted
key order, the topic at sorted index ``i`` held out when ``i % 10 == 9`` (:data:`HELDOUT_EVERY`), the rest
the training split. Tokens are bytes (:mod:`rankcollapse.hf.bytetok`: ids 0..255 and pad, mask, cls, sep).
A training sequence is a window of ``ctx - 2`` bytes at a random offset in the training split, framed by the
architecture's special tokens (``[CLS] … [SEP]``; XLNet ``… <sep> <cls>``): exactly ``ctx`` ids.

**One recipe, three objectives** (:class:`PretrainSpec`: the same sizes, optimiser and schedule for all):

* ``bert`` -- ``BertForMaskedLM``, masked LM: 15% of the bytes of each window (exactly
  ``round(0.15 n)``) are predicted; of those 80% replaced by the mask token, 10% by a random byte, 10% kept.
* ``albert`` -- ``AlbertForMaskedLM`` (one layer shared across the depth, factorised embedding), the same
  masked LM. ALBERT's sentence-order loss is **omitted**: a window is one stretch of text, not two segments.
* ``xlnet`` -- ``XLNetLMHeadModel`` with the permutation LM objective and the paper's partial prediction
  (K = 6): a random factorisation order of each window's bytes, of which the last ``round(n / 6)`` are
  predicted, each from the bytes before it in that order (``perm_mask``, ``target_mapping``; the two-stream
  attention is transformers' own). The bytes outside the predicted set come first in the order and see each
  other; the special tokens are always visible.

AdamW (betas 0.9/0.98, weight decay on matrices only), linear warmup then linear decay to zero, gradients
clipped at norm 1. Models use ``attn_implementation="eager"``, so a loaded one returns attention matrices.

**Through the store.** :func:`pretrained` returns ``<store>/pretrain/<arch>-<key>/model``, where the key is
a hash of the spec (all fields but ``checkpoint_every``, which does not change the result), the source of
this module's import closure (:func:`rankcollapse.store.code_hash`), the sha256 of the text and the torch and
transformers versions. A second call returns the folder without training; training holds a file lock, so
two processes asking for the same spec train once. Every ``checkpoint_every`` steps a checkpoint of the
library's one format (:mod:`rankcollapse.checkpoint`: weights, optimiser, step, torch's RNG and the data
generator's state -- the data position) is written with its content hash; an interrupted run resumes from it
and ends **bit-identical** to an uninterrupted one, and a corrupt or partial checkpoint is moved aside, never
used. The finished folder is written under a temporary name and renamed into place; its ``pretrain.json``
(the spec, the held-out losses, the loss history, the sha256 of every other file) carries a content hash
beside it (``pretrain.json.sha256``), and a folder that no longer matches is moved aside and trained again.

**Evaluation.** The held-out loss of the objective (nats per predicted byte) on ``eval_seqs`` windows of the
held-out split, with the positions to predict (and the masking) drawn from a fixed seed, beside the
*unigram* loss: the cross-entropy of the training split's byte frequencies (add-one smoothed) on the same
predicted bytes. A model that learned anything beyond byte frequencies has ``heldout_loss < unigram_loss``.

The real-models chapter trains its trained panels of Figure 2 with it (``real_models.pretrain_all``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .. import checkpoint, store
from . import bytetok
from .models import _quiet  # transformers' logging and progress bars off, as for loading

ARCHITECTURES = ("bert", "albert", "xlnet")
MODEL_CLASSES = {"bert": "BertForMaskedLM", "albert": "AlbertForMaskedLM", "xlnet": "XLNetLMHeadModel"}
# bump when the recipe changes in a way that changes the weights it produces (the code hash covers the
# source; this says so in the key's own words)
PRETRAIN_VERSION = 1
HELDOUT_EVERY = 10  # topic i (sorted key order) is held out when i % HELDOUT_EVERY == HELDOUT_EVERY - 1
MASK_RATE = 0.15  # BERT/ALBERT: share of each window's bytes predicted
MASK_SPLIT = (0.8, 0.1)  # of those: replaced by the mask token, by a random byte (the rest kept)
PREDICT_K = 6  # XLNet partial prediction: 1/K of each window's bytes are the targets
EVAL_SEED = 20_240_619  # the held-out positions to predict, the same for every spec
DATA_SEED_OFFSET = 1_000_003  # the data generator's seed is seed + this (torch's global RNG gets seed)
INFO = "pretrain.json"
KEY_EXEMPT_FIELDS = ("checkpoint_every",)  # fields that do not change the trained weights


class PretrainError(ValueError):
    """A :class:`PretrainSpec` field outside what is allowed (the runner reports it as a parameter error)."""


class PretrainInterrupted(RuntimeError):
    """Raised by :func:`pretrained` when asked to stop after a step (to test resumption)."""


def _int(name: str, v, low: int = 1, high: int | None = None, what: str = "") -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise PretrainError(
            f"parameter '{name}' = {v!r} is not allowed: it must be an integer {what}".rstrip()
        )
    if v < low or (high is not None and v > high):
        rng = f">= {low}" if high is None else f"between {low} and {high}"
        raise PretrainError(f"parameter '{name}' = {v!r} is not allowed: it must be {rng} {what}".rstrip())


def _real(name: str, v, low: float, high: float | None, *, low_open: bool, high_open: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise PretrainError(f"parameter '{name}' = {v!r} is not allowed: it must be a finite number")
    v = float(v)
    bad = v <= low if low_open else v < low
    if high is not None:
        bad = bad or (v >= high if high_open else v > high)
    if bad:
        lo = f"{'>' if low_open else '>='} {low:g}"
        hi = "" if high is None else f" and {'<' if high_open else '<='} {high:g}"
        raise PretrainError(f"parameter '{name}' = {v!r} is not allowed: it must be {lo}{hi}")
    return v


@dataclass(frozen=True)
class PretrainSpec:
    """What to pretrain; every field is checked on construction (:class:`PretrainError` names the field and
    what is allowed). ``None`` fields are resolved: ``intermediate`` 4 × hidden, ``warmup`` steps // 10,
    ``embedding`` (ALBERT's factorised embedding size) min(128, hidden), and ``init_range`` (the std of the
    initial weights, transformers' ``initializer_range``) 0.02 · sqrt(768 / hidden): 0.02 at base width, and
    at a smaller width the same scale of the initial attention logits as at base width (with 0.02 at width 32
    every head starts uniform and the masked LMs sit on the unigram plateau for hundreds of steps).
    ``embedding`` must stay None for BERT and XLNet."""

    arch: str
    layers: int = 12
    hidden: int = 128
    heads: int = 4
    intermediate: int | None = None
    ctx: int = 128  # ids per sequence, special tokens included (the model's max_position_embeddings)
    batch: int = 16
    steps: int = 1000
    lr: float = 1e-3
    seed: int = 0
    checkpoint_every: int = 100
    warmup: int | None = None
    dropout: float = 0.0
    weight_decay: float = 0.01
    embedding: int | None = None
    init_range: float | None = None
    eval_seqs: int = 128

    def __post_init__(self):
        if not isinstance(self.arch, str) or self.arch not in ARCHITECTURES:
            raise PretrainError(
                f"parameter 'arch' = {self.arch!r} is not allowed: it must be one of "
                f"{', '.join(ARCHITECTURES)}"
            )
        _int("layers", self.layers, 1, 48)
        _int("hidden", self.hidden, 1, 4096)
        _int("heads", self.heads, 1, 256)
        if self.hidden % self.heads:
            raise PretrainError(
                f"parameter 'heads' = {self.heads} is not allowed: it must divide hidden = {self.hidden}"
            )
        inter = 4 * self.hidden if self.intermediate is None else self.intermediate
        _int("intermediate", inter, 1, 65536)
        _int("ctx", self.ctx, 8, 4096, "(ids per sequence, the two special tokens included)")
        _int("batch", self.batch, 1, 65536)
        _int("steps", self.steps, 1, 10**8)
        _int("checkpoint_every", self.checkpoint_every, 1, None, "(steps between checkpoints)")
        _int("seed", self.seed, 0, 2**62)
        warm = self.steps // 10 if self.warmup is None else self.warmup
        _int("warmup", warm, 0, self.steps, f"(steps of linear warmup, at most steps = {self.steps})")
        _int("eval_seqs", self.eval_seqs, 1, 65536, "(held-out windows evaluated)")
        if self.arch == "albert":
            emb = min(128, self.hidden) if self.embedding is None else self.embedding
            _int("embedding", emb, 1, 65536, "(ALBERT's embedding size)")
        elif self.embedding is not None:
            raise PretrainError(
                f"parameter 'embedding' = {self.embedding!r} is not allowed for arch {self.arch!r}: it is "
                "ALBERT's factorised embedding size and must be None for bert and xlnet"
            )
        else:
            emb = None
        lr = _real("lr", self.lr, 0.0, 1.0, low_open=True, high_open=False)
        drop = _real("dropout", self.dropout, 0.0, 1.0, low_open=False)
        wd = _real("weight_decay", self.weight_decay, 0.0, None, low_open=False)
        init = round(0.02 * math.sqrt(768 / self.hidden), 6) if self.init_range is None else self.init_range
        init = _real("init_range", init, 0.0, 10.0, low_open=True, high_open=False)
        for k, v in dict(
            intermediate=inter,
            warmup=warm,
            embedding=emb,
            lr=lr,
            dropout=drop,
            weight_decay=wd,
            init_range=init,
        ).items():
            object.__setattr__(self, k, v)

    @classmethod
    def from_dict(cls, d: dict) -> PretrainSpec:
        """A spec from a plain dict; an unknown key is a :class:`PretrainError` naming it."""
        names = [f.name for f in dataclasses.fields(cls)]
        extra = sorted(set(d) - set(names))
        if extra:
            raise PretrainError(f"unknown parameter(s) {', '.join(extra)}; allowed: {', '.join(names)}")
        if "arch" not in d:
            raise PretrainError(f"parameter 'arch' is missing: it must be one of {', '.join(ARCHITECTURES)}")
        return cls(**d)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def key_dict(self) -> dict:
        """The fields that decide the trained weights (all but :data:`KEY_EXEMPT_FIELDS`)."""
        return {k: v for k, v in self.to_dict().items() if k not in KEY_EXEMPT_FIELDS}


# -- text -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # byte ids (long) of the training split
    heldout: torch.Tensor  # byte ids of the held-out split
    sha256: str  # of the whole text (every topic in sorted key order, joined by blank lines)
    n_topics: int
    heldout_topics: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def corpus() -> Corpus:
    """The two splits of ``pydoc_data.topics`` (see the module's docstring). The text's hash is that of
    :func:`rankcollapse.hf.models.corpus` (the same topics joined the same way)."""
    from pydoc_data.topics import topics

    keys = sorted(topics)
    text = "\n\n".join(topics[k] for k in keys)
    held = [k for i, k in enumerate(keys) if i % HELDOUT_EVERY == HELDOUT_EVERY - 1]
    held_set = set(held)
    train = "\n\n".join(topics[k] for k in keys if k not in held_set)
    heldout = "\n\n".join(topics[k] for k in held)
    return Corpus(
        torch.tensor(bytetok.encode(train), dtype=torch.long),
        torch.tensor(bytetok.encode(heldout), dtype=torch.long),
        hashlib.sha256(text.encode()).hexdigest(),
        len(keys),
        tuple(held),
    )


def unigram_logprobs(c: Corpus | None = None) -> torch.Tensor:
    """log p(byte) over the 256 bytes from the training split's byte counts, add-one smoothed."""
    c = c or corpus()
    counts = torch.bincount(c.train, minlength=bytetok.N_BYTES)[: bytetok.N_BYTES].double() + 1.0
    return (counts / counts.sum()).log()


# -- batches and objectives -------------------------------------------------------------------------------
def content_len(spec: PretrainSpec) -> int:
    return spec.ctx - len(sum(bytetok.template(spec.arch), []))


def n_predicted(spec: PretrainSpec) -> int:
    """Bytes predicted per window (at least 1): round(15% of n) for the masked LMs, round(n / K) for
    XLNet."""
    n = content_len(spec)
    return max(1, round(n / PREDICT_K if spec.arch == "xlnet" else MASK_RATE * n))


def windows(ids: torch.Tensor, starts: torch.Tensor, n: int) -> torch.Tensor:
    return ids[starts[:, None] + torch.arange(n)]


def make_batch(spec: PretrainSpec, content: torch.Tensor, gen: torch.Generator) -> dict:
    """The model's inputs and targets for windows ``content`` (B, n) of bytes, with every random choice drawn
    from ``gen``: ``input_ids`` (B, ctx), ``labels`` (B, k) and, for the masked LMs, ``positions`` (B, k) in
    the framed ids; for XLNet ``perm_mask`` (B, ctx, ctx) and ``target_mapping`` (B, k, ctx)."""
    B, n = content.shape
    k = n_predicted(spec)
    order = torch.rand(B, n, generator=gen).argsort(dim=1)
    pos = order[:, :k]  # the predicted bytes (for XLNet, in their factorisation order)
    labels = content.gather(1, pos)
    if spec.arch == "xlnet":
        ids = bytetok.frame(spec.arch, content)
        L = ids.shape[1]
        rank = torch.full((B, L), -1, dtype=torch.long)
        rank.scatter_(1, pos, torch.arange(k).expand(B, k))
        target = rank >= 0
        # i may not see j when j is a target at or after i in the factorisation order (the non-targets have
        # rank -1: they come first and see each other, never a target)
        perm = (rank[:, :, None] <= rank[:, None, :]) & target[:, None, :]
        tmap = torch.nn.functional.one_hot(pos, L).float()
        return {"input_ids": ids, "labels": labels, "perm_mask": perm.float(), "target_mapping": tmap}
    u = torch.rand(B, k, generator=gen)
    rnd = torch.randint(0, bytetok.N_BYTES, (B, k), generator=gen)
    repl = torch.where(
        u < MASK_SPLIT[0],
        torch.full_like(labels, bytetok.MASK),
        torch.where(u < MASK_SPLIT[0] + MASK_SPLIT[1], rnd, labels),
    )
    inp = content.clone()
    inp.scatter_(1, pos, repl)
    off = bytetok.content_offset(spec.arch)
    return {"input_ids": bytetok.frame(spec.arch, inp), "labels": labels, "positions": pos + off}


def logits_of(model, arch: str, batch: dict) -> torch.Tensor:
    """The model's logits at the predicted bytes: (B, k, vocab)."""
    if arch == "xlnet":
        out = model(
            input_ids=batch["input_ids"],
            perm_mask=batch["perm_mask"],
            target_mapping=batch["target_mapping"],
            use_mems=False,
        )
        return out.logits
    logits = model(input_ids=batch["input_ids"]).logits
    idx = batch["positions"][:, :, None].expand(-1, -1, logits.shape[-1])
    return logits.gather(1, idx)


def objective(model, arch: str, batch: dict, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy (nats) of the objective on one batch."""
    lg = logits_of(model, arch, batch)
    return torch.nn.functional.cross_entropy(
        lg.reshape(-1, lg.shape[-1]), batch["labels"].reshape(-1), reduction=reduction
    )


# -- models -----------------------------------------------------------------------------------------------
def model_config(spec: PretrainSpec):
    """transformers' own config of the architecture at the spec's size, over the byte vocabulary."""
    from transformers import AlbertConfig, BertConfig, XLNetConfig

    ids = dict(pad_token_id=bytetok.PAD, bos_token_id=bytetok.CLS, eos_token_id=bytetok.SEP)
    if spec.arch == "bert":
        return BertConfig(
            vocab_size=bytetok.VOCAB,
            hidden_size=spec.hidden,
            num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads,
            intermediate_size=spec.intermediate,
            hidden_act="gelu",
            hidden_dropout_prob=spec.dropout,
            attention_probs_dropout_prob=spec.dropout,
            max_position_embeddings=spec.ctx,
            initializer_range=spec.init_range,
            attn_implementation="eager",
            **ids,
        )
    if spec.arch == "albert":
        return AlbertConfig(
            vocab_size=bytetok.VOCAB,
            embedding_size=spec.embedding,
            hidden_size=spec.hidden,
            num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads,
            intermediate_size=spec.intermediate,
            num_hidden_groups=1,
            inner_group_num=1,
            hidden_act="gelu_new",
            hidden_dropout_prob=spec.dropout,
            attention_probs_dropout_prob=spec.dropout,
            classifier_dropout_prob=spec.dropout,
            max_position_embeddings=spec.ctx,
            initializer_range=spec.init_range,
            attn_implementation="eager",
            **ids,
        )
    return XLNetConfig(
        vocab_size=bytetok.VOCAB,
        d_model=spec.hidden,
        n_layer=spec.layers,
        n_head=spec.heads,
        d_inner=spec.intermediate,
        ff_activation="gelu",
        dropout=spec.dropout,
        mem_len=None,
        initializer_range=spec.init_range,
        attn_implementation="eager",
        **ids,
    )


def build_model(spec: PretrainSpec):
    """A freshly initialised pretraining model (from torch's global RNG)."""
    import transformers

    _quiet()
    return getattr(transformers, MODEL_CLASSES[spec.arch])(model_config(spec))


def _optimizer(model, spec: PretrainSpec) -> torch.optim.Optimizer:
    decay = [p for _, p in model.named_parameters() if p.ndim >= 2]
    rest = [p for _, p in model.named_parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": spec.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=spec.lr, betas=(0.9, 0.98), eps=1e-6)


def lr_at(spec: PretrainSpec, step: int) -> float:
    """The learning rate of update ``step`` (0-based): linear warmup over ``warmup`` updates, then linear
    decay to zero at ``steps``."""
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    return spec.lr * (spec.steps - step) / max(1, spec.steps - spec.warmup)


# -- evaluation -------------------------------------------------------------------------------------------
def heldout_batches(spec: PretrainSpec, c: Corpus | None = None) -> list[dict]:
    """The held-out windows (evenly spaced over the held-out split) with what to predict drawn from
    :data:`EVAL_SEED`, in batches of ``spec.batch``: the same for every seed of a spec."""
    c = c or corpus()
    n = content_len(spec)
    N = c.heldout.numel()
    if N < n:
        raise PretrainError(f"parameter 'ctx' = {spec.ctx} is not allowed: the held-out split has {N} bytes")
    m = spec.eval_seqs
    starts = torch.tensor([i * (N - n) // max(m - 1, 1) for i in range(m)])
    gen = torch.Generator().manual_seed(EVAL_SEED)
    content = windows(c.heldout, starts, n)
    return [make_batch(spec, content[i : i + spec.batch], gen) for i in range(0, m, spec.batch)]


@torch.no_grad()
def evaluate(model, spec: PretrainSpec, c: Corpus | None = None) -> dict:
    """Held-out loss of the objective and the unigram loss on the same predicted bytes (nats per byte)."""
    c = c or corpus()
    was = model.training
    model.eval()
    logp = unigram_logprobs(c)
    tot = uni = 0.0
    count = 0
    for b in heldout_batches(spec, c):
        tot += float(objective(model, spec.arch, b, reduction="sum"))
        uni += float(-logp[b["labels"]].sum())
        count += b["labels"].numel()
    model.train(was)
    return {
        "heldout_loss": tot / count,
        "unigram_loss": uni / count,
        "uniform_loss": math.log(bytetok.N_BYTES),
        "predicted_bytes": count,
    }


# -- the store --------------------------------------------------------------------------------------------
def _versions() -> dict:
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def code_hash() -> str:
    """:func:`rankcollapse.store.code_hash` of this module (and what it imports from the library)."""
    return store.code_hash(__name__)


def content_key(spec: PretrainSpec) -> str:
    """16 hex digits of the sha256 of the spec (:meth:`PretrainSpec.key_dict`), :data:`PRETRAIN_VERSION`,
    the code hash, the text's sha256 and the torch and transformers versions."""
    blob = json.dumps(
        {
            "spec": spec.key_dict(),
            "version": PRETRAIN_VERSION,
            "code": code_hash(),
            "text": corpus().sha256,
            **_versions(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def state_folder(spec: PretrainSpec) -> Path:
    """``<store root>/pretrain/<arch>-<key>``: the lock, the checkpoint while training, ``model/`` after."""
    return store.states_root() / "pretrain" / f"{spec.arch}-{content_key(spec)}"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_folder(model_dir: str | Path) -> str | None:
    """None when a finished folder is whole (``pretrain.json`` matches its content hash and every file it
    lists matches its sha256), else what is wrong."""
    model_dir = Path(model_dir)
    info = model_dir / INFO
    try:
        data, _ = store.check_bytes(info)
        files = json.loads(data)["files"]
    except store.CorruptState as e:
        return f"{INFO}: {e.reason}"
    except (ValueError, KeyError, TypeError) as e:
        return f"{INFO} does not parse ({type(e).__name__})"
    for name, digest in files.items():
        f = model_dir / name
        if not f.is_file():
            return f"{name} is missing"
        if _sha(f) != digest:
            return f"{name} does not match its sha256 in {INFO}"
    return None


def read_info(model_dir: str | Path) -> dict:
    """The ``pretrain.json`` of a finished folder: spec, key, losses, history, file hashes."""
    return json.loads((Path(model_dir) / INFO).read_text())


def _write_folder(model, spec: PretrainSpec, dest: Path, info: dict) -> None:
    """Save the model, its tokenizer and ``pretrain.json`` into a temporary folder beside ``dest``, then
    rename it to ``dest`` (which must not exist)."""
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        model.save_pretrained(tmp)
        bytetok.hf_tokenizer(spec.arch).save_pretrained(tmp)
        files = {f.name: _sha(f) for f in sorted(tmp.iterdir()) if f.is_file()}
        data = json.dumps({**info, "files": files}, indent=1, sort_keys=True).encode()
        digest = hashlib.sha256(data).hexdigest()
        store.atomic_write_bytes(store.sidecar(tmp / INFO), f"{digest} {len(data)}\n".encode())
        store.atomic_write_bytes(tmp / INFO, data)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _train(spec: PretrainSpec, folder: Path, key: str, log, log_every: int, stop_after: int | None) -> None:
    name = f"pretrain {spec.arch}-{key}"
    t0, c0 = time.perf_counter(), time.process_time()
    c = corpus()
    n = content_len(spec)
    log(
        f"{name}: data {c.train.numel():,} training bytes, {c.heldout.numel():,} held-out "
        f"({len(c.heldout_topics)} of {c.n_topics} pydoc topics), windows of {n} bytes + 2 special ids"
    )
    ckpt = folder / "ckpt.pt"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = build_model(spec)
        model.train()
        opt = _optimizer(model, spec)
        gen = torch.Generator().manual_seed(spec.seed + DATA_SEED_OFFSET)
        step, losses = 0, []
        n_par = sum(p.numel() for p in model.parameters())
        log(
            f"{name}: {MODEL_CLASSES[spec.arch]}, {spec.layers} layers, hidden {spec.hidden}, "
            f"{n_par:,} parameters"
        )
        ck = checkpoint.load(ckpt, then="training from scratch", log=log)
        if ck is not None and ck["extra"].get("key") != key:
            store.quarantine(ckpt, "a checkpoint of another spec", then="training from scratch", log=log)
            ck = None
        if ck is not None:
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["opt"])
            checkpoint.restore_rng(ck, gen)
            step, losses = ck["step"], list(ck["hist"]["loss"])
            log(f"{name}: resumed from checkpoint at step {step}/{spec.steps}")
        resumed = step
        N = c.train.numel()
        while step < spec.steps:
            for g in opt.param_groups:
                g["lr"] = lr_at(spec, step)
            starts = torch.randint(0, N - n + 1, (spec.batch,), generator=gen)
            batch = make_batch(spec, windows(c.train, starts, n), gen)
            loss = objective(model, spec.arch, batch)
            if not torch.isfinite(loss):
                raise RuntimeError(
                    f"{name}: the loss is {loss.item()} at step {step + 1}; lower 'lr' (= {spec.lr:g})"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            step += 1
            saved = step % spec.checkpoint_every == 0 and step < spec.steps
            if saved:
                state = checkpoint.pack(
                    step=step,
                    model={k: v.detach().clone() for k, v in model.state_dict().items()},
                    opt=opt.state_dict(),
                    hist={"loss": losses},
                    extra={"key": key, "windows_drawn": step * spec.batch},
                    data_rng=gen.get_state(),
                    cfg=spec.to_dict(),
                )
                checkpoint.save(state, ckpt)
            if saved or step % log_every == 0 or step == spec.steps:
                recent = losses[-min(len(losses), log_every) :]
                log(
                    f"{name}: step {step}/{spec.steps} loss {sum(recent) / len(recent):.4f} "
                    f"({time.perf_counter() - t0:.1f}s{', checkpoint' if saved else ''})"
                )
            if stop_after is not None and step == stop_after and step < spec.steps:
                raise PretrainInterrupted(f"{name}: interrupted after step {step}")
    ev = evaluate(model, spec, c)
    log(
        f"{name}: held-out loss {ev['heldout_loss']:.4f} nats/byte, unigram {ev['unigram_loss']:.4f}, on "
        f"{ev['predicted_bytes']:,} predicted bytes ({time.perf_counter() - t0:.1f}s)"
    )
    info = {
        "spec": spec.to_dict(),
        "key": key,
        "model_class": MODEL_CLASSES[spec.arch],
        "objective": "permutation LM (partial prediction, K=6)" if spec.arch == "xlnet" else "masked LM",
        "code_hash": code_hash(),
        "text": {
            "source": "pydoc_data/topics.py",
            "sha256": c.sha256,
            "heldout_topics": list(c.heldout_topics),
        },
        "versions": _versions(),
        **ev,
        "train_loss_last": sum(losses[-log_every:]) / len(losses[-log_every:]),
        "losses": losses,
        "resumed_from": resumed,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
    }
    dest = folder / "model"
    _write_folder(model, spec, dest, info)
    store.remove_checked(ckpt)
    log(f"{name}: saved {dest}")


def pretrained(
    spec: PretrainSpec,
    log: Callable[[str], None] = print,
    *,
    log_every: int | None = None,
    stop_after: int | None = None,
) -> Path:
    """The folder of the model ``spec`` describes, trained now if the store does not hold it yet.

    ``log`` gets a line per stage (data, model, each ``log_every`` steps and each checkpoint with the mean
    loss and the elapsed time, the held-out evaluation, the saved folder). ``stop_after``: raise
    :class:`PretrainInterrupted` right after that step (after its checkpoint, if one falls due), to test
    resumption. Returns ``<store>/pretrain/<arch>-<key>/model``: ``config.json``, ``model.safetensors``,
    the tokenizer files and ``pretrain.json`` (see :func:`read_info`).
    """
    if not isinstance(spec, PretrainSpec):
        raise PretrainError(f"spec must be a PretrainSpec, not {type(spec).__name__}")
    if log_every is not None:
        _int("log_every", log_every, 1)
    log_every = log_every or max(1, spec.steps // 10)
    held = corpus().heldout.numel()
    if content_len(spec) > held:
        raise PretrainError(
            f"parameter 'ctx' = {spec.ctx} is not allowed: it must be at most {held + 2} (the held-out "
            f"split has {held} bytes)"
        )
    folder = state_folder(spec)
    key = folder.name.rsplit("-", 1)[1]
    dest = folder / "model"

    def done() -> bool:
        if not dest.exists():
            return False
        why = check_folder(dest)
        if why is not None:
            return False
        digest = store.check_bytes(dest / INFO)[1]
        store.note_consumed(dest / INFO, digest)
        log(f"pretrain {spec.arch}-{key}: loaded from the store ({dest})")
        return True

    if done():
        return dest
    with store.lock(folder / ".lock"):
        if done():  # trained by another process while this one waited for the lock
            return dest
        if dest.exists():
            store.quarantine(dest, check_folder(dest), then="training it again", log=log)
        _train(spec, folder, key, log, log_every, stop_after)
        digest = store.check_bytes(dest / INFO)[1]
        store.note_consumed(dest / INFO, digest)
    return dest
