"""Trainable toy networks built around :class:`~rankcollapse.core.san.SAN`, and their path-restricted
outputs.

A :class:`ToyNet` is ``input map -> SAN -> [MLP] -> [final LayerNorm] -> linear readout``:

* the input map is a token embedding table (``vocab``) or a linear map from
  ``d_in`` features, plus optional learned positions (``n_pos``);
* the SAN is the library's :class:`~rankcollapse.core.san.SAN` (weights are plain
  tensors held in the same parameter dict), with or without skips;
* an optional MLP (``d -> d -> d``, GELU, no skip) follows the SAN -- used only
  by the one-layer circle models;
* an optional final LayerNorm renormalises the residual stream before the
  readout. For the path-effectiveness models it is what makes "keep only some
  paths" meaningful: the readout sees the truncated stream at the scale it was
  trained on (the authors' fresh LayerNorm on a sum of sampled paths is its
  parameter-free part).

Two ways to evaluate a trained network with only some of its paths:

* :func:`path_restricted_logits` -- **exact**: with the attention matrices of
  the actual forward pass held fixed, the SAN output is split by path length
  with :func:`~rankcollapse.core.paths.length_components`; the readout is applied to
  ``sum_{k<=l} S^(k) + 1c^T`` for every ``l`` (and to ``S^(l) + 1c^T`` alone);
* :func:`sampled_path_logits` -- **the authors' method** (Dong et al.'s public
  code): draw a few random paths of exactly length ``l``, run the network along
  each path (one head in each chosen layer, the others skipped, attention
  *recomputed* from the path's own hidden state, the layer bias added), sum the
  sampled outputs and renormalise with a fresh LayerNorm before the readout.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ..core.layernorm import layer_norm as _layer_norm
from ..core.ln_paths import forward_scales, length_components_ln
from ..core.paths import length_components
from ..core.san import SAN, SANConfig

Tensor = torch.Tensor
LN_EPS = 1e-5
ARCHS = ("plain", "bert")


@dataclass(frozen=True)
class ToyNetConfig:
    n_layers: int
    n_heads: int
    d_model: int
    d_out: int
    skip: bool = True
    vocab: int | None = None  # token ids in [0, vocab) -> embedding table
    d_in: int | None = None  # or real features of this width -> linear map
    n_pos: int = 0  # learned positions (0: none, the network is permutation-equivariant)
    mlp: bool = False
    final_ln: bool = True
    weight_scale: float = 1.0
    arch: str = "plain"  # "plain": the LN-free SAN; "bert": the authors' (input LN, post-LN layers)

    def __post_init__(self):
        if (self.vocab is None) == (self.d_in is None):
            raise ValueError("give exactly one of vocab (token ids) or d_in (real features)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, not {self.arch!r}")
        if self.arch == "bert" and self.final_ln:
            raise ValueError("arch='bert' ends in its last layer's LayerNorm: final_ln must be False")

    def san_config(self) -> SANConfig:
        return SANConfig(
            self.n_layers,
            self.n_heads,
            self.d_model,
            skip=self.skip,
            bias=True,
            weight_scale=self.weight_scale,
            layernorm="post" if self.arch == "bert" else "none",
        )

    def as_dict(self) -> dict:
        return asdict(self)


def init_params(cfg: ToyNetConfig, seed: int, dtype=torch.float32) -> dict[str, Tensor]:
    """Initial weights from ``seed``: the SAN's from :meth:`SAN.random` (bias zeroed), the rest
    Gaussian/fan-in."""
    san = SAN.random(cfg.san_config(), seed, dtype=dtype)
    g = torch.Generator().manual_seed(int(seed) + 7919)
    d = cfg.d_model

    def draw(*shape, fan_in, scale=1.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * (scale / math.sqrt(fan_in))).to(
            dtype
        )

    p = {"WQ": san.WQ, "WK": san.WK, "WV": san.WV, "WO": san.WO, "b": torch.zeros_like(san.b)}
    if cfg.vocab is not None:
        p["emb"] = draw(cfg.vocab, d, fan_in=1)
    else:
        p["W_in"] = draw(cfg.d_in, d, fan_in=cfg.d_in)
        p["b_in"] = torch.zeros(d, dtype=dtype)
    if cfg.n_pos:
        p["pos"] = draw(cfg.n_pos, d, fan_in=1)
    if cfg.mlp:
        p["W1"], p["b1"] = draw(d, d, fan_in=d), torch.zeros(d, dtype=dtype)
        p["W2"], p["b2"] = draw(d, d, fan_in=d), torch.zeros(d, dtype=dtype)
    if cfg.arch == "bert":
        L = cfg.n_layers
        p["lnin_g"], p["lnin_b"] = torch.ones(d, dtype=dtype), torch.zeros(d, dtype=dtype)
        p["ln1_g"], p["ln1_b"] = torch.ones(L, d, dtype=dtype), torch.zeros(L, d, dtype=dtype)
        if cfg.mlp:
            p["ln2_g"], p["ln2_b"] = torch.ones(d, dtype=dtype), torch.zeros(d, dtype=dtype)
    if cfg.final_ln:
        p["ln_g"], p["ln_b"] = torch.ones(d, dtype=dtype), torch.zeros(d, dtype=dtype)
    p["W_out"] = draw(d, cfg.d_out, fan_in=d)
    p["b_out"] = torch.zeros(cfg.d_out, dtype=dtype)
    return {k: v.contiguous() for k, v in p.items()}


class BatchedSAN(SAN):
    """The library's SAN under the name the toy networks use for it.

    It once overrode :meth:`SAN.attention` and :meth:`SAN.mix`, whose products
    ``X.unsqueeze(-3) @ W`` then broadcast the weights over the batch and materialised one copy of
    every weight per example (about five times slower at training batch sizes), with one matrix
    product over all tokens and heads of the batch. :class:`SAN` now computes its heads that way
    itself (under autograd the very same GEMMs), so nothing is left to override: same maps, layer,
    forward and path code (``tests/test_toynets.py`` checks it against :class:`SAN`).
    """


def san_of(cfg: ToyNetConfig, p: dict) -> SAN:
    extra = {"ln1_g": p["ln1_g"], "ln1_b": p["ln1_b"]} if cfg.arch == "bert" else {}
    return BatchedSAN(cfg.san_config(), p["WQ"], p["WK"], p["WV"], p["WO"], p["b"], **extra)


def embed(cfg: ToyNetConfig, p: dict, inp: Tensor) -> Tensor:
    """Token ids (B, n) or features (B, n, d_in) -> X (B, n, d): the SAN's input (for ``arch='bert'``
    after the input LayerNorm)."""
    X = p["emb"][inp] if cfg.vocab is not None else inp @ p["W_in"] + p["b_in"]
    if cfg.n_pos:
        X = X + p["pos"][: X.shape[-2]]
    if cfg.arch == "bert":
        X = layer_norm(X, p["lnin_g"], p["lnin_b"])
    return X


def layer_norm(Y: Tensor, g: Tensor | None = None, b: Tensor | None = None) -> Tensor:
    """LayerNorm over features (the library's one, :func:`rankcollapse.core.layernorm.layer_norm`, with
    ``eps`` = :data:`LN_EPS`); without ``g, b`` the parameter-free ("fresh") one."""
    return _layer_norm(Y, g, b, LN_EPS)


def head(cfg: ToyNetConfig, p: dict, Y: Tensor) -> Tensor:
    """What follows the SAN: [MLP] -> [final LayerNorm] -> readout. For ``arch='bert'`` the MLP is BERT's
    block, ``LN(Y + MLP(Y))``."""
    if cfg.mlp:
        M = torch.nn.functional.gelu(Y @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
        Y = layer_norm(Y + M, p["ln2_g"], p["ln2_b"]) if cfg.arch == "bert" else M
    if cfg.final_ln:
        Y = layer_norm(Y, p["ln_g"], p["ln_b"])
    return Y @ p["W_out"] + p["b_out"]


def forward(cfg: ToyNetConfig, p: dict, inp: Tensor) -> Tensor:
    """Output (B, n, d_out) of the full network."""
    X = embed(cfg, p, inp)
    hs, _ = san_of(cfg, p).forward(X)
    return head(cfg, p, hs[-1])


@torch.no_grad()
def path_restricted_logits(cfg: ToyNetConfig, p: dict, inp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Exact: ``(upto, only, full)`` with ``upto[l]`` = readout of paths of length <= l,
    ``only[l]`` = readout of the length-l paths alone (each plus the bias term), ``full`` = the network.

    Shapes (L+1, B, n, d_out), (L+1, B, n, d_out), (B, n, d_out). ``upto[L]`` equals ``full`` up to
    round-off.
    """
    san = san_of(cfg, p)
    X = embed(cfg, p, inp)
    if cfg.arch == "bert":  # attention and per-token LayerNorm scales of the forward pass held fixed
        hs, atts, sig = forward_scales(san, X)
        split = length_components_ln(san, X, atts, sig)
    else:
        hs, atts = san.forward(X)
        split = length_components(san, X, atts)
    upto = torch.cumsum(split.components, dim=0) + split.bias
    only = split.components + split.bias
    return head(cfg, p, upto), head(cfg, p, only), head(cfg, p, hs[-1])


