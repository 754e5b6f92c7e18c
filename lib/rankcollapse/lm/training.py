"""Training the small LM of :mod:`rankcollapse.lm.model`: driver, collapse detection, treatments, saved
states.

Everything Hofmann & Mäder's protocol needs, as reusable pieces:

* :class:`RunSpec` — one training run, fully described by plain data (model, seed, optimiser, the skip
  scale ``alpha`` as piecewise-linear knots over the step, an optional added loss term, where it starts).
* :func:`train` — AdamW, gradient clipping (every step records its pre-clip norm and whether it was
  clipped), a fixed probe batch measured every ``measure_every`` steps (stable rank of every block's output,
  probe loss), checkpoints every ``ckpt_every`` steps from which a killed run resumes bit-identically.
* :class:`Detector` — the collapse rule: srank of the last block below ``threshold``; *settled* when, at
  least ``settle_steps`` after the first crossing, the median of the last ``window`` measurements is still
  below it. A crossing that climbs back (median above the threshold after ``settle_steps``) is a
  *self-healing event* and is reported, not dropped.
* :func:`driver` / :func:`branch` / :func:`healthy` — train-or-load by content key under
  ``build/states/<key>/`` (the key hashes the spec, the corpus bytes and the source of every module this one
  imports: ``lm.py``, ``metrics.py``, ...; see :func:`rankcollapse.store.code_hash`), so any chapter asking
  for the same run gets the same saved states without knowing who trained them.
* :func:`run_parallel` — independent runs in spawned processes, one thread each.

The data position of a run is its step counter (batches are drawn from a generator seeded by seed and
step), so a saved state = weights + AdamW state + step + RNG states + history.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import hashlib
import json
import multiprocessing as mp
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import checkpoint, store
from ..core.metrics import q_spread, res, stable_rank
from . import model as lm
from .model import LMConfig, TinyLM, build_model

Tensor = torch.Tensor
TERMS = ("penalty", "hinge", "cosine")


# -- specifications ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """An added loss on every block's output, averaged over blocks (and over the sequences of the batch).

    penalty: ``beta (1 - Q^2/(d-1))``; hinge: ``beta max(0, s0 - Q)``; cosine: ``beta U`` with ``U`` the mean
    squared cosine between distinct centred tokens.
    """

    kind: str
    beta: float
    s0: float = 0.0

    def __post_init__(self):
        if self.kind not in TERMS:
            raise ValueError(f"term kind {self.kind!r}; allowed: {TERMS}")


@dataclass(frozen=True)
class RunSpec:
    model: LMConfig = LMConfig()
    seed: int = 0
    batch: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.01
    clip: float = 1.0
    probe_batch: int = 16
    alpha_knots: tuple = ((0, 1.0),)  # ((step, alpha), ...): linear between knots, constant outside
    term: Term | None = None
    measure_every: int = 10
    rho_every: int = 10  # task and term gradients taken separately every this many steps

    def alpha(self, step: int) -> float:
        k = self.alpha_knots
        if step <= k[0][0]:
            return float(k[0][1])
        for (s0, a0), (s1, a1) in zip(k, k[1:]):
            if step <= s1:
                return float(a0 + (a1 - a0) * (step - s0) / (s1 - s0))
        return float(k[-1][1])

    def key_dict(self) -> dict:
        d = asdict(self)
        d["alpha_knots"] = [list(x) for x in self.alpha_knots]
        return d


def driver_knots(ramp_start: int, ramp_end: int, alpha_min: float) -> tuple:
    """alpha = 1 until ``ramp_start``, then linear to ``alpha_min`` at ``ramp_end``, then held."""
    return ((0, 1.0), (ramp_start, 1.0), (ramp_end, float(alpha_min)))


def source_hash() -> str:
    """sha256 of the sources that decide a trained state: this module and everything it imports from the
    library (``lm.py``, ``metrics.py``, ...), found by :func:`rankcollapse.store.import_closure`."""
    return store.code_hash(__name__)


def content_key(*parts) -> str:
    """The key of a saved state: the source (:func:`source_hash`), the corpus bytes (their sha256, computed
    once per process by the cached :func:`rankcollapse.lm.model.corpus`) and ``parts`` (specs, as JSON)."""
    h = hashlib.sha256(source_hash().encode())
    h.update(lm.corpus().sha256.encode())
    h.update(json.dumps(parts, sort_keys=True, default=_jsonable).encode())
    return h.hexdigest()[:20]


def _jsonable(o):
    if hasattr(o, "key_dict"):
        return o.key_dict()
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    raise TypeError(type(o))


def states_dir() -> Path:
    """Where trained states are cached: ``$RCBOOK_STATES``, else ``$RCBOOK_BUILD/states``, else
    ``build/states`` (:func:`rankcollapse.store.states_root`)."""
    return store.states_root()


# -- measurements -----------------------------------------------------------------------------------
def term_value(term: Term, hs: list[Tensor]) -> Tensor:
    """The term's raw value (without beta) on a list of block outputs, averaged over blocks and sequences."""
    vals = []
    for h in hs:
        if term.kind == "penalty":
            Q2 = q_spread(h) ** 2
            vals.append((1 - Q2 / (h.shape[-1] - 1)).mean())
        elif term.kind == "hinge":
            vals.append(torch.clamp(term.s0 - q_spread(h), min=0).mean())
        else:
            vals.append(mean_sq_cosine(h).mean())
    return torch.stack(vals).mean()


