"""A small pre-LN decoder language model with a skip scale, and its byte-level corpus.

The model is the one Hofmann & Mäder collapse: pre-LN blocks with the skip
scaled by ``alpha``::

    x <- alpha * x + Attn(LN(x))
    x <- alpha * x + MLP(LN(x))

query–key normalisation (a LayerNorm over each head's query and key, so the
attention logits stay bounded and attention-entropy collapse is excluded),
learned positions, a final LayerNorm and an untied output head. ``alpha`` is a
property of the model, changed between steps by the training driver (the forward reads it from a
0-dim buffer, so a compiled forward does not recompile for a new value).

The corpus is the Python standard library's own top-level ``.py`` sources
(they ship with every Python; about 4.7 MB), read as bytes in sorted file
order; :func:`corpus` records the file list and a sha256 of the bytes. The
reference loss is the unigram (frequency-table) entropy in nats.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

Tensor = torch.Tensor


# -- data -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Corpus:
    data: Tensor  # uint8 bytes, 1-D
    files: tuple  # file names (sorted), relative to the stdlib folder
    sha256: str  # of the concatenated bytes
    files_sha256: str  # of the newline-joined file list

    @property
    def n_bytes(self) -> int:
        return int(self.data.numel())

    def unigram_loss(self) -> float:
        """Entropy (nats) of the byte frequency table: the loss of the best position-blind predictor."""
        counts = torch.bincount(self.data.long(), minlength=256).double()
        p = counts[counts > 0] / counts.sum()
        return float(-(p * p.log()).sum())

    def batch(self, seed: int, step: int, batch: int, ctx: int) -> tuple[Tensor, Tensor]:
        """The training batch of ``step``: ``batch`` windows of ``ctx + 1`` bytes at offsets drawn from a
        generator seeded by (seed, step). The data position is therefore the step counter itself, and a
        resumed run reads exactly the batches the uninterrupted run would have read."""
        g = torch.Generator().manual_seed(_mix(seed, step))
        return self._windows(torch.randint(0, self.n_bytes - ctx - 1, (batch,), generator=g), ctx)

    def probe(self, seed: int, batch: int, ctx: int) -> tuple[Tensor, Tensor]:
        """The fixed probe batch (same for every run of a seed, disjoint stream from training batches)."""
        g = torch.Generator().manual_seed(_mix(seed, -1))
        return self._windows(torch.randint(0, self.n_bytes - ctx - 1, (batch,), generator=g), ctx)

    def _windows(self, starts: Tensor, ctx: int) -> tuple[Tensor, Tensor]:
        idx = starts[:, None] + torch.arange(ctx + 1)[None, :]
        w = self.data[idx].long()
        return w[:, :-1], w[:, 1:]


def _mix(seed: int, step: int) -> int:
    """A deterministic 63-bit seed from (seed, step)."""
    h = hashlib.sha256(f"{seed}:{step}".encode()).digest()
    return int.from_bytes(h[:8], "little") & (2**63 - 1)


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """Top-level ``.py`` files of the standard library, sorted by name."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    return sorted(root.glob("*.py"), key=lambda f: f.name)


@lru_cache(maxsize=2)
def corpus(root: str | None = None) -> Corpus:
    files = stdlib_files(root)
    if not files:
        raise FileNotFoundError(
            f"no .py files in the standard library folder {root or sysconfig.get_paths()['stdlib']}"
        )
    raw = b"".join(f.read_bytes() for f in files)
    names = tuple(f.name for f in files)
    return Corpus(
        torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone(),
        names,
        hashlib.sha256(raw).hexdigest(),
        hashlib.sha256("\n".join(names).encode()).hexdigest(),
    )


# -- model ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LMConfig:
    depth: int = 12
    d_model: int = 48
    heads: int = 4
    ctx: int = 32
    vocab: int = 256
    mlp_mult: int = 4
    qk_norm: bool = True

    def asdict(self) -> dict:
        return asdict(self)


