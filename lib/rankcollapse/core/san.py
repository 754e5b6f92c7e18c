"""Self-attention networks (SANs) as in Dong, Cordonnier & Loukas (2021).

One layer with H heads maps tokens ``X`` (rows) to

    SA(X) = sum_h P_h X W_h + 1 b^T,   P_h = softmax(X W_Q,h W_K,h^T X^T / sqrt(d_qk)),
    W_h = W_V,h W_O,h,

and, with a skip connection, ``X + SA(X)``. It is computed as a transformer computes it, never forming
the d x d maps ``W_h``: the queries, keys and values of all heads each come from one product over
all rows (a batched GEMM over the heads sharing its input, or under autograd one GEMM with the heads'
weights side by side, d x H d_v), ``P_h`` multiplies its head's values in one batched matmul over the
heads, and one GEMM ``[P_1 V_1 | ... | P_H V_H] @ W_O`` (H d_v x d) projects the concatenated heads and
sums them (:meth:`SAN.mix`; the path recursion shares it).
Weights are plain tensors so that the same object serves forward passes, path decompositions, bounds
and gradient-based searches (set ``requires_grad`` on them).

Optional components (all off by default; the defaults reproduce the plain SAN
bit for bit, and their weights come from a separate random stream so the SAN's
own draws never change):

* an MLP after the attention sublayer (``mlp_hidden > 0``), applied token-wise,
  ``MLP(Y) = act(Y W_1 + 1 b_1^T) W_2 + 1 b_2^T``; ``mlp_scale`` multiplies
  ``W_2`` and ``b_2``, so it multiplies the MLP's Lipschitz constant exactly;
* layer normalisation (``layernorm = "post"``: ``LN(sublayer(X) [+ X])`` after
  each sublayer, as in BERT; ``"pre"``: ``sublayer(LN(X)) [+ X]``), with gain 1
  and bias 0 unless the tensors are set.

With an MLP or LN the path decomposition of Theorem 2.1 no longer holds;
:mod:`rankcollapse.core.paths` refuses such networks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

Tensor = torch.Tensor
MLP_ACTS = ("relu", "linear")
LAYERNORMS = ("none", "post", "pre")
MLP_STREAM = 0x6D6C70  # offset of the MLP weights' random stream from the SAN's seed


class SANConfigError(ValueError):
    """A :class:`SANConfig` that does not describe the network asked for (a per-head width that is not
    ``d_model / n_heads`` exactly, or below 1)."""


@dataclass(frozen=True)
class SANConfig:
    n_layers: int
    n_heads: int
    d_model: int
    d_qk: int | None = None  # per head; default d_model / n_heads (n_heads must divide d_model)
    d_v: int | None = None  # per head; default d_model / n_heads (n_heads must divide d_model)
    skip: bool = False
    bias: bool = True
    weight_scale: float = 1.0
    mlp_hidden: int = 0  # MLP width m; 0 = no MLP (a pure SAN)
    mlp_scale: float = 1.0  # multiplies W_2 and b_2: the MLP's Lipschitz constant scales with it exactly
    mlp_act: str = "relu"  # "relu" (1-Lipschitz) or "linear" (for checks with a known constant)
    layernorm: str = "none"  # "none", "post" (LN(sublayer(X) [+X])) or "pre" (sublayer(LN(X)) [+X])
    ln_eps: float = 1e-5

    def __post_init__(self):
        if self.n_heads < 1 or self.d_model < 1:
            raise SANConfigError(f"n_heads and d_model must be >= 1, not {self.n_heads} and {self.d_model}")
        for name in ("d_qk", "d_v"):
            given = getattr(self, name)
            if given is not None and given < 1:
                raise SANConfigError(f"{name} must be >= 1 (or None: d_model / n_heads), not {given}")
        default = [name for name in ("d_qk", "d_v") if getattr(self, name) is None]
        if default and self.d_model % self.n_heads:
            # the per-head width would be d_model // n_heads, rounded down (or at least 1): another network
            # than the one asked for, never substituted silently
            raise SANConfigError(
                f"d_model = {self.d_model} is not divisible by n_heads = {self.n_heads}, so "
                f"{' and '.join(default)} cannot default to d_model / n_heads; give "
                f"{' and '.join(default)} explicitly"
            )
        if self.mlp_hidden < 0:
            raise ValueError(f"mlp_hidden must be >= 0, not {self.mlp_hidden}")
        if self.mlp_act not in MLP_ACTS:
            raise ValueError(f"mlp_act must be one of {MLP_ACTS}, not {self.mlp_act!r}")
        if self.layernorm not in LAYERNORMS:
            raise ValueError(f"layernorm must be one of {LAYERNORMS}, not {self.layernorm!r}")

    @property
    def plain(self) -> bool:
        """True for a pure SAN (no MLP, no LN): the network Theorem 2.1 decomposes."""
        return self.mlp_hidden == 0 and self.layernorm == "none"

    @property
    def dqk(self) -> int:
        return self.d_qk if self.d_qk is not None else self.d_model // self.n_heads

    @property
    def dv(self) -> int:
        return self.d_v if self.d_v is not None else self.d_model // self.n_heads

    def as_dict(self) -> dict:
        return asdict(self)


class SAN:
    """A depth-L, H-head self-attention network with explicit weight tensors.

    Shapes: ``WQ, WK`` (L, H, d, d_qk); ``WV`` (L, H, d, d_v); ``WO`` (L, H, d_v, d);
    ``b`` (L, d). Inputs ``X`` have shape (..., n, d).
    Optional: MLP ``W1`` (L, d, m), ``b1`` (L, m), ``W2`` (L, m, d), ``b2`` (L, d);
    LN gains and biases ``ln1_g, ln1_b`` (attention sublayer) and ``ln2_g, ln2_b``
    (MLP sublayer), each (L, d).
    """

    EXTRA = ("W1", "b1", "W2", "b2", "ln1_g", "ln1_b", "ln2_g", "ln2_b")

    def __init__(self, cfg: SANConfig, WQ: Tensor, WK: Tensor, WV: Tensor, WO: Tensor, b: Tensor, **extra):
        self.cfg, self.WQ, self.WK, self.WV, self.WO, self.b = cfg, WQ, WK, WV, WO, b
        unknown = set(extra) - set(self.EXTRA)
        if unknown:
            raise TypeError(f"unknown SAN tensors {sorted(unknown)}")
        for k in self.EXTRA:
            setattr(self, k, extra.get(k))
        L, d = cfg.n_layers, cfg.d_model
        if cfg.mlp_hidden and any(getattr(self, k) is None for k in ("W1", "b1", "W2", "b2")):
            raise ValueError("a SAN with mlp_hidden > 0 needs W1, b1, W2, b2")
        if cfg.layernorm != "none":
            for k, fill in (("ln1_g", 1.0), ("ln1_b", 0.0), ("ln2_g", 1.0), ("ln2_b", 0.0)):
                if getattr(self, k) is None:
                    setattr(self, k, torch.full((L, d), fill, dtype=WQ.dtype, device=WQ.device))

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
        extra = {}
        if cfg.mlp_hidden:
            # a separate stream: adding an MLP never changes the attention weights of the same seed
            g2 = torch.Generator(device="cpu").manual_seed(int(seed) + MLP_STREAM)
            m, c = cfg.mlp_hidden, cfg.mlp_scale

            def draw2(*shape, var):
                w = torch.randn(*shape, generator=g2, dtype=torch.float64) * math.sqrt(var)
                return w.to(dtype=dtype, device=device)

            gain = 2.0 if cfg.mlp_act == "relu" else 1.0  # He: relu keeps the mean square
            extra["W1"] = draw2(L, d, m, var=gain / d)
            extra["W2"] = draw2(L, m, d, var=1.0 / m) * c
            if cfg.bias:
                extra["b1"] = draw2(L, m, var=1.0 / d)
                extra["b2"] = draw2(L, d, var=1.0 / m) * c
            else:
                extra["b1"] = torch.zeros(L, m, dtype=dtype, device=device)
                extra["b2"] = torch.zeros(L, d, dtype=dtype, device=device)
        return cls(cfg, WQ, WK, WV, WO, b, **extra)

    def to(self, dtype=None, device=None) -> "SAN":
        conv = lambda t: None if t is None else t.to(dtype=dtype or t.dtype, device=device or t.device)  # noqa: E731
        return SAN(
            self.cfg,
            *(conv(t) for t in (self.WQ, self.WK, self.WV, self.WO, self.b)),
            **{k: conv(getattr(self, k)) for k in self.EXTRA if getattr(self, k) is not None},
        )

    @property
    def dtype(self):
        return self.WQ.dtype

    # -- the pieces of one layer --------------------------------------------------------
    # The heads are mixed in large products, never in H small ones per matrix: the queries, keys and
    # values of all heads come from one product over all of X's rows (stacked matrices and batch entries
    # flattened together), and ``W_O`` (H, d_v, d) is, as a view, the (H d_v, d) matrix that projects the
    # concatenated heads in one GEMM, which also sums over the heads.
    @staticmethod
    def _per_head(X: Tensor, W: Tensor) -> Tensor:
        """``X W_h`` for every head in one product: (..., n, d) x (H, d, k) -> (H, rows, k).

        ``rows`` runs over all of ``X``'s rows (leading dimensions, then tokens). Without autograd
        recording it is one batched GEMM over the heads whose input is shared (broadcast with stride 0,
        not copied); under autograd it is one GEMM ``X @ [W_1 | ... | W_H]`` (d x H k), whose backward
        is two plain GEMMs where the shared input's would materialise an (H, rows, d) gradient. Both
        compute the same dot products; the concatenation copies the weights, as much memory traffic as
        the product itself at n = 32 tokens and d = 768, which the batched form avoids."""
        H, d, k = W.shape
        X2 = X.reshape(-1, d)
        if torch.is_grad_enabled() and (X.requires_grad or W.requires_grad):
            return (X2 @ W.transpose(0, 1).reshape(d, H * k)).view(-1, H, k).transpose(0, 1)
        return torch.bmm(X2.expand(H, *X2.shape), W)

    def attention(self, l: int, X: Tensor) -> Tensor:
        """Row-stochastic attention matrices of layer ``l``: shape (..., H, n, n).

        The queries (and the keys) of all heads and all of ``X``'s rows come from one product.
        """
        H, dqk = self.cfg.n_heads, self.cfg.dqk
        lead, n = X.shape[:-2], X.shape[-2]
        Qm = self._per_head(X, self.WQ[l]).view(H, *lead, n, dqk).movedim(0, -3)  # (..., H, n, dqk)
        Km = self._per_head(X, self.WK[l]).view(H, *lead, n, dqk).movedim(0, -3)
        logits = Qm @ Km.transpose(-1, -2) / math.sqrt(dqk)
        return torch.softmax(logits, dim=-1)

    def head_maps(self, l: int) -> Tensor:
        """``W_h = W_V,h W_O,h`` for every head of layer ``l``: shape (H, d, d)."""
        return self.WV[l] @ self.WO[l]

    def mix(self, l: int, P: Tensor, Y: Tensor) -> Tensor:
        """``T_l(Y) = sum_h P_h Y W_h`` with the attention matrices ``P`` held fixed.

        Computed in the factored form ``P_h (Y W_V,h) W_O,h`` that a forward pass uses, with the heads
        mixed in large products: the values ``V_h = Y W_V,h`` of all heads (and all of ``Y``'s rows) in
        one product (:meth:`_per_head`), each ``P_h`` applied to its head's values in one batched matmul
        over the heads, and the output projection on the concatenated heads,
        ``[P_1 V_1 | ... | P_H V_H] @ W_O`` with ``W_O`` viewed as (H d_v, d), in one GEMM that also sums
        over the heads.

        ``Y`` may carry extra leading batch dimensions that ``P`` broadcasts over. When ``Y`` is a stack
        ``(*stack, *batch, n, d)`` of matrices sharing ``P`` of shape ``(*batch, H, n, n)`` (as the path
        recursion pushes all components of a layer through ``T_l`` at once), the stack is laid side by side
        in the columns, so each ``P_h`` multiplies all of them in a single (n, n) x (n, stack d_v) product.
        """
        H, dv = self.cfg.n_heads, self.cfg.dv
        n, d = Y.shape[-2:]
        V = self._per_head(Y, self.WV[l])  # (H, rows, dv): the values of all heads in one product
        pb = P.shape[:-3]
        k = Y.dim() - 2 - len(pb)  # number of leading stack dimensions of Y beyond P's batch
        if k > 0 and tuple(Y.shape[k:-2]) == tuple(pb):
            stack = Y.shape[:k]
            c, nb = math.prod(stack), len(pb)
            # (H, c, *pb, n, dv) -> (*pb, H, n, c, dv): each head's values of the c matrices side by side
            V = V.view(H, c, *pb, n, dv).permute(*range(2, nb + 2), 0, nb + 2, 1, nb + 3)
            Z = P @ V.reshape(*pb, H, n, c * dv)  # (*pb, H, n, c dv)
            # back to (c, *pb, n, H, dv): the heads concatenated per token
            Z = Z.view(*pb, H, n, c, dv).permute(nb + 2, *range(nb), nb + 1, nb, nb + 3)
            Z = Z.reshape(*stack, *pb, n, H * dv)
        else:  # one matrix (or batch) per P, or P's batch not lined up with Y's: plain broadcasting
            V = V.view(H, *Y.shape[:-2], n, dv).movedim(0, -3)  # (..., H, n, dv)
            Z = (P @ V).transpose(-2, -3).flatten(-2)
        return Z @ self.WO[l].reshape(H * dv, d)  # output projection on the concatenated heads: one GEMM

    def layernorm(self, X: Tensor, g: Tensor, b: Tensor) -> Tensor:
        """Token-wise layer normalisation ``(x - mean(x)) / sqrt(var(x) + eps) * g + b`` (biased
        variance)."""
        from .layernorm import layer_norm

        return layer_norm(X, g, b, self.cfg.ln_eps)

    def mlp(self, l: int, Y: Tensor) -> Tensor:
        """The token-wise MLP of layer ``l``: ``act(Y W_1 + b_1) W_2 + b_2``."""
        Z = Y @ self.W1[l] + self.b1[l]
        if self.cfg.mlp_act == "relu":
            Z = torch.relu(Z)
        return Z @ self.W2[l] + self.b2[l]

    def sublayers(self, l: int, X: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Layer ``l`` in its parts: ``(after attention sublayer, after MLP sublayer = X_l, P_l)``.

        Without MLP the two states coincide. ``P_l`` is formed from the attention sublayer's input
        (``LN(X)`` under pre-LN).
        """
        cfg = self.cfg
        A = self.layernorm(X, self.ln1_g[l], self.ln1_b[l]) if cfg.layernorm == "pre" else X
        P = self.attention(l, A)
        Y = self.mix(l, P, A) + self.b[l]
        if cfg.skip:
            Y = Y + X
        if cfg.layernorm == "post":
            Y = self.layernorm(Y, self.ln1_g[l], self.ln1_b[l])
        if not cfg.mlp_hidden:
            return Y, Y, P
        B = self.layernorm(Y, self.ln2_g[l], self.ln2_b[l]) if cfg.layernorm == "pre" else Y
        Z = self.mlp(l, B)
        if cfg.skip:
            Z = Z + Y
        if cfg.layernorm == "post":
            Z = self.layernorm(Z, self.ln2_g[l], self.ln2_b[l])
        return Y, Z, P

    def layer(self, l: int, X: Tensor) -> tuple[Tensor, Tensor]:
        """One layer: returns ``(X_l, P_l)``."""
        if not self.cfg.plain:
            _, Z, P = self.sublayers(l, X)
            return Z, P
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


def random_tokens(
    n: int, d: int, seed: int, batch: int | None = None, dtype=torch.float64, device="cpu"
) -> Tensor:
    """Standard Gaussian token matrix (n, d), or a batch (batch, n, d), from ``seed``."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    shape = (n, d) if batch is None else (batch, n, d)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype=dtype, device=device)
