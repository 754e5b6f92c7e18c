"""Self-attention networks (SANs) as in Dong, Cordonnier & Loukas (2021).

One layer with H heads maps tokens ``X`` (rows) to

    SA(X) = sum_h P_h X W_h + 1 b^T,   P_h = softmax(X W_Q,h W_K,h^T X^T / sqrt(d_qk)),
    W_h = W_V,h W_O,h,

and, with a skip connection, ``X + SA(X)``. Weights are plain tensors so that
the same object serves forward passes, path decompositions, bounds and
gradient-based searches (set ``requires_grad`` on them).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class SANConfig:
    n_layers: int
    n_heads: int
    d_model: int
    d_qk: int | None = None  # per head; default d_model // n_heads
    d_v: int | None = None  # per head; default d_model // n_heads
    skip: bool = False
    bias: bool = True
    weight_scale: float = 1.0

    @property
    def dqk(self) -> int:
        return self.d_qk or max(1, self.d_model // self.n_heads)

    @property
    def dv(self) -> int:
        return self.d_v or max(1, self.d_model // self.n_heads)

    def as_dict(self) -> dict:
        return asdict(self)


class SAN:
    """A depth-L, H-head self-attention network with explicit weight tensors.

    Shapes: ``WQ, WK`` (L, H, d, d_qk); ``WV`` (L, H, d, d_v); ``WO`` (L, H, d_v, d);
    ``b`` (L, d). Inputs ``X`` have shape (..., n, d).
    """

    def __init__(self, cfg: SANConfig, WQ: Tensor, WK: Tensor, WV: Tensor, WO: Tensor, b: Tensor):
        self.cfg, self.WQ, self.WK, self.WV, self.WO, self.b = cfg, WQ, WK, WV, WO, b

    # -- construction -----------------------------------------------------------------
    @classmethod
    def random(cls, cfg: SANConfig, seed: int, dtype=torch.float64, device="cpu") -> "SAN":
        """Gaussian weights, entries N(0, weight_scale^2 / fan_in), drawn from ``seed``."""
        g = torch.Generator(device="cpu").manual_seed(int(seed))
        L, H, d, dqk, dv, s = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.dqk, cfg.dv, cfg.weight_scale

        def draw(*shape, fan_in):
            w = torch.randn(*shape, generator=g, dtype=torch.float64) * (s / math.sqrt(fan_in))
            return w.to(dtype=dtype, device=device)

        WQ = draw(L, H, d, dqk, fan_in=d)
        WK = draw(L, H, d, dqk, fan_in=d)
        WV = draw(L, H, d, dv, fan_in=d)
        WO = draw(L, H, dv, d, fan_in=dv * H)
        b = draw(L, d, fan_in=d) if cfg.bias else torch.zeros(L, d, dtype=dtype, device=device)
        return cls(cfg, WQ, WK, WV, WO, b)

    def to(self, dtype=None, device=None) -> "SAN":
        conv = lambda t: t.to(dtype=dtype or t.dtype, device=device or t.device)  # noqa: E731
        return SAN(self.cfg, *(conv(t) for t in (self.WQ, self.WK, self.WV, self.WO, self.b)))

    @property
    def dtype(self):
        return self.WQ.dtype

    # -- the pieces of one layer --------------------------------------------------------
    def attention(self, l: int, X: Tensor) -> Tensor:
        """Row-stochastic attention matrices of layer ``l``: shape (..., H, n, n)."""
        Xh = X.unsqueeze(-3)  # (..., 1, n, d)
        Qm = Xh @ self.WQ[l]  # (..., H, n, dqk)
        Km = Xh @ self.WK[l]
        logits = Qm @ Km.transpose(-1, -2) / math.sqrt(self.cfg.dqk)
        return torch.softmax(logits, dim=-1)

    def head_maps(self, l: int) -> Tensor:
        """``W_h = W_V,h W_O,h`` for every head of layer ``l``: shape (H, d, d)."""
        return self.WV[l] @ self.WO[l]

    def mix(self, l: int, P: Tensor, Y: Tensor) -> Tensor:
        """``T_l(Y) = sum_h P_h Y W_h`` with the attention matrices ``P`` held fixed.

        Computed in the factored form ``P_h (Y W_V,h) W_O,h`` that a forward pass uses.
        ``Y`` may carry extra leading batch dimensions that ``P`` broadcasts over.
        """
        V = Y.unsqueeze(-3) @ self.WV[l]  # (..., H, n, dv)
        return ((P @ V) @ self.WO[l]).sum(dim=-3)

    def layer(self, l: int, X: Tensor) -> tuple[Tensor, Tensor]:
        """One layer: returns ``(X_l, P_l)``."""
        P = self.attention(l, X)
        Y = self.mix(l, P, X) + self.b[l]
        if self.cfg.skip:
            Y = Y + X
        return Y, P

    def forward(self, X: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """All hidden states ``[X_0 = X, X_1, ..., X_L]`` and attention matrices ``[P_1..P_L]``."""
        hs, atts = [X], []
        for l in range(self.cfg.n_layers):
            X, P = self.layer(l, X)
            hs.append(X)
            atts.append(P)
        return hs, atts

    __call__ = forward


def random_tokens(n: int, d: int, seed: int, batch: int | None = None, dtype=torch.float64, device="cpu") -> Tensor:
    """Standard Gaussian token matrix (n, d), or a batch (batch, n, d), from ``seed``."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    shape = (n, d) if batch is None else (batch, n, d)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