def mean_sq_cosine(X: Tensor) -> Tensor:
    """``U``: mean squared cosine between distinct centred tokens (rows), per sequence."""
    Y = res(X)
    Yn = Y / Y.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    C = Yn @ Yn.transpose(-1, -2)
    n = X.shape[-2]
    off = ~torch.eye(n, dtype=torch.bool, device=X.device)
    return (C**2)[..., off].mean(-1)


@torch.no_grad()
def probe_measure(
    model: TinyLM, probe: tuple[Tensor, Tensor], entropy: bool = False, all_blocks: bool = True
) -> dict:
    """Probe loss and srank (mean over the probe sequences) of every block's output (``all_blocks``) or of
    the last block only (a list of one; what the training loop records every ``measure_every`` steps, to keep
    the measurement cheap); optionally attention entropy (normalised, per block)."""
    x, y = probe
    logits, hs, ps = model(x, hidden=True, probs=entropy)
    out = {
        "loss": float(F.cross_entropy(logits.flatten(0, 1), y.flatten())),
        "srank": [float(v) for v in stable_rank(torch.stack(hs if all_blocks else hs[-1:])).mean(-1)],
    }
    if entropy:
        out["entropy"] = [float(e) for e in lm.attention_entropy(ps)]
    return out


# -- state ------------------------------------------------------------------------------------------
@dataclass
class TrainState:
    """Everything a run needs to continue: weights, optimiser, step, RNG states, history."""

    model: TinyLM
    opt: torch.optim.Optimizer
    step: int
    hist: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # e.g. the detector's state

    def to_dict(self) -> dict:
        """The library's one checkpoint format (:mod:`rankcollapse.checkpoint`); the batches are a function
        of the seed and the step, so there is no data generator state."""
        return checkpoint.pack(
            step=self.step,
            model=self.model.state_dict(),
            opt=self.opt.state_dict(),
            hist=self.hist,
            extra=self.extra,
            cfg=self.model.cfg.asdict(),
        )


