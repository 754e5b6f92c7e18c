"""One checkpoint format for every training loop of the library (the toy networks and the small LM).

A checkpoint holds everything that decides the next step -- the weights, the optimiser's state, the step
counter (the data position), torch's global RNG and the data generator's state, the history so far, and
the loop's own extras (the LM's collapse detector) -- in one dict of the fields :data:`FIELDS`, tagged with
:data:`FORMAT`. It is written through :func:`rankcollapse.store.save_checked` (atomically, with its content
hash beside it); :func:`load` gives it back only when the bytes match their hash *and* the dict is a
checkpoint of this format: anything else is moved aside (:func:`rankcollapse.store.quarantine`), never
used, and the loop starts again. A run resumed from a checkpoint therefore ends with bit-identical weights
to a run never interrupted (``tests/test_training.py``, ``tests/test_lm_train.py``).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from . import store

FORMAT = 1  # bump when the fields change
FIELDS = ("format", "step", "model", "opt", "hist", "extra", "torch_rng", "data_rng", "cfg")


def pack(*, step: int, model: dict, opt: dict, hist: dict, extra=None, data_rng=None, cfg=None) -> dict:
    """A checkpoint of the current moment: ``model`` (the weights' state dict), ``opt`` (the optimiser's
    state dict), ``hist`` (the history, copied), ``extra`` (the loop's own state, copied), torch's global
    RNG state (read now), ``data_rng`` (a data generator's state, or None when the batches are a
    function of the step) and ``cfg`` (the model's configuration, or None)."""
    return {
        "format": FORMAT,
        "step": int(step),
        "model": model,
        "opt": opt,
        "hist": copy.deepcopy(hist),
        "extra": copy.deepcopy(extra if extra is not None else {}),
        "torch_rng": torch.get_rng_state(),
        "data_rng": data_rng,
        "cfg": cfg,
    }


def save(state: dict, path: str | Path, *, record: bool = False) -> None:
    """Write a checkpoint made by :func:`pack`. ``record=False`` (the default) for checkpoints that a
    finished run deletes; a saved final state that chapters read is recorded among the states they
    consumed (see :func:`rankcollapse.store.note_consumed`)."""
    missing = [f for f in FIELDS if f not in state]
    if missing or state["format"] != FORMAT:
        raise ValueError(f"not a checkpoint of format {FORMAT} (missing fields: {missing})")
    store.save_checked(state, Path(path), record=record)


def problem(d) -> str | None:
    """What keeps ``d`` from being a checkpoint of this format (None when it is one)."""
    if not isinstance(d, dict):
        return f"holds a {type(d).__name__}, not a checkpoint"
    missing = [f for f in FIELDS if f not in d]
    if missing:
        return f"not a training checkpoint (missing fields: {', '.join(missing)})"
    if d["format"] != FORMAT:
        return f"a checkpoint of format {d['format']}, where this library reads format {FORMAT}"
    return None


def load(path: str | Path, *, then: str, log=None, record: bool = False) -> dict | None:
    """The checkpoint at ``path``; None when there is none, or when it is corrupt or of another format: then
    it is moved aside and the move reported (saying ``then``: what the loop does instead)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        d = store.load_checked(path, map_location="cpu", record=record)
        why = problem(d)
        if why is not None:
            raise store.CorruptState(path, why)
    except store.CorruptState as e:
        store.quarantine(path, e, then=then, log=log)
        return None
    return d


def restore_rng(d: dict, gen: torch.Generator | None = None) -> None:
    """Set torch's global RNG (and ``gen``, the data generator, when the checkpoint holds its state)."""
    torch.set_rng_state(d["torch_rng"])
    if gen is not None and d["data_rng"] is not None:
        gen.set_state(d["data_rng"])
