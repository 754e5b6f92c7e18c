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
* independent runs go to :func:`rankcollapse.jobs.run_parallel` (spawned processes, one thread each, or a
  Dask cluster).

The data position of a run is its step counter (batches are drawn from a generator seeded by seed and
step), so a saved state = weights + AdamW state + step + RNG states + history.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import checkpoint, store
from ..core.metrics import res, stable_rank
from . import model as lm
from .model import LMConfig, TinyLM, build_model

Tensor = torch.Tensor
TERMS = ("penalty", "hinge", "cosine")
ENGINES = ("eager", "compiled")


def compiler_available(device: str = "cpu") -> bool:
    """Whether ``torch.compile`` can build kernels for ``device`` here: a C++ compiler for the CPU, Triton
    for a GPU."""
    import importlib.util
    import shutil

    if torch.device(device).type == "cuda":
        return importlib.util.find_spec("triton") is not None
    return any(shutil.which(c) for c in ("g++", "c++", "clang++"))


def resolve_engine(engine: str, device: str = "cpu") -> str:
    """``auto`` -> ``compiled`` where a compiler exists, else ``eager`` (said in the spec, so the two never
    share a saved state); ``compiled`` without a compiler is an error naming what is missing."""
    if engine == "auto":
        return "compiled" if compiler_available(device) else "eager"
    if engine == "compiled" and not compiler_available(device):
        raise RuntimeError(
            f"engine 'compiled' needs a compiler for {device} (g++ or clang++ on the CPU, triton on a GPU); "
            "none found: use engine 'eager' or 'auto'"
        )
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}; allowed: {ENGINES + ('auto',)}")
    return engine


def forward_of(model: TinyLM, engine: str):
    """The callable a training step runs the model through: the model itself (eager) or its compiled
    forward (``torch.compile``; alpha is a buffer, so changing it does not recompile; the compiled graphs of
    one process are reused by every model of the same shapes)."""
    if engine == "eager":
        return model
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(model)


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
    weights_every: int = 50  # the weights' stable ranks recorded every this many steps (0: never)
    device: str = "cpu"  # where the run trains: part of the spec (another device, other round-off)
    engine: str = "eager"  # "eager" or "compiled" (torch.compile of the forward): part of the spec too

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"engine {self.engine!r}; allowed: {ENGINES}")
        if self.weights_every and self.weights_every % self.measure_every:
            raise ValueError(
                f"weights_every = {self.weights_every} must be a multiple of measure_every = "
                f"{self.measure_every} (or 0)"
            )

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


def prefix_end(spec: RunSpec) -> int:
    """The step ``S`` at whose start the run's state is still that of the plain run of its model and seed
    (every update before it at alpha = 1, no term): its first ``S`` updates are the same as those of the
    healthy run and of every other driver of that model and seed, and are trained once (:func:`prefix`).
    0 when there is no such part (or the whole run is plain: nothing branches off it)."""
    k = spec.alpha_knots
    if spec.term is not None or k[0][1] != 1.0 or len(k) < 2:
        return 0
    last = 0
    for s, a in k:
        if a != 1.0:
            break
        last = s  # alpha = 1 up to here (linear between knots of value 1)
    return last + 1 if plain_until(spec, last) else 0


def plain_until(spec: RunSpec, P: int) -> bool:
    """Whether the updates of steps ``0..P`` of ``spec`` are those of the plain run (alpha = 1 at every one,
    no term)."""
    return spec.term is None and all(spec.alpha(t) == 1.0 for t in range(P + 1))


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
    """The term's raw value (without beta) on a list of block outputs, averaged over blocks and sequences.
    Q of every block comes from one call of :func:`q_gram` on the stacked blocks."""
    H = torch.stack(hs)  # (blocks, B, n, d)
    if term.kind == "penalty":
        vals = 1 - q_gram(H, squared=True) / (H.shape[-1] - 1)
    elif term.kind == "hinge":
        vals = torch.clamp(term.s0 - q_gram(H), min=0)
    else:
        vals = mean_sq_cosine(H)
    return vals.mean(-1).mean()


POWER_SQUARINGS = 7  # top eigenvector of the Gram matrix from G^(2^7), then checked
POWER_TOL = 1e-9  # largest allowed relative eigen-residual |G v - lambda v| / lambda; else eigh