def sample_paths(L: int, H: int, length: int, n_paths: int, gen: torch.Generator) -> list[list[int]]:
    """``n_paths`` random paths of exactly ``length`` layers: per layer a head in 1..H, or 0 = skipped."""
    out = []
    for _ in range(n_paths):
        layers = torch.randperm(L, generator=gen)[:length].tolist()
        heads = torch.randint(1, H + 1, (L,), generator=gen).tolist()
        out.append([heads[l] if l in layers else 0 for l in range(L)])
    return out


@torch.no_grad()
def path_output(san: SAN, X: Tensor, path: list[int]) -> Tensor:
    """One path run the authors' way: ``Z <- P_{l,h}(Z) Z W_{l,h} + b_l`` in each chosen layer,
    with the attention recomputed from ``Z`` itself; skipped layers pass ``Z`` through. In a post-LN SAN
    (``arch='bert'``) a chosen layer is, as in the authors' code, the layer's own LayerNorm of that one
    head's output plus the layer's input, ``Z <- LN_l(Z + P_{l,h}(Z) Z W_{l,h} + b_l)``."""
    Z = X
    post = san.cfg.layernorm == "post"
    for l, h in enumerate(path):
        if h == 0:
            continue
        P = san.attention(l, Z)[..., h - 1, :, :]
        Y = P @ (Z @ san.WV[l, h - 1]) @ san.WO[l, h - 1] + san.b[l]
        Z = layer_norm(Z + Y, san.ln1_g[l], san.ln1_b[l]) if post else Y
    return Z


@torch.no_grad()
def sampled_path_logits(
    cfg: ToyNetConfig, p: dict, inp: Tensor, length: int, n_paths: int, gen: torch.Generator
) -> Tensor:
    """The authors' estimate for one path length: sum of ``n_paths`` sampled paths of that length,
    renormalised by a fresh LayerNorm, then the network's own affine + readout. Shape (B, n, d_out)."""
    san = san_of(cfg, p)
    X = embed(cfg, p, inp)
    S = sum(
        path_output(san, X, path) for path in sample_paths(cfg.n_layers, cfg.n_heads, length, n_paths, gen)
    )
    # the network's final LayerNorm *is* a fresh LayerNorm followed by its learned affine map; without
    # one, a parameter-free LayerNorm is applied before the readout
    return head(cfg, p, S if cfg.final_ln else layer_norm(S))
