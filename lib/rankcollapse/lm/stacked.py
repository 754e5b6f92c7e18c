"""Independent networks of one shape trained as one batched computation.

:class:`StackedLM` holds ``K`` :class:`~rankcollapse.lm.model.TinyLM` of one config as stacked parameters (a
leading network dimension) and runs their forwards together: one batched matmul (``baddbmm``) where each
model does one ``addmm``, attention over all networks' heads written out (two batched matmuls and a softmax,
:func:`_causal_attention`), one fused AdamW call over all networks' parameters. Each network keeps its own
data, skip scale ``alpha``, loss and gradient clipping, so a step of the stack is ``K`` independent steps. At
the repair chapters' tiny widths most of a step's time is per-operator overhead, which the stack pays once
for ``K`` networks.

Numbers: network ``k``'s result must not depend on which networks it is stacked with.
tests/test_stacked.py checks that it is bitwise the same alone (``K = 1``) and among others, in any
position. It is not bitwise the eager :class:`TinyLM` step (other kernels: ``baddbmm`` against ``addmm``, a
separate affine after the layer norm): the stacked engine is its own engine, which a run's spec must say.

The repair chapters use it when asked (``-p stack_branches True``, through :mod:`.stacked_runs`);
``bench/train_throughput.py`` measures it against the plain loop.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from .model import LMConfig, TinyLM

Tensor = torch.Tensor


def _key(name: str) -> str:
    return name.replace(".", "__")


class StackedLM(nn.Module):
    """``K`` networks of one :class:`LMConfig` with stacked parameters (``(K, *shape)`` each)."""

    def __init__(self, models: list[TinyLM]):
        super().__init__()
        if not models:
            raise ValueError("StackedLM needs at least one model")
        cfg = models[0].cfg
        if any(m.cfg != cfg for m in models):
            raise ValueError("every stacked model must have the same LMConfig")
        self.cfg: LMConfig = cfg
        self.K = len(models)
        self.names = [n for n, _ in models[0].named_parameters()]
        self.p = nn.ParameterDict(
            {
                _key(n): nn.Parameter(torch.stack([dict(m.named_parameters())[n].detach() for m in models]))
                for n in self.names
            }
        )

    def ordered(self) -> list:
        """The stacked parameters in the model's own order (``TinyLM.parameters()``; the ParameterDict
        sorts its keys)."""
        return [self.p[_key(n)] for n in self.names]

    def unstack(self, k: int) -> dict:
        """Network ``k``'s weights as a :class:`TinyLM` state dict (copies)."""
        return {n: self.p[_key(n)][k].detach().clone() for n in self.names}

    def _w(self, name: str) -> Tensor:
        return self.p[_key(name)]

    def _lin(self, x: Tensor, pre: str, bias: bool = True) -> Tensor:
        K, B, n, i = x.shape
        W = self._w(pre + ".weight")  # (K, out, in)
        x2 = x.reshape(K, B * n, i)
        if bias:
            y = torch.baddbmm(self._w(pre + ".bias").unsqueeze(1), x2, W.transpose(1, 2))
        else:
            y = torch.bmm(x2, W.transpose(1, 2))
        return y.view(K, B, n, -1)

    def _ln(self, x: Tensor, pre: str) -> Tensor:
        """LayerNorm over the last dim (eps 1e-5, torch's default, as the model's), then each network's own
        affine."""
        w, b = self._w(pre + ".weight"), self._w(pre + ".bias")
        shape = (self.K,) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        return F.layer_norm(x, x.shape[-1:]) * w.view(shape) + b.view(shape)

    def forward(self, idx: Tensor, alpha: Tensor, hidden: bool = False):
        """``idx``: (K, B, n) token ids, ``alpha``: (K,) skip scales. Logits (K, B, n, V); with ``hidden``
        also every block's output (K, B, n, d)."""
        cfg, K = self.cfg, self.K
        B, n = idx.shape[1], idx.shape[2]
        d, H = cfg.d_model, cfg.heads
        dh = d // H
        ks = torch.arange(K, device=idx.device).view(K, 1, 1)
        x = self._w("tok.weight")[ks, idx] + self._w("pos.weight")[:, None, :n]
        a = alpha.view(K, 1, 1, 1)
        hs = []
        for i in range(cfg.depth):
            pre = f"blocks.{i}"
            h = self._ln(x, pre + ".ln1")
            qkv = self._lin(h, pre + ".qkv").view(K, B, n, 3, H, dh).permute(3, 0, 1, 4, 2, 5)
            q, k_, v = qkv[0], qkv[1], qkv[2]  # (K, B, H, n, dh)
            if cfg.qk_norm:
                q = self._ln(q, pre + ".q_ln")
                k_ = self._ln(k_, pre + ".k_ln")
            y = _causal_attention(q, k_, v)
            y = y.transpose(2, 3).reshape(K, B, n, d)
            x = a * x + self._lin(y, pre + ".proj")
            x = a * x + self._lin(F.gelu(self._lin(self._ln(x, pre + ".ln2"), pre + ".fc")), pre + ".out")
            if hidden:
                hs.append(x)
        logits = self._lin(self._ln(x, "ln_f"), "head", bias=False)
        return (logits, hs) if hidden else logits

    def losses(self, idx: Tensor, tgt: Tensor, alpha: Tensor) -> Tensor:
        """Each network's mean cross-entropy on its own batch: (K,)."""
        logits = self(idx, alpha)
        ce = F.cross_entropy(logits.flatten(0, 2), tgt.flatten(), reduction="none")
        return ce.view(self.K, -1).mean(1)