def q_gram(X: Tensor, squared: bool = False) -> Tensor:
    """``Q = sqrt(srank - 1)`` of the centred tokens (rows) of ``X`` (any leading batch dims), with a
    gradient, from the float64 Gram matrix ``G = Y Y^T`` (or ``Y^T Y``, whichever is smaller) instead of
    ``svdvals``.

    ``Q^2 = (tr G - lambda_1) / lambda_1`` with ``lambda_1 = v^T G v`` for the top eigenvector ``v``, taken
    without gradient (at an exact eigenvector the derivative of ``v^T G v`` in ``G`` is ``v v^T`` whether or
    not ``v`` moves, so the gradient is exact). ``v`` comes from repeated squaring of ``G`` (cheap batched
    matmuls); where its eigen-residual exceeds :data:`POWER_TOL` (a small spectral gap) it is taken from
    ``torch.linalg.eigh`` instead; the gradient is then exact to about ``POWER_TOL`` / (relative spectral
    gap), ~1e-8, below float32 round-off. The tail ``tr G - lambda_1``, the sum of the other eigenvalues,
    has a float64 round-off (~1e-16 tr G) that bounds the smallest Q it resolves (~1e-8). Returned in
    ``X``'s dtype; ``squared`` gives ``Q^2``. Checked against ``svdvals`` in float64
    (tests/test_engine.py)."""
    Y = res(X).double()
    n, d = Y.shape[-2:]
    G = Y @ Y.transpose(-1, -2) if n <= d else Y.transpose(-1, -2) @ Y
    with torch.no_grad():
        v = _top_eigvec(G.detach())
    # lambda_1 = v^T G v = |Y^T v|^2 (or |Y v|^2), with the gradient of the exact top eigenvalue
    lam1 = ((Y.transpose(-1, -2) if n <= d else Y) @ v.unsqueeze(-1)).square().sum((-1, -2))
    tail = (Y.square().sum((-1, -2)) - lam1).clamp_min(0)
    q2 = tail / lam1
    return (q2 if squared else q2.sqrt()).to(X.dtype)


def _top_eigvec(G: Tensor) -> Tensor:
    """Unit top eigenvector of each symmetric PSD matrix in ``G`` (..., m, m), float64."""
    M = G / G.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None].clamp_min(1e-300)
    for _ in range(POWER_SQUARINGS):
        M = M @ M
        M = M / M.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None].clamp_min(1e-300)
    j = M.diagonal(dim1=-2, dim2=-1).argmax(-1)  # M ~ v v^T: its largest column is along v
    v = torch.take_along_dim(M, j[..., None, None], dim=-1).squeeze(-1)
    v = G @ v.unsqueeze(-1)  # one more power step, then normalise
    v = (v / v.norm(dim=-2, keepdim=True).clamp_min(1e-300)).squeeze(-1)
    Gv = (G @ v.unsqueeze(-1)).squeeze(-1)
    lam = (v * Gv).sum(-1)
    resid = (Gv - lam[..., None] * v).norm(dim=-1) / lam.clamp_min(1e-300)
    bad = (resid > POWER_TOL) | ~torch.isfinite(resid)
    if bool(bad.any()):  # only those matrices, so a result never depends on the others in the batch
        v = v.clone()
        v[bad] = torch.linalg.eigh(G[bad])[1][..., -1]
    return v


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


def ledger_counts(path: str | Path) -> tuple[int, int]:
    """(unique steps, trained steps) in a step ledger written by :func:`log_steps`: a step whose fingerprint
    was already trained counts once among the unique ones."""
    seen, n = set(), 0
    p = Path(path)
    if p.exists():
        for line in p.read_text().splitlines():
            fps = line.split()
            n += len(fps)
            seen.update(fps)
    return len(seen), n


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


def make_optimizer(model: TinyLM, spec: RunSpec) -> torch.optim.Optimizer:
    """AdamW with torch's fused kernel (one call updates every parameter, on the CPU as on a GPU) where the
    device has one, else the multi-tensor (``foreach``) implementation."""
    fused = torch.device(spec.device).type in ("cpu", "cuda")
    kw = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay, **kw)


def new_state(spec: RunSpec) -> TrainState:
    model = build_model(spec.model, spec.seed).to(spec.device)
    return TrainState(model, make_optimizer(model, spec), 0, empty_hist(), {"lineage": lineage_root(spec)})


def lineage_root(spec: RunSpec) -> str:
    """The fingerprint of a fresh run's state: what decides its initial weights."""
    return _h(("init", spec.model.asdict(), spec.seed, spec.device))