def new_state(spec: RunSpec) -> TrainState:
    model = build_model(spec.model, spec.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    return TrainState(model, opt, 0, empty_hist(), {})


def empty_hist() -> dict:
    return {
        "m_step": [],
        "srank": [],
        "probe_loss": [],
        "alpha": [],
        "loss": [],
        "gnorm": [],
        "clipped": [],
        "term": [],
        "rho_step": [],
        "rho": [],
        "g_task": [],
        "g_term": [],
    }


def state_from_dict(spec: RunSpec, d: dict) -> TrainState:
    model = TinyLM(LMConfig(**d["cfg"]))
    model.load_state_dict(d["model"])
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    opt.load_state_dict(d["opt"])
    for g in opt.param_groups:  # a branch may change lr; the spec decides
        g["lr"] = spec.lr
    checkpoint.restore_rng(d)
    return TrainState(model, opt, d["step"], copy.deepcopy(d["hist"]), copy.deepcopy(d.get("extra", {})))


def save_state(state: TrainState | dict, path: Path, record: bool = True) -> None:
    """Save atomically with its content hash (:func:`rankcollapse.store.save_checked`); ``record=False`` for
    checkpoints, which a finished run deletes."""
    store.save_checked(
        state.to_dict() if isinstance(state, TrainState) else state, Path(path), record=record
    )


def load_dict(path: Path, record: bool = True) -> dict:
    """A saved state, checked against its content hash: raises :class:`rankcollapse.store.CorruptState`
    naming the path when the file is truncated, changed or unreadable."""
    return store.load_checked(path, record=record)


def _load_or_quarantine(path: Path, then: str, log=None, record: bool = True) -> dict | None:
    """The saved state at ``path``, or None when it is corrupt: then it is moved aside (and the move
    reported, saying ``then``), never used."""
    try:
        return load_dict(path, record=record)
    except store.CorruptState as e:
        store.quarantine(path, e, then=then, log=log)
        return None


# -- detection --------------------------------------------------------------------------------------
@dataclass
class Detector:
    """Collapse rule on the last block's srank, fed one measurement at a time."""

    threshold: float = 1.5
    window: int = 10
    settle_steps: int = 100
    arm_step: int = 0  # crossings before this step are not collapse candidates (the early dip)
    first_cross: int | None = None
    settled: int | None = None
    heals: list = field(default_factory=list)  # (first crossing, step it was declared healed)
    recent: list = field(default_factory=list)

    def feed(self, step: int, srank: float) -> bool:
        """Returns True exactly once: at the measurement where the collapse becomes settled."""
        self.recent = (self.recent + [srank])[-self.window :]
        if self.settled is not None:
            return False
        if self.first_cross is None:
            if srank < self.threshold and step >= self.arm_step:
                self.first_cross = step
            return False
        if step - self.first_cross >= self.settle_steps:
            if statistics.median(self.recent) < self.threshold:
                self.settled = step
                return True
            self.heals.append((self.first_cross, step))
            self.first_cross = None
        return False

    def to_dict(self) -> dict:
        return asdict(self)


def crossings(steps: list, sr: list, threshold: float = 1.5) -> list:
    """Maximal runs of measurements below the threshold: [(first step, last step, min srank)]."""
    out, cur = [], None
    for t, s in zip(steps, sr):
        if s < threshold:
            cur = [t, t, s] if cur is None else [cur[0], t, min(cur[2], s)]
        elif cur is not None:
            out.append(tuple(cur))
            cur = None
    if cur is not None:
        out.append(tuple(cur))
    return out


def rolling_median(x: list, k: int) -> list:
    return [statistics.median(x[max(0, i - k + 1) : i + 1]) for i in range(len(x))]


# -- the loop ---------------------------------------------------------------------------------------
class Stop(Exception):
    """Raised by the ``stop_at`` hook to simulate a run killed mid-way (tests)."""


def train(
    spec: RunSpec,
    state: TrainState,
    until: int,
    *,
    ckpt: Path | None = None,
    ckpt_every: int = 200,
    on_measure=None,
    log=None,
    stop_at: int | None = None,
) -> TrainState:
    """Train ``state`` in place from ``state.step`` to ``until``.

    At every step ``t`` (weights after ``t`` updates): if ``t % measure_every == 0`` the probe batch is
    measured first (and ``on_measure(state, m)`` called; it may write ``state.extra``); then one AdamW update
    on batch ``t`` with ``alpha(t)``. Checkpoints hold the state at the start of steps that are multiples of
    ``ckpt_every`` (before that step's measurement), so a resumed run repeats nothing and skips nothing.
    """
    corpus = lm.corpus()
    probe = corpus.probe(spec.seed, spec.probe_batch, spec.model.ctx)
    model, opt, hist = state.model, state.opt, state.hist
    params = [p for p in model.parameters()]
    t_last = time.perf_counter()
    first = state.step
    while state.step <= until:
        t = state.step
        if ckpt is not None and t % ckpt_every == 0 and t > first:
            # the state before step t's measurement: a resumed run redoes t whole
            checkpoint.save(state.to_dict(), ckpt)
        model.alpha = spec.alpha(t)
        if t % spec.measure_every == 0:
            m = probe_measure(model, probe, all_blocks=False)
            hist["m_step"].append(t)
            hist["srank"].append(m["srank"])
            hist["probe_loss"].append(m["loss"])
            hist["alpha"].append(model.alpha)
            if on_measure is not None:
                on_measure(state, m)
            if log is not None and t % 100 == 0:
                dt = time.perf_counter() - t_last
                t_last = time.perf_counter()
                log(
                    f"step {t} alpha {model.alpha:.3f} srank {m['srank'][-1]:.2f} "
                    f"loss {m['loss']:.3f} ({dt:.0f}s)"
                )
        if stop_at is not None and t == stop_at:
            raise Stop(t)
        if t == until:
            break
        x, y = corpus.batch(spec.seed, t, spec.batch, spec.model.ctx)
        if spec.term is None:
            loss = model.loss(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            tv = 0.0
        else:
            logits, hs, _ = model(x, hidden=True)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            raw = term_value(spec.term, hs)
            added = spec.term.beta * raw
            tv = float(added.detach())
            opt.zero_grad(set_to_none=True)
            if t % spec.rho_every == 0:
                gt = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
                ga = torch.autograd.grad(added, params, allow_unused=True)
                nt = _norm(gt)
                na = _norm(ga)
                hist["rho_step"].append(t)
                hist["g_task"].append(nt)
                hist["g_term"].append(na)
                hist["rho"].append(na / nt if nt > 0 else float("inf"))
                for p, a, b in zip(params, gt, ga):
                    g = _add(a, b)
                    p.grad = g
            else:
                (loss + added).backward()
        gn = float(torch.nn.utils.clip_grad_norm_(params, spec.clip))
        opt.step()
        hist["loss"].append(float(loss.detach()))
        hist["gnorm"].append(gn)
        hist["clipped"].append(gn > spec.clip)
        hist["term"].append(tv)
        state.step = t + 1
    return state


def _norm(gs) -> float:
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in gs if g is not None)))


