"""The trained networks of chapter `toy-tasks`: what decides their weights, and nothing else. The circle
models of Figure 3 (:func:`circle_config`, :func:`circle_step`, :func:`train_circle`) and the SANs of
Figure 4 (:func:`task_config`, :func:`task_data`, :func:`ce_loss`, :func:`train_task`), trained by
:mod:`rankcollapse.toy.training` under a key that names this module (``code_modules``).

The chapter's experiments, rules and verdicts live in :mod:`rankcollapse.chapters.toy_tasks`; since this
module imports none of them, editing a rule or a record never changes a stored network's key (moved here
from the chapter's ``experiments.py`` unchanged, #41).
"""

from __future__ import annotations

import torch

from . import nets as tn
from . import tasks as tt
from .training import cached_train

TASK_NAMES = {"sort": "sort", "hull": "convex hull", "mem": "memorisation"}
RADIUS = 0.3


# =====================================================================================================
# circle (Figure 3)
# =====================================================================================================
def circle_config(h: int, variant: str, arch: str = "bert") -> tn.ToyNetConfig:
    """One attention layer of 2 heads on 2-D points, no positions. ``arch='bert'`` is the authors': the
    input map followed by a LayerNorm, BERT's attention layer (output projection and a post-LayerNorm
    residual in the hidden space), with ``mlp`` BERT's feed-forward block after it; ``'plain'`` is the
    bare layer (no LayerNorm, no residual inside). The ``skip`` variant adds the skip in the points' own
    space, ``x <- x + f(x)``."""
    return tn.ToyNetConfig(
        1, 2, h, 2, skip=(arch == "bert"), d_in=2, n_pos=0, mlp=(variant == "mlp"), final_ln=False, arch=arch
    )


def circle_step(cfg, p, X, variant):
    """One step of the learned dynamics: ``f(X)``, or ``X + f(X)`` for the skip variant."""
    out = tn.forward(cfg, p, X)
    return X + out if variant == "skip" else out


def train_circle(h, variant, arch, steps, lr, n, seed, cache, log):
    cfg = circle_config(h, variant, arch)
    X, Y = tt.circle_dataset(n, RADIUS)

    def loss(p, batch):
        return torch.mean((circle_step(cfg, p, X, variant) - Y) ** 2)

    spec = {
        "task": "circle",
        "name": f"circle {arch} h={h} {variant} seed {seed}",
        "cfg": cfg.as_dict(),
        "n": n,
        "radius": RADIUS,
    }
    r = cached_train(
        spec,
        lambda: tn.init_params(cfg, seed),
        loss,
        lambda g, s: None,
        steps,
        lr=lr,
        seed=seed,
        log=log,
        cache_dir=cache,
        log_every=steps,
        clip=None,
        code_modules=(__name__,),
    )
    return cfg, r


# =====================================================================================================
# path effectiveness (Figure 4)
# =====================================================================================================
def task_config(task, p, arch: str = "bert") -> tn.ToyNetConfig:
    """The SAN of a task: skips, no MLP, ``p.path_layers`` layers. ``arch='bert'`` (the authors'): input
    LayerNorm and post-LN layers; ``'plain'``: no LayerNorm inside, a final one before the readout."""
    L, ws, plain = p.path_layers, p.weight_scale, arch == "plain"
    kw = dict(skip=True, weight_scale=ws, arch=arch, final_ln=plain)
    if task == "sort":
        return tn.ToyNetConfig(L, p.sort_heads, p.sort_d, 10, vocab=10, n_pos=8, **kw)
    if task == "hull":
        return tn.ToyNetConfig(L, p.hull_heads, p.hull_d, 2, d_in=2, **kw)
    return tn.ToyNetConfig(L, p.mem_heads, p.mem_d, 2, vocab=p.mem_vocab, **kw)


def task_data(task, p, seed):
    """(batch_fn, evaluation inputs, evaluation labels, facts); ``facts['baseline']`` is the accuracy of
    the best input-blind predictor: for sort the position-only prior (the most probable value of each
    order statistic), for the hull the majority label, for memorisation 0.5."""
    B = p.batch
    if task == "sort":
        X, Y = tt.sort_batch(torch.Generator().manual_seed(seed + 101), p.eval_size)
        modes, pop = tt.sort_position_prior()
        base = accuracy_of_labels(torch.tensor(modes).expand_as(Y), Y)
        return (
            (lambda g, s: tt.sort_batch(g, B)),
            X,
            Y,
            {"baseline": base, "baseline_population": pop, "data": "fresh random sequences"},
        )
    if task == "hull":
        X, Y = tt.hull_batch(torch.Generator().manual_seed(seed + 202), p.eval_size)
        majority = float(max(Y.float().mean(), 1 - Y.float().mean()))
        return (lambda g, s: tt.hull_batch(g, B)), X, Y, {"baseline": majority, "data": "fresh point sets"}
    ids, labels, info = tt.memorisation_data(p.mem_seqs, p.mem_len, p.mem_vocab, seed + 303)

    def batch_fn(g, s):
        i = torch.randint(0, ids.shape[0], (min(B, ids.shape[0]),), generator=g)
        return ids[i], labels[i]

    return batch_fn, ids, labels, {"baseline": 0.5, **info, "data": "the training set itself"}


def accuracy_of_labels(pred, y) -> float:
    return float((pred == y).double().mean())


def ce_loss(cfg):
    def loss(p, batch):
        x, y = batch
        out = tn.forward(cfg, p, x)
        return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    return loss


def train_task(task, p, seed, arch, log=print):
    """Train (or load) the SAN of ``task`` for one seed and architecture: ``(cfg, result, X, Y, info)``,
    the evaluation inputs, labels and facts of :func:`task_data` beside the trained result."""
    cfg = task_config(task, p, arch)
    batch_fn, X, Y, info = task_data(task, p, seed)
    steps = getattr(p, f"{task}_steps")
    spec = {
        "task": task,
        "name": f"{TASK_NAMES[task]} {arch} seed {seed}",
        "cfg": cfg.as_dict(),
        "batch": p.batch,
        "data": {k: getattr(p, k) for k in ("mem_seqs", "mem_len", "mem_vocab")} if task == "mem" else {},
    }
    lr = {"sort": p.lr, "hull": p.hull_lr, "mem": p.mem_lr}[task]
    r = cached_train(
        spec,
        lambda: tn.init_params(cfg, seed),
        ce_loss(cfg),
        batch_fn,
        steps,
        lr=lr,
        seed=seed,
        log=log,
        cache_dir=p.model_cache,
        code_modules=(__name__,),
    )
    return cfg, r, X, Y, info