def lineage_step(lineage: str, spec: RunSpec, t: int) -> str:
    """The fingerprint of the state after update ``t`` from a state with fingerprint ``lineage``: it hashes
    everything that decides that update (batch, alpha, term, optimiser settings). Two runs whose states have
    the same fingerprint at a step hold the same weights there, so the step ledger
    (:func:`log_steps`) can count a step trained twice."""
    term = None if spec.term is None else asdict(spec.term)
    return _h(
        (
            lineage,
            t,
            spec.alpha(t),
            term,
            spec.lr,
            spec.weight_decay,
            spec.clip,
            spec.batch,
            spec.rho_every if term else 0,
        )
    )


def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


STEP_LEDGER_ENV = "RCBOOK_STEP_LEDGER"


def log_steps(fingerprints: list[str]) -> None:
    """Append the fingerprints of the steps one :func:`train` call trained to the file named by
    ``$RCBOOK_STEP_LEDGER`` (set by the runner to ``build/<profile>/steps.log``; one line per call, appended
    whole), from which ``bench/all.py`` reads unique steps / trained steps. Nothing when unset."""
    import os

    path = os.environ.get(STEP_LEDGER_ENV)
    if not path or not fingerprints:
        return
    with open(path, "a") as f:
        f.write(" ".join(fingerprints) + "\n")


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
        "w_step": [],
        "wsrank": [],  # per record: {kind: [stable rank per block]} (lm.model.weight_sranks)
    }


def state_from_dict(spec: RunSpec, d: dict) -> TrainState:
    model = TinyLM(LMConfig(**d["cfg"])).to(spec.device)
    model.load_state_dict(d["model"])
    opt = make_optimizer(model, spec)
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
    return store.load_checked(path, record=record, map_location="cpu")


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
    dev = torch.device(spec.device)
    probe = tuple(a.to(dev) for a in corpus.probe(spec.seed, spec.probe_batch, spec.model.ctx))
    hist = state.hist
    for k in ("w_step", "wsrank"):
        hist.setdefault(k, [])
    model, opt = state.model, state.opt
    fwd = forward_of(model, spec.engine)
    params = [p for p in model.parameters()]
    t_last = time.perf_counter()
    first = state.step
    lineage = state.extra.get("lineage")
    trained = []  # fingerprints of the steps this call trains (the step ledger)
    try:
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
                if spec.weights_every and t % spec.weights_every == 0:
                    hist["w_step"].append(t)
                    hist["wsrank"].append(lm.weight_sranks(model))
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
            x, y = (a.to(dev) for a in corpus.batch(spec.seed, t, spec.batch, spec.model.ctx))
            if spec.term is None:
                loss = F.cross_entropy(fwd(x).flatten(0, 1), y.flatten())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                tv = 0.0
            else:
                logits, hs, _ = fwd(x, hidden=True)
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
            gn = float(torch.nn.utils.clip_grad_norm_(params, spec.clip, foreach=True))
            opt.step()
            hist["loss"].append(float(loss.detach()))
            hist["gnorm"].append(gn)
            hist["clipped"].append(gn > spec.clip)
            hist["term"].append(tv)
            if lineage is not None:
                lineage = lineage_step(lineage, spec, t)
                state.extra["lineage"] = lineage
                trained.append(lineage)
            state.step = t + 1
    finally:
        log_steps(trained)
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
    ds: DriverSpec,
    *,
    log=None,
    stop_at: int | None = None,
    root: Path | None = None,
    ckpt_every: int = 200,
    share_at: int | None = None,
) -> dict:
    """Run (or load) a driver. Returns its summary: history, detector result, and the path of the saved
    settled collapse (``None`` if it never settled). Killed runs resume from ``ckpt.pt``. A corrupt saved
    file (``driver.pt``, ``collapse.pt``, ``ckpt.pt``: content hash mismatch) is moved aside and the run
    trained again, from its checkpoint when that one is sound, never used.

    The run's plain first part (its first :func:`prefix_end` updates at alpha = 1 with no term, or the first
    ``share_at`` when given, as for the healthy run) is not trained here but taken from :func:`prefix`,
    which trains it once for every run that shares it; the detector is replayed over its measurements. The
    result is bit-identical to training the whole run here (``share_at=0`` does that; tests/test_engine.py
    checks it)."""
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
        det = Detector(
            ds.threshold,
            ds.window,
            ds.settle_steps,
            arm_step=spec.alpha_knots[1][0] if len(spec.alpha_knots) > 1 else 0,
        )
        P = prefix_end(spec) if share_at is None else share_at
        state = None
        if 0 < P < ds.steps and plain_until(spec, P - 1):
            state = _from_prefix(spec, P, det, log, root)
        if state is None:
            # trained from scratch: a fresh detector (the prefix's replay may have fed, even settled, this one)
            det = Detector(ds.threshold, ds.window, ds.settle_steps, arm_step=det.arm_step)
            state = new_state(spec)
            state.extra["det"] = det.to_dict()

    def on_measure(st, m):
        det = Detector(**st.extra["det"])
        if det.feed(st.step, m["srank"][-1]):
            save_state(st, d / "collapse.pt")
        st.extra["det"] = det.to_dict()
        s = det.settled
        k = st.step - s if s is not None else 0
        if 0 < k < ds.steps - s and k % MILESTONE_EVERY == 0 and _held_after(ds, s) is not None:
            _save_driver_tail(ds, st.to_dict() | {"final_probe": final_probe(st.model, spec)}, d, s, k)

    def before_save(out):
        out["key"] = key
        _save_tail_as_branch(ds, out, d)

    out = _train_and_save(spec, state, ds.steps, d, done, ckpt_every, on_measure, log, stop_at, before_save)
    return _summary(out, d)