def _add(a, b):
    if a is None:
        return None if b is None else b.clone()
    return a if b is None else a + b


# -- cached runs: train or load by content ----------------------------------------------------------
@dataclass(frozen=True)
class DriverSpec:
    run: RunSpec
    steps: int  # total steps of the driver (the final srank is measured here)
    threshold: float = 1.5
    window: int = 10
    settle_steps: int = 100


def driver(
    ds: DriverSpec, *, log=None, stop_at: int | None = None, root: Path | None = None, ckpt_every: int = 200
) -> dict:
    """Run (or load) a driver. Returns its summary: history, detector result, and the path of the saved
    settled collapse (``None`` if it never settled). Killed runs resume from ``ckpt.pt``. A corrupt saved
    file (``driver.pt``, ``collapse.pt``, ``ckpt.pt``: content hash mismatch) is moved aside and the run
    trained again, from its checkpoint when that one is sound, never used."""
    key = content_key("driver", ds)
    d = Path(root or states_dir()) / key
    done = d / "driver.pt"
    if done.exists():
        out = _load_or_quarantine(done, "training the driver again", log)
        if out is not None:
            col = d / "collapse.pt"
            bad = store.verify(col) if out["extra"].get("det", {}).get("settled") is not None else None
            if bad is None:
                return _summary(out, d)
            store.quarantine(col, bad, then="training the driver again", log=log)
            store.quarantine(done, "its collapse.pt is corrupt", log=log)
    spec = ds.run
    state = _resume(spec, d / "ckpt.pt", log)
    if state is None:
        state = new_state(spec)
        state.extra["det"] = Detector(
            ds.threshold,
            ds.window,
            ds.settle_steps,
            arm_step=spec.alpha_knots[1][0] if len(spec.alpha_knots) > 1 else 0,
        ).to_dict()

    def on_measure(st, m):
        det = Detector(**st.extra["det"])
        if det.feed(st.step, m["srank"][-1]):
            save_state(st, d / "collapse.pt")
        st.extra["det"] = det.to_dict()

    ck = d / "ckpt.pt"
    train(
        spec,
        state,
        ds.steps,
        ckpt=ck,
        ckpt_every=ckpt_every,
        on_measure=on_measure,
        log=log,
        stop_at=stop_at,
    )
    out = state.to_dict()
    out["final_probe"] = probe_measure(
        state.model, lm.corpus().probe(spec.seed, spec.probe_batch, spec.model.ctx), entropy=True
    )
    out["key"] = key
    save_state(out, done)
    store.remove_checked(ck)
    return _summary(out, d)


def _summary(out: dict, d: Path) -> dict:
    det = out["extra"].get("det", {})
    return {
        "key": out["key"],
        "dir": str(d),
        "hist": out["hist"],
        "det": det,
        "final_probe": out["final_probe"],
        "collapse": str(d / "collapse.pt") if det.get("settled") is not None else None,
        "step": out["step"],
    }


def healthy(spec: RunSpec, steps: int, *, log=None, root: Path | None = None) -> dict:
    """A run with the skip intact (alpha = 1 throughout) from the same initialisation and batches; its
    history (probe srank and loss every ``measure_every`` steps) is what branches are compared with. Its
    detector is armed from step 0, so early dips below the threshold are recorded (and their healing)."""
    spec = replace(spec, alpha_knots=((0, 1.0),), term=None)
    ds = DriverSpec(spec, steps, threshold=1.5)
    return driver(ds, log=log, root=root)