def _causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal softmax attention written out, ``softmax(q k^T / sqrt(dh) + mask) v`` over (..., n, dh): at
    head size 12 and context 32, two batched matmuls and a softmax that the compiler fuses with the scale
    and the mask cost less than ``scaled_dot_product_attention``'s CPU flash kernel (measured in
    bench/train_throughput.py's stack row). Each (network, sequence, head) is its own matrix, so the result
    does not depend on the stack."""
    n, dh = q.shape[-2], q.shape[-1]
    s = (q @ k.transpose(-1, -2)) * dh**-0.5
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v


def clip_per_network(stack: StackedLM, max_norm: float) -> Tensor:
    """Clip each network's gradient to total norm ``max_norm`` as ``clip_grad_norm_`` does for one model
    (the norm of the per-parameter norms; coefficient ``max_norm / (norm + 1e-6)``, at most 1). Returns the
    pre-clip norms (K,)."""
    gs = [p.grad for p in stack.ordered() if p.grad is not None]
    per = torch.stack([g.flatten(1).norm(dim=1) for g in gs], dim=1)  # (K, params), rows contiguous
    total = per.norm(dim=1)  # a row reduction: the same summation whatever K is
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in gs:
        g.mul_(coef.view((-1,) + (1,) * (g.dim() - 1)))
    return total


class StackedAdamW:
    """AdamW over a stack in one fused call (``torch._fused_adamw_``), each network's slice of each
    parameter passed as a tensor of its own: the fused kernel vectorises per tensor, so network ``k``'s
    update is split into vector and tail exactly as for the network alone, and does not depend on the stack
    (torch's ``AdamW(fused=True)`` on the stacked tensors would vectorise across the networks' boundaries:
    a 12-element bias is the scalar tail alone and inside a vector in the stack). One learning rate and
    weight decay for the whole stack."""

    def __init__(self, stack: StackedLM, lr: float, weight_decay: float, betas=(0.9, 0.999), eps=1e-8):
        self.lr, self.wd, self.betas, self.eps = float(lr), float(weight_decay), betas, float(eps)
        self.params = stack.ordered()
        self.K = stack.K
        self.m = [torch.zeros_like(q) for q in self.params]
        self.v = [torch.zeros_like(q) for q in self.params]
        self._P = [q.detach()[k] for q in self.params for k in range(self.K)]
        self._M = [t[k] for t in self.m for k in range(self.K)]
        self._V = [t[k] for t in self.v for k in range(self.K)]
        self.steps = [torch.zeros((), dtype=torch.float32) for _ in self._P]
        # persistent contiguous gradient buffers: backward accumulates into them in place, so each
        # network's slices are made once (and a strided gradient, which the fused kernel would round
        # otherwise, never reaches it)
        for q in self.params:
            q.grad = torch.zeros_like(q, memory_format=torch.contiguous_format)
        self._grads = [q.grad for q in self.params]
        self._G = [g[k] for g in self._grads for k in range(self.K)]

    def zero_grad(self) -> None:
        for q, g in zip(self.params, self._grads):
            if q.grad is not g:  # replaced (e.g. by an assignment): back into the buffer
                if q.grad is not None:
                    g.copy_(q.grad)
                q.grad = g
        torch._foreach_zero_(self._grads)

    def set_grads(self, grads) -> None:
        """Write gradients (one per parameter, stacked) into the buffers."""
        for g, new in zip(self._grads, grads):
            g.copy_(new)

    @torch.no_grad()
    def step(self) -> None:
        for q, g in zip(self.params, self._grads):
            if q.grad is not g:
                g.copy_(q.grad)
                q.grad = g
        G = self._G
        torch._foreach_add_(self.steps, 1)
        torch._fused_adamw_(
            self._P,
            G,
            self._M,
            self._V,
            [],
            self.steps,
            amsgrad=False,
            lr=self.lr,
            beta1=self.betas[0],
            beta2=self.betas[1],
            weight_decay=self.wd,
            eps=self.eps,
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )


def make_optimizer(stack: StackedLM, lr: float, weight_decay: float) -> StackedAdamW:
    """The stack's AdamW (:class:`StackedAdamW`)."""
    return StackedAdamW(stack, lr, weight_decay)