def _train_and_save(
    spec, state, until, d: Path, done: Path, ckpt_every, on_measure, log, stop_at, before_save=None
):
    """The end every trained run shares: train to step ``until`` with a checkpoint in ``d`` (resumable),
    take the final probe, let ``before_save(out)`` add to the result, save it as ``done`` and remove the
    checkpoint. Returns the saved dict."""
    ck = d / "ckpt.pt"
    train(
        spec, state, until, ckpt=ck, ckpt_every=ckpt_every, on_measure=on_measure, log=log, stop_at=stop_at
    )
    out = state.to_dict()
    out["final_probe"] = final_probe(state.model, spec)
    if before_save is not None:
        before_save(out)
    save_state(out, done)
    store.remove_checked(ck)
    return out


def _held_after(ds: DriverSpec, s: int) -> RunSpec | None:
    """The spec of the untreated branch from the driver's collapse at step ``s`` when the driver itself went
    on held at one alpha with no term from ``s`` to its end (then its steps from ``s`` are that branch);
    else None."""
    spec = ds.run
    if spec.term is not None:
        return None
    a = spec.alpha(s)
    if any(spec.alpha(t) != a for t in range(s, ds.steps)):
        return None
    return replace(spec, alpha_knots=((s, a),), term=None)


def _save_tail_as_branch(ds: DriverSpec, out: dict, d: Path) -> None:
    """A driver that settled after its ramp ended went on held at one alpha: its steps from the collapse
    to its end are the untreated branch from its saved collapse (same spec, same batches). Save its end as
    that branch (of ``steps - settled`` steps), which a longer untreated branch then continues instead of
    training those steps again (its :data:`MILESTONE_EVERY`-step milestones are saved while it trains)."""
    s = out["extra"].get("det", {}).get("settled")
    if s is None or not (d / "collapse.pt").exists() or _held_after(ds, s) is None:
        return
    _save_driver_tail(ds, out, d, s, ds.steps - s)


def _save_driver_tail(ds: DriverSpec, out: dict, d: Path, s: int, n: int) -> None:
    """Save the driver's state ``out`` (at step ``s + n``, with its final probe) as the untreated branch of
    ``n`` steps from its collapse at step ``s``: the history from ``s`` on, in a branch's format, indexed on
    its trajectory."""
    held_spec = _held_after(ds, s)
    key = content_key("branch", d.name, s, held_spec, n)
    target = d.parent / key / "branch.pt"
    if not target.exists():
        h = out["hist"]
        i = h["m_step"].index(s)
        j = next((k for k, w in enumerate(h["w_step"]) if w >= s), len(h["w_step"]))
        hist = empty_hist()
        for k in ("m_step", "srank", "probe_loss", "alpha"):
            hist[k] = copy.deepcopy(h[k][i:])
        for k in ("loss", "gnorm", "clipped", "term"):
            hist[k] = copy.deepcopy(h[k][s:])
        hist["w_step"], hist["wsrank"] = copy.deepcopy(h["w_step"][j:]), copy.deepcopy(h["wsrank"][j:])
        branch_out = dict(out)
        branch_out.pop("key", None)
        branch_out["hist"] = hist
        branch_out["extra"] = {"start": s, "lineage": out["extra"].get("lineage")}
        save_state(branch_out, target)
    _index_branch(d.parent, trajectory_key(d.name, s, held_spec), n, key)