def branch(
    parent: str,
    spec: RunSpec,
    steps: int,
    *,
    log=None,
    root: Path | None = None,
    stop_at=None,
    ckpt_every: int = 200,
) -> dict:
    """Continue the saved state at ``parent`` (a ``.pt`` path) for ``steps`` steps under ``spec`` (its alpha
    knots and term use absolute step numbers). Cached by the parent's key and the spec; a corrupt saved
    branch is moved aside and trained again; a corrupt parent raises
    :class:`rankcollapse.store.CorruptState`."""
    pd = load_dict(Path(parent))
    key = content_key("branch", Path(parent).parent.name, pd["step"], spec, steps)
    d = Path(root or states_dir()) / key
    done = d / "branch.pt"
    if done.exists():
        out = _load_or_quarantine(done, "training the branch again", log)
        if out is not None:
            return {
                "key": key,
                "hist": out["hist"],
                "start": out["extra"]["start"],
                "step": out["step"],
                "final_probe": out["final_probe"],
            }
    state = _resume(spec, d / "ckpt.pt", log)
    if state is None:
        state = state_from_dict(spec, pd)
        state.hist = empty_hist()
        state.extra = {"start": pd["step"]}
    start = state.extra["start"]
    ck = d / "ckpt.pt"
    train(spec, state, start + steps, ckpt=ck, ckpt_every=ckpt_every, log=log, stop_at=stop_at)
    out = state.to_dict()
    out["final_probe"] = probe_measure(
        state.model, lm.corpus().probe(spec.seed, spec.probe_batch, spec.model.ctx), entropy=True
    )
    save_state(out, done)
    store.remove_checked(ck)
    return {
        "key": key,
        "hist": out["hist"],
        "start": start,
        "step": out["step"],
        "final_probe": out["final_probe"],
    }


def _resume(spec: RunSpec, ck: Path, log=None) -> TrainState | None:
    """The state saved in the checkpoint ``ck``, or None when there is none or it is corrupt (moved
    aside)."""
    if not ck.exists():
        return None
    d = checkpoint.load(ck, then="starting from scratch", log=log)
    if d is None:
        return None
    if log is not None:
        log(f"resumed from the checkpoint at step {d['step']}")
    return state_from_dict(spec, d)


def load_model(path: str | Path, alpha: float | None = None) -> TinyLM:
    d = load_dict(Path(path))
    m = TinyLM(LMConfig(**d["cfg"]))
    m.load_state_dict(d["model"])
    if alpha is not None:
        m.alpha = alpha
    return m


def calibrate(
    path: str | Path, kind: str, added: float, alpha: float, seed: int, s0: float = 0.0, batch: int = 16
) -> tuple[float, float]:
    """beta such that the term adds ``added`` nats at the saved state (on the probe batch).
    Returns (beta, raw)."""
    m = load_model(path, alpha)
    x, _ = lm.corpus().probe(seed, batch, m.cfg.ctx)
    with torch.no_grad():
        _, hs, _ = m(x, hidden=True)
        raw = float(term_value(Term(kind, 1.0, s0), hs))
    if raw <= 0:
        raise ValueError(f"term {kind} is zero at the saved state (s0={s0}); it cannot be calibrated")
    return added / raw, raw


# -- parallel ---------------------------------------------------------------------------------------
def _init_worker():
    """A worker of :func:`run_parallel`: one thread, and it dies with the process that started it (a
    chapter's kernel killed by any signal takes its workers with it)."""
    import signal

    from ..procs import die_with_parent

    torch.set_num_threads(1)
    die_with_parent(signal.SIGKILL)


def _call(fn, kwargs):
    return fn(**kwargs)


def run_parallel(fn, jobs: list[dict], workers: int = 1, log=None, labels=None) -> list:
    """``[fn(**job) for job in jobs]``, in spawned processes (one thread each) when ``workers > 1``.

    Results come back in job order; each job is deterministic, so the worker count changes nothing but the
    wall time."""
    labels = labels or [str(i) for i in range(len(jobs))]
    if workers <= 1 or len(jobs) <= 1:
        out = []
        for lab, j in zip(labels, jobs):
            out.append(fn(**j))
            if log:
                log(f"done: {lab}")
        return out
    ctx = mp.get_context("spawn")
    res_ = [None] * len(jobs)
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker) as ex:
        futs = {ex.submit(_call, fn, j): i for i, j in enumerate(jobs)}
        for f in cf.as_completed(futs):
            i = futs[f]
            res_[i] = f.result()
            if log:
                log(f"done: {labels[i]}")
    return res_
