"""Training by the library: seeded, checkpointed, resumable, and cached by content.

:func:`train` runs Adam on a dict of plain tensors (the weights of a
:class:`~rankcollapse.core.san.SAN` and whatever maps surround it). Everything that
decides the next step is in the checkpoint (the library's one format,
:mod:`rankcollapse.checkpoint`, shared with the LM's loop): the weights, the
optimiser state, the step counter (the data position), the state of the data
generator and torch's global RNG, and the loss history. A run interrupted after a checkpoint
and restarted from it therefore ends with **bit-identical** weights to an
uninterrupted run (``tests/test_training.py`` proves it).

:func:`cached_train` keys a trained model by its content -- a JSON-able dict
(task, sizes, seed, steps, learning rate, ...) plus :data:`TRAINING_VERSION` --
and stores it under the cache folder, so rebuilding the book does not retrain.
Editing the source of the modules that define the computation changes the key
too: this module and the modules the caller names (``code_modules``: the one that
defines the loss and the data; default :data:`CODE_MODULES`), with everything they
import from the library (:func:`rankcollapse.store.code_hash`). The cache folder is
``$RCBOOK_CACHE``, else ``<store root>/toy`` (:func:`rankcollapse.store.states_root`,
by default ``<repo>/build/states/toy``, git-ignored). One key trains once: the
training holds a lock on ``<folder>/.lock`` and every file is written through a
uniquely named temporary file, so concurrent runs asking for the same model wait
for the first and load its result.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .. import checkpoint, store

Tensor = torch.Tensor

# bump when the training loop changes in a way that changes the weights it produces
TRAINING_VERSION = 1


class TrainingInterrupted(RuntimeError):
    """Raised by :func:`train` when asked to stop at a step (to test resumption)."""


def cache_root() -> Path:
    """``$RCBOOK_CACHE`` (made absolute), else ``<store root>/toy``."""
    env = store.env_path("RCBOOK_CACHE")
    if env is not None:
        return env
    return store.states_root() / "toy"


# the default modules (besides this one) whose source decides the weights a training produces: the
# networks and the data of the toy tasks. A caller whose loss or data lives elsewhere names its own module.
CODE_MODULES = ("rankcollapse.core.san", "rankcollapse.toy.nets", "rankcollapse.toy.tasks")


def code_hash(code_modules=CODE_MODULES, root=None) -> str:
    """:func:`rankcollapse.store.code_hash` of this module and ``code_modules`` (dotted names), with
    everything they import from the library. ``root``: the package folder to read (default: this one)."""
    return store.code_hash(__name__, *code_modules, root=root)


def content_key(spec: dict, code_modules=CODE_MODULES, root=None) -> str:
    """sha256 of the JSON of ``spec`` (sorted keys), the training version and the source of the modules
    that define the computation (:func:`code_hash` of ``code_modules``); 16 hex digits."""
    blob = json.dumps(
        {"spec": spec, "training_version": TRAINING_VERSION, "code": code_hash(code_modules, root)},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class TrainResult:
    params: dict[str, Tensor]
    losses: list[float]  # loss at every step
    steps: int
    resumed_from: int  # 0 if trained from scratch
    cached: bool = False
    seconds: float = 0.0


def train(
    params: dict[str, Tensor],
    loss_fn: Callable[[dict, object], Tensor],
    batch_fn: Callable[[torch.Generator, int], object],
    steps: int,
    *,
    lr: float,
    seed: int,
    ckpt_path: str | Path | None = None,
    ckpt_every: int = 0,
    log: Callable[[str], None] = print,
    log_every: int = 0,
    interrupt_at: int | None = None,
    clip: float | None = 1.0,
    name: str = "train",
) -> TrainResult:
    """Adam on ``params`` (leaf tensors; updated in place) for ``steps`` steps.

    ``batch_fn(gen, step)`` draws one batch from the data generator ``gen``
    (seeded from ``seed``; its state is checkpointed); ``loss_fn(params, batch)``
    returns a scalar. With ``ckpt_path`` a checkpoint is written every
    ``ckpt_every`` steps and the run resumes from it if it exists.
    ``interrupt_at``: raise :class:`TrainingInterrupted` right after step
    ``interrupt_at`` (after its checkpoint) -- used to test resumption.
    """
    t0 = time.perf_counter()
    for t in params.values():
        t.requires_grad_(True)
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    torch.manual_seed(int(seed))
    step, losses, resumed = 0, [], 0
    ckpt_path = Path(ckpt_path) if ckpt_path is not None else None
    # a corrupt checkpoint (or one of another format) is never used: moved aside, the run starts again
    ck = None if ckpt_path is None else checkpoint.load(ckpt_path, then="training from scratch", log=log)
    if ck is not None:
        if set(ck["model"]) != set(params):
            raise ValueError(f"checkpoint {ckpt_path} holds other parameters than the model")
        with torch.no_grad():
            for k, t in params.items():
                t.copy_(ck["model"][k])
        opt.load_state_dict(ck["opt"])
        checkpoint.restore_rng(ck, gen)
        step, losses, resumed = ck["step"], list(ck["hist"]["loss"]), ck["step"]
        log(f"{name}: resumed from checkpoint at step {step}/{steps}")
    log_every = log_every or max(1, steps // 10)

    def save_checkpoint():
        state = checkpoint.pack(
            step=step,
            model={k: t.detach().clone() for k, t in params.items()},
            opt=opt.state_dict(),
            hist={"loss": losses},
            data_rng=gen.get_state(),
        )
        checkpoint.save(state, ckpt_path)

    while step < steps:
        batch = batch_fn(gen, step)
        loss = loss_fn(params, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(list(params.values()), clip)
        opt.step()
        losses.append(loss.item())
        step += 1
        if step % log_every == 0 or step == steps:
            log(f"{name}: step {step}/{steps} loss {losses[-1]:.4g} ({time.perf_counter() - t0:.1f}s)")
        if ckpt_path is not None and ckpt_every and step % ckpt_every == 0 and step < steps:
            save_checkpoint()
        if interrupt_at is not None and step == interrupt_at:
            raise TrainingInterrupted(f"{name}: interrupted after step {step}")
    for t in params.values():
        t.requires_grad_(False)
    return TrainResult(params, losses, steps, resumed, seconds=time.perf_counter() - t0)


def cached_train(
    spec: dict,
    init_fn: Callable[[], dict[str, Tensor]],
    loss_fn,
    batch_fn,
    steps: int,
    *,
    lr: float,
    seed: int,
    ckpt_every: int | None = None,
    log: Callable[[str], None] = print,
    cache_dir: str | Path | None = None,
    code_modules=CODE_MODULES,
    **kw,
) -> TrainResult:
    """Train (or load) the model described by ``spec``; the cache key covers spec, steps, lr and seed, and
    the source of this module and of ``code_modules`` (dotted names of the modules whose source decides the
    weights: where ``init_fn``, ``loss_fn`` and ``batch_fn`` are defined, e.g. ``(__name__,)``), with
    everything they import from the library.

    The folder ``<cache>/<spec['task']>-<key>/`` holds ``ckpt.pt`` while training
    and ``final.pt`` after; a finished model is loaded, an unfinished one resumes.
    The training runs under an exclusive lock on ``<folder>/.lock``: a second process
    asking for the same model waits, then loads the first one's ``final.pt``. Every file is
    stored with its content hash; a corrupt ``final.pt`` or ``ckpt.pt`` is moved aside (and
    reported on stderr, by path) and the model trained again, never used.
    """
    full = dict(spec, steps=steps, lr=lr, seed=seed)
    key = content_key(full, tuple(code_modules))
    folder = Path(cache_dir or cache_root()) / f"{spec.get('task', 'model')}-{key}"
    final = folder / "final.pt"
    name = str(spec.get("name", spec.get("task", "model")))

    def load() -> TrainResult | None:
        try:
            d = store.load_checked(final, map_location="cpu")
        except store.CorruptState:
            return None
        log(f"{name}: loaded trained model from cache ({folder.name})")
        return TrainResult(d["params"], d["losses"], d["steps"], 0, cached=True)

    if final.exists() and (r := load()) is not None:
        return r
    with store.lock(folder / ".lock"):
        if final.exists():  # trained by another process while this one waited for the lock, or corrupt
            if (r := load()) is not None:
                return r
            store.quarantine(
                final, store.verify(final) or "does not load", then="training it again", log=log
            )
        params = init_fn()
        ck_every = ckpt_every if ckpt_every is not None else max(1, steps // 4)
        r = train(
            params,
            loss_fn,
            batch_fn,
            steps,
            lr=lr,
            seed=seed,
            ckpt_path=folder / "ckpt.pt",
            ckpt_every=ck_every,
            log=log,
            name=name,
            **kw,
        )
        store.atomic_write_bytes(
            folder / "spec.json", json.dumps(full, indent=1, sort_keys=True, default=str).encode()
        )
        store.save_checked(
            {
                "params": {k: t.detach().clone() for k, t in r.params.items()},
                "losses": r.losses,
                "steps": steps,
                "spec": full,
            },
            final,
        )
        store.remove_checked(folder / "ckpt.pt")
    return r