def prefix(spec: RunSpec, steps: int, *, log=None, root: Path | None = None) -> dict:
    """Train-or-load the plain run of ``spec``'s model and seed (alpha = 1, no term) for its first ``steps``
    steps: the saved state at the start of step ``steps`` (its measurement not yet taken), shared by the
    healthy run and by every driver of that model and seed whose ramp starts there. Cached by content under
    a lock, so two workers that need it at once train it once."""
    plain = replace(spec, alpha_knots=((0, 1.0),), term=None)
    key = content_key("prefix", plain, steps)
    d = Path(root or states_dir()) / key
    done = d / "prefix.pt"
    with store.lock(d.parent / "locks" / f"prefix-{key}.lock"):
        if done.exists():
            out = _load_or_quarantine(done, "training the shared prefix again", log)
            if out is not None:
                return out
        state = _resume(plain, d / "ckpt.pt", log)
        if state is None:
            state = new_state(plain)
        if log is not None:
            log(f"shared prefix: steps 0-{steps} of seed {spec.seed} (alpha = 1), trained once")
        train(plain, state, steps, ckpt=d / "ckpt.pt", log=log)
        _drop_measurement_at(state.hist, steps)
        out = state.to_dict()
        out["key"] = key
        save_state(out, done)
        store.remove_checked(d / "ckpt.pt")
        return out


def _drop_measurement_at(hist: dict, t: int) -> None:
    """Remove the measurement taken at step ``t`` (the last one) from a history."""
    if hist["m_step"] and hist["m_step"][-1] == t:
        for k in ("m_step", "srank", "probe_loss", "alpha"):
            hist[k].pop()
    if hist.get("w_step") and hist["w_step"][-1] == t:
        hist["w_step"].pop()
        hist["wsrank"].pop()


def _from_prefix(spec: RunSpec, P: int, det: Detector, log, root) -> TrainState | None:
    """The state of ``spec`` at the start of step ``P`` from the shared prefix, with the detector replayed
    over its measurements; None (train from scratch) when the detector would already have settled inside
    the prefix, since the collapse state it saves would be missing."""
    pd = prefix(spec, P, log=log, root=root)
    for t, sr in zip(pd["hist"]["m_step"], pd["hist"]["srank"]):
        if det.feed(t, sr[-1]):
            return None
    state = state_from_dict(spec, pd)
    state.extra = {"lineage": pd["extra"]["lineage"], "det": det.to_dict()}
    return state


def final_probe(model: TinyLM, spec: RunSpec) -> dict:
    """The probe measurement of every block (with attention entropy) at a run's end."""
    probe = lm.corpus().probe(spec.seed, spec.probe_batch, spec.model.ctx)
    return probe_measure(model, tuple(a.to(spec.device) for a in probe), entropy=True)


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


def healthy(
    spec: RunSpec, steps: int, *, log=None, root: Path | None = None, share_at: int | None = None
) -> dict:
    """A run with the skip intact (alpha = 1 throughout) from the same initialisation and batches; its
    history (probe srank and loss every ``measure_every`` steps) is what branches are compared with. Its
    detector is armed from step 0, so early dips below the threshold are recorded (and their healing).
    ``share_at``: its first ``share_at`` updates come from the shared :func:`prefix` (the drivers'
    :func:`prefix_end`), by default that of ``spec``'s own alpha knots."""
    P = prefix_end(spec) if share_at is None else share_at
    spec = replace(spec, alpha_knots=((0, 1.0),), term=None)
    ds = DriverSpec(spec, steps, threshold=1.5)
    return driver(ds, log=log, root=root, share_at=P)


MILESTONE_EVERY = 100  # a held branch (one alpha, no term) saves its state every this many steps