def step(stack: StackedLM, opt, idx: Tensor, tgt: Tensor, alpha: Tensor, clip: float, fwd=None):
    """One training step of every network: returns (losses (K,), pre-clip gradient norms (K,))."""
    if fwd is None:
        losses = stack.losses(idx, tgt, alpha)
    else:
        logits = fwd(idx, alpha)
        ce = F.cross_entropy(logits.flatten(0, 2), tgt.flatten(), reduction="none")
        losses = ce.view(stack.K, -1).mean(1)
    opt.zero_grad()
    losses.sum().backward()
    norms = clip_per_network(stack, clip)
    opt.step()
    return losses.detach(), norms


# -- training several runs as one stack ---------------------------------------------------------------
STACK_SAME = (
    "model",
    "batch",
    "lr",
    "weight_decay",
    "clip",
    "probe_batch",
    "measure_every",
    "rho_every",
    "weights_every",
    "device",
    "engine",
)


def stackable(specs: list) -> str | None:
    """None when the runs can train as one stack (the fields of :data:`STACK_SAME` equal), else the first
    field that differs."""
    for f in STACK_SAME:
        if len({repr(getattr(s, f)) for s in specs}) > 1:
            return f
    return None


def opt_state_of(opt: StackedAdamW, k: int) -> dict:
    """Network ``k``'s optimiser state as a ``torch.optim.AdamW(fused=True)`` state dict, so a state trained
    in a stack continues in the eager loop (and the other way round, :func:`from_states`)."""
    n = len(opt.params)
    state = {
        i: {
            "step": opt.steps[i * opt.K + k].clone(),
            "exp_avg": opt.m[i][k].clone(),
            "exp_avg_sq": opt.v[i][k].clone(),
        }
        for i in range(n)
    }
    group = {
        "lr": opt.lr,
        "betas": tuple(opt.betas),
        "eps": opt.eps,
        "weight_decay": opt.wd,
        "amsgrad": False,
        "maximize": False,
        "foreach": None,
        "capturable": False,
        "differentiable": False,
        "fused": True,
        "decoupled_weight_decay": True,
        "params": list(range(n)),
    }
    return {"state": state, "param_groups": [group]}


def from_states(states: list) -> tuple[StackedLM, StackedAdamW]:
    """A stack (and its optimiser, with each network's AdamW moments and step) from
    :class:`~rankcollapse.lm.training.TrainState` objects."""
    S = StackedLM([st.model for st in states])
    g = states[0].opt.param_groups[0]
    opt = StackedAdamW(S, g["lr"], g["weight_decay"], g["betas"], g["eps"])
    with torch.no_grad():
        for k, st in enumerate(states):
            for i, q in enumerate(st.model.parameters()):
                s = st.opt.state.get(q)
                if s:
                    opt.m[i][k].copy_(s["exp_avg"])
                    opt.v[i][k].copy_(s["exp_avg_sq"])
                    opt.steps[i * opt.K + k].fill_(float(s["step"]))
    return S, opt


def write_back(S: StackedLM, opt: StackedAdamW, states: list) -> None:
    """Each network's weights and optimiser state from the stack into its TrainState (in place)."""
    for k, st in enumerate(states):
        st.model.load_state_dict(S.unstack(k))
        st.opt.load_state_dict(opt_state_of(opt, k))