class Block(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        d, h = cfg.d_model, cfg.heads
        if d % h:
            raise ValueError(f"d_model={d} is not divisible by heads={h}")
        self.h, self.dh = h, d // h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)  # the attention input weights (query, key and value rows)
        self.proj = nn.Linear(d, d)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            self.q_ln = nn.LayerNorm(self.dh)
            self.k_ln = nn.LayerNorm(self.dh)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, cfg.mlp_mult * d)
        self.out = nn.Linear(cfg.mlp_mult * d, d)

    def attention(self, x: Tensor, need_probs: bool = False):
        B, n, d = x.shape
        q, k, v = self.qkv(x).view(B, n, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        if self.qk_norm:
            q, k = self.q_ln(q), self.k_ln(k)
        if not need_probs:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            P = None
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
            mask = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            P = s.masked_fill(~mask, float("-inf")).softmax(-1)
            y = P @ v
        return self.proj(y.transpose(1, 2).reshape(B, n, d)), P

    def forward(self, x: Tensor, alpha: float | Tensor, need_probs: bool = False):
        a, P = self.attention(self.ln1(x), need_probs)
        x = alpha * x + a
        x = alpha * x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x, P


class TinyLM(nn.Module):
    """Pre-LN decoder LM with skip scale ``alpha`` (attribute) and query–key normalisation."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        # alpha lives in a 0-dim buffer (not saved with the weights) that the forward reads, so a compiled
        # forward sees a new alpha as new data, not as a new constant to recompile for
        self.register_buffer("alpha_t", torch.tensor(1.0), persistent=False)
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.ctx, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.apply(_init)
        for b in self.blocks:  # GPT-2's scaled init of the residual-branch outputs
            for lin in (b.proj, b.out):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.depth))

    def forward(self, idx: Tensor, *, hidden: bool = False, probs: bool = False):
        """Logits; with ``hidden`` also the list of every block's output (B, n, d); with ``probs`` also the
        attention matrices of every block (B, H, n, n)."""
        n = idx.shape[1]
        x = self.tok(idx) + self.pos.weight[:n]
        hs, ps = [], []
        for b in self.blocks:
            x, P = b(x, self.alpha_t, probs)
            if hidden:
                hs.append(x)
            if probs:
                ps.append(P)
        logits = self.head(self.ln_f(x))
        if hidden or probs:
            return logits, hs, ps
        return logits

    @property
    def alpha(self) -> float:
        """The skip scale as it was set (a float; set it between steps); the forward reads ``alpha_t``."""
        return getattr(self, "_alpha", 1.0)

    @alpha.setter
    def alpha(self, value: float) -> None:
        self._alpha = float(value)
        with torch.no_grad():
            self.alpha_t.fill_(self._alpha)

    def loss(self, idx: Tensor, tgt: Tensor) -> Tensor:
        return F.cross_entropy(self(idx).flatten(0, 1), tgt.flatten())


def _init(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def build_model(cfg: LMConfig, seed: int) -> TinyLM:
    """A fresh model whose initial weights depend only on ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyLM(cfg)


def attention_entropy(probs: list[Tensor]) -> Tensor:
    """Normalised attention entropy per block: each causal row's entropy over its ``i + 1`` keys divided by
    ``log(i + 1)`` (row 0 has one key and is left out), averaged over batch, heads and rows.
    1 = uniform attention over the prefix, 0 = attention on one key."""
    out = []
    for P in probs:
        n = P.shape[-1]
        H = -(P * torch.log(P.clamp_min(1e-30))).sum(-1)  # (B, h, n)
        norm = torch.log(torch.arange(1, n + 1, dtype=P.dtype, device=P.device))
        out.append((H[..., 1:] / norm[1:]).mean())
    return torch.stack(out)


def matrix_srank(W: Tensor) -> float:
    """Stable rank ``|W|_F^2 / sigma_1^2`` of a weight matrix (not centred)."""
    s = torch.linalg.svdvals(W.detach().double().cpu())
    return float((s**2).sum() / s[0] ** 2)


def block_weight_sranks(blocks, d: int) -> dict:
    """Per block, from its ``(qkv, fc, out)`` weight matrices: stable rank of the query, key, value, MLP-in
    and MLP-out weights (``qkv`` holds the query, key and value rows, ``d`` each)."""
    out = {"query": [], "key": [], "value": [], "mlp_in": [], "mlp_out": []}
    for qkv, fc, o in blocks:
        out["query"].append(matrix_srank(qkv[:d]))
        out["key"].append(matrix_srank(qkv[d : 2 * d]))
        out["value"].append(matrix_srank(qkv[2 * d :]))
        out["mlp_in"].append(matrix_srank(fc))
        out["mlp_out"].append(matrix_srank(o))
    return out


def weight_sranks(model: TinyLM) -> dict:
    """Per block: stable rank of the query, key, value, MLP-in and MLP-out weights."""
    return block_weight_sranks(
        ((b.qkv.weight, b.fc.weight, b.out.weight) for b in model.blocks), model.cfg.d_model
    )