def held(spec: RunSpec) -> bool:
    """A branch held at one alpha with no term: the trajectory others continue (delayed switches start from
    the untreated one at their delay, a short run at a switch alpha is the start of the held switch)."""
    return len(spec.alpha_knots) == 1 and spec.term is None


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
    knots and term use absolute step numbers). Cached by the parent's key, the spec and ``steps``; a corrupt
    saved branch is moved aside and trained again; a corrupt parent raises
    :class:`rankcollapse.store.CorruptState`.

    Nothing is trained twice along one trajectory: a branch starts from the longest shorter branch of the
    same parent and spec already saved, and a :func:`held` branch saves its state every
    :data:`MILESTONE_EVERY` steps as the finished shorter branch of that length (bit-identical to training
    it on its own; tests/test_engine.py checks both)."""
    pd = load_dict(Path(parent))
    root = Path(root or states_dir())

    def key_of(n: int) -> str:
        return content_key("branch", Path(parent).parent.name, pd["step"], spec, n)

    tkey = trajectory_key(Path(parent).parent.name, pd["step"], spec)
    if held(spec):  # one trajectory at a time: a second request continues what the first saved
        with store.lock(root / "locks" / f"trajectory-{tkey}.lock"):
            return _branch(parent, pd, spec, steps, key_of, tkey, root, log, stop_at, ckpt_every)
    return _branch(parent, pd, spec, steps, key_of, tkey, root, log, stop_at, ckpt_every)


def trajectory_key(parent_dir: str, start: int, spec: RunSpec) -> str:
    """The trajectory a branch lies on: its parent (the saved state's folder and step) and its spec; branches
    of one trajectory differ only in length."""
    return content_key("trajectory", parent_dir, start, spec)


def _index_branch(root: Path, tkey: str, n: int, key: str) -> None:
    """Note in the trajectory's index (``trajectories/<tkey>/<n>``, holding the branch's key) that the branch
    of ``n`` steps is saved, so a longer branch finds the longest saved one without searching."""
    idx = Path(root) / "trajectories" / tkey
    idx.mkdir(parents=True, exist_ok=True)
    f = idx / str(n)
    if not f.exists():
        tmp = idx / f".{n}.{os.getpid()}.tmp"
        tmp.write_text(key)
        os.replace(tmp, f)


def _branch(parent, pd, spec, steps, key_of, tkey, root, log, stop_at, ckpt_every) -> dict:
    key = key_of(steps)
    d = root / key
    done = d / "branch.pt"
    if done.exists():
        out = _load_or_quarantine(done, "training the branch again", log)
        if out is not None:
            return _branch_summary(key, out)
    state = _resume(spec, d / "ckpt.pt", log)
    start = pd["step"]
    if state is None:
        state = _longest_shorter(spec, steps, key_of, tkey, root, log)
    if state is None:
        state = state_from_dict(spec, pd)
        state.hist = empty_hist()
        state.extra = {"start": start, "lineage": pd.get("extra", {}).get("lineage")}

    def on_measure(st, m):
        k = st.step - start
        if held(spec) and 0 < k < steps and k % MILESTONE_EVERY == 0:
            mk = root / key_of(k) / "branch.pt"
            if not mk.exists():
                out = st.to_dict()
                out["final_probe"] = final_probe(st.model, spec)
                save_state(out, mk)
                _index_branch(root, tkey, k, key_of(k))

    out = _train_and_save(spec, state, start + steps, d, done, ckpt_every, on_measure, log, stop_at)
    _index_branch(root, tkey, steps, key)
    return _branch_summary(key, out)


def _branch_summary(key: str, out: dict) -> dict:
    return {
        "key": key,
        "hist": out["hist"],
        "start": out["extra"]["start"],
        "step": out["step"],
        "final_probe": out["final_probe"],
    }


def _longest_shorter(spec: RunSpec, steps: int, key_of, tkey: str, root: Path, log) -> TrainState | None:
    """The state of the longest saved branch of the same trajectory (parent and spec) shorter than
    ``steps``, ready to continue (its last measurement dropped: the continuing run takes it again); None when
    there is none. The lengths come from the trajectory's index (:func:`_index_branch`); each candidate is
    checked by its own content key and hash."""
    idx = Path(root) / "trajectories" / tkey
    lengths = (
        sorted((int(f.name) for f in idx.iterdir() if f.name.isdigit()), reverse=True)
        if idx.is_dir()
        else []
    )
    for k in (n for n in lengths if 0 < n < steps):
        f = root / key_of(k) / "branch.pt"
        if not f.exists():
            continue
        out = _load_or_quarantine(f, "not continuing from it", log)
        if out is None:
            continue
        state = state_from_dict(spec, out)
        _drop_measurement_at(state.hist, out["step"])
        if log is not None:
            log(f"continuing the saved branch of {k} steps to {steps}")
        return state
    return None


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