def train_stacked(specs: list, states: list, until: int, *, log=None) -> list:
    """Train the runs ``specs[k]`` from ``states[k]`` (all at one step) to ``until`` as one stack, with what
    :func:`rankcollapse.lm.training.train` does for each: the probe measurement every ``measure_every``
    steps (last block's srank, probe loss, alpha), the weights' stable ranks every ``weights_every``, each
    run's alpha schedule and loss term (task and term gradients taken apart every ``rho_every`` steps),
    per-network clipping, the history and the step lineage. The states are updated in place.

    Network ``k``'s numbers do not depend on the others in the stack (tests/test_stacked.py); they are not
    bitwise those of the eager loop (other kernels)."""
    from . import model as lm
    from . import training as tr

    if (f := stackable(specs)) is not None:
        raise ValueError(f"runs that differ in {f!r} cannot train as one stack")
    if len({st.step for st in states}) > 1:
        raise ValueError(f"every state must be at one step to stack; got {[st.step for st in states]}")
    spec0, K = specs[0], len(specs)
    corpus = lm.corpus()
    dev = torch.device(spec0.device)
    probe = [tuple(a.to(dev) for a in corpus.probe(s.seed, s.probe_batch, s.model.ctx)) for s in specs]
    px, py = torch.stack([p[0] for p in probe]), torch.stack([p[1] for p in probe])
    S, opt = from_states(states)
    fwd = S if spec0.engine == "eager" else _compiled(S)  # the training forward; measurements stay eager
    params = S.ordered()
    lineage = [st.extra.get("lineage") for st in states]
    before = [(copy.deepcopy(st.hist), copy.deepcopy(st.extra)) for st in states]
    trained = []
    t = states[0].step
    try:
        while t <= until:
            alpha = torch.tensor([s.alpha(t) for s in specs], device=dev)
            if t % spec0.measure_every == 0:
                with torch.no_grad():
                    logits, hs = S(px, alpha, hidden=True)
                    ce = F.cross_entropy(logits.flatten(0, 2), py.flatten(), reduction="none")
                    loss_k = ce.view(K, -1).mean(1)
                    sr = tr.stable_rank(hs[-1]).mean(-1)
                for k, st in enumerate(states):
                    h = st.hist
                    h["m_step"].append(t)
                    h["srank"].append([float(sr[k])])
                    h["probe_loss"].append(float(loss_k[k]))
                    h["alpha"].append(specs[k].alpha(t))
                    if spec0.weights_every and t % spec0.weights_every == 0:
                        h["w_step"].append(t)
                        h["wsrank"].append(_weight_sranks(S, k))
            if t == until:
                break
            xs, ys = zip(*[corpus.batch(s.seed, t, s.batch, s.model.ctx) for s in specs])
            x, y = torch.stack(xs).to(dev), torch.stack(ys).to(dev)
            terms = [s.term for s in specs]
            logits, hs = fwd(x, alpha, hidden=True) if any(terms) else (fwd(x, alpha), [])
            ce = F.cross_entropy(logits.flatten(0, 2), y.flatten(), reduction="none")
            losses = ce.view(K, -1).mean(1)
            added = [
                None if tm is None else tm.beta * tr.term_value(tm, [h[k] for h in hs])
                for k, tm in enumerate(terms)
            ]
            opt.zero_grad()
            rho = any(terms) and t % spec0.rho_every == 0
            if rho:
                gt = torch.autograd.grad(losses.sum(), params, retain_graph=True)
                ga = torch.autograd.grad(sum(a for a in added if a is not None), params, allow_unused=True)
                opt.set_grads(a if b is None else a + b for a, b in zip(gt, ga))
            else:
                total = losses.sum()
                for a in added:
                    if a is not None:
                        total = total + a
                total.backward()
            gn = clip_per_network(S, spec0.clip)
            opt.step()
            for k, st in enumerate(states):
                h = st.hist
                h["loss"].append(float(losses[k].detach()))
                h["gnorm"].append(float(gn[k]))
                h["clipped"].append(float(gn[k]) > spec0.clip)
                h["term"].append(0.0 if added[k] is None else float(added[k].detach()))
                if rho and terms[k] is not None:
                    nt = _slice_norm(gt, k)
                    na = _slice_norm(ga, k)
                    h["rho_step"].append(t)
                    h["g_task"].append(nt)
                    h["g_term"].append(na)
                    h["rho"].append(na / nt if nt > 0 else float("inf"))
                if lineage[k] is not None:
                    lineage[k] = tr.lineage_step(lineage[k], specs[k], t)
                    st.extra["lineage"] = lineage[k]
                    trained.append(lineage[k])
            t += 1
            if log is not None and t % 100 == 0:
                log(f"stack of {K}: step {t}")
    except BaseException:  # interrupted: every state as it was (its history too), nothing half-written
        for st, (h, e) in zip(states, before):
            st.hist, st.extra = h, e
        raise
    finally:
        tr.log_steps(trained)
    for st in states:
        st.step = t
    write_back(S, opt, states)
    return states


def _compiled(S: StackedLM):
    """``torch.compile`` of the stack's forward (the skip scales are a tensor argument: new alphas do not
    recompile), as :func:`rankcollapse.lm.training.forward_of` compiles one model."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(S)


def _slice_norm(gs, k: int) -> float:
    """float64 norm of network ``k``'s slice of a stacked gradient list (None entries are zero)."""
    return float(torch.sqrt(sum((g[k].double() ** 2).sum() for g in gs if g is not None)))


def _weight_sranks(S: StackedLM, k: int) -> dict:
    """Network ``k``'s weight stable ranks, by :func:`rankcollapse.lm.model.block_weight_sranks` on its
    slices."""
    from .model import block_weight_sranks

    return block_weight_sranks(
        (
            tuple(S.p[_key(f"blocks.{i}.{n}.weight")][k] for n in ("qkv", "fc", "out"))
            for i in range(S.cfg.depth)
        ),
        S.cfg.d_model,
    )
