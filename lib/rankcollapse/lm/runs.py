"""Part III (Hofmann & Mäder) shared pieces: the runs the driver parameters describe, the treatment branches,
and the train-or-load helpers that make the chapters share trained states by content.

Every repair chapter declares the driver parameters (:data:`rankcollapse.chapters.common.DRIVER_PARAMS`) in
its schema; ``p`` below is any object with those attributes. Two chapters with the same values of these
parameters ask :func:`rankcollapse.lm.training.driver` for the same
:class:`~rankcollapse.lm.training.DriverSpec`, so the second one loads the first one's saved collapses from
``build/states/<key>/`` instead of training them again — it never reads another chapter's output folder.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from contextlib import contextmanager

import torch

from .. import store
from ..jobs import run_parallel
from . import training as tr
from .model import LMConfig, corpus


def run_spec(p, seed: int, depth: int | None = None, alpha_min: float | None = None) -> tr.RunSpec:
    cfg = LMConfig(depth=depth or p.depth, d_model=p.d_model, heads=p.heads, ctx=p.ctx)
    am = p.alpha_min if alpha_min is None else alpha_min
    return tr.RunSpec(
        model=cfg,
        seed=seed,
        batch=p.batch,
        lr=p.lr,
        probe_batch=16,
        alpha_knots=tr.driver_knots(p.ramp_start, p.ramp_end, am),
        device=train_device(p),
        engine=tr.resolve_engine(getattr(p, "engine", "eager"), train_device(p)),
    )


def train_device(p) -> str:
    """Where the chapter's training jobs run: the chapter's resolved ``device`` (``cpu`` or ``cuda``); it is
    part of every run's spec, so states trained on a GPU are never mistaken for CPU ones."""
    dev = str(getattr(p, "device", "cpu") or "cpu")
    return "cuda" if dev.startswith("cuda") else "cpu"


def driver_steps(p) -> int:
    return p.ramp_end + p.tail_steps


def driver_spec(p, seed: int, depth: int | None = None, alpha_min: float | None = None) -> tr.DriverSpec:
    return tr.DriverSpec(
        run_spec(p, seed, depth, alpha_min), driver_steps(p), p.threshold, p.window, p.settle_steps
    )


def healthy_steps(p) -> int:
    """The healthy network runs as far as any branch can reach: driver length plus branch length."""
    return driver_steps(p) + p.branch_steps


def driver_job(p, seed, depth=None, alpha_min=None) -> dict:
    return {"ds": driver_spec(p, seed, depth, alpha_min)}


def healthy_job(p, seed) -> dict:
    return {
        "spec": run_spec(p, seed),
        "steps": healthy_steps(p),
        "share_at": tr.prefix_end(run_spec(p, seed)),
    }


def main_runs(p, log=None) -> tuple[dict, dict]:
    """Train-or-load the main drivers and the healthy networks of every seed (in parallel).

    Returns ({seed: driver summary}, {seed: healthy summary})."""
    jobs, labels = [], []
    for s in p.seeds:
        jobs.append(("driver", driver_job(p, s)))
        labels.append(f"driver seed {s}")
        jobs.append(("healthy", healthy_job(p, s)))
        labels.append(f"healthy seed {s}")
    out = run_parallel(_dispatch, [{"kind": k, "kw": kw} for k, kw in jobs], p.workers, log, labels)
    drivers = {s: out[2 * i] for i, s in enumerate(p.seeds)}
    healthy = {s: out[2 * i + 1] for i, s in enumerate(p.seeds)}
    return drivers, healthy


@contextmanager
def job_lock(kind: str, kw: dict):
    """An exclusive lock per job under ``build/states/locks/``: two chapters running at once
    (``rcbook book -j 2``) that ask for the same run train it once; the second waits and then loads it."""
    name = hashlib.sha256(repr((kind, sorted(kw.items()))).encode()).hexdigest()[:24]
    with store.lock(tr.states_dir() / "locks" / f"{name}.lock"):
        yield


def _dispatch(kind: str, kw: dict):
    with job_lock(kind, kw):
        return _run(kind, kw)


def _run(kind: str, kw: dict):
    if kind == "driver":
        return tr.driver(**kw)
    if kind == "healthy":
        return tr.healthy(**kw)
    if kind == "branch":
        return tr.branch(**kw)
    if kind == "chain":
        return chain(**kw)
    raise ValueError(kind)


def chain(parent: str, segments: list) -> list[dict]:
    """Branches one after another: segment ``i`` continues the saved end of segment ``i - 1`` (the first
    continues ``parent``). ``segments`` = ``[(spec, steps), ...]``. Each segment is cached by content like
    any branch, so the end of segment ``i`` is a saved state (``branch_path``) other branches can start from.
    Returns the summaries."""
    out = []
    for spec, steps in segments:
        with job_lock(
            "branch", {"parent": parent, "spec": spec, "steps": steps}
        ):  # shared prefixes train once
            b = tr.branch(parent, spec, steps)
        out.append(b)
        parent = str(branch_path(b))
    return out


def branch_path(summary: dict):
    """The saved end state of a branch summary."""
    return tr.states_dir() / summary["key"] / "branch.pt"


def run_jobs(jobs: list[tuple[str, dict]], workers: int, log=None, labels=None) -> list:
    return run_parallel(_dispatch, [{"kind": k, "kw": kw} for k, kw in jobs], workers, log, labels)


# -- reading histories ------------------------------------------------------------------------------
def last_srank(hist: dict) -> list[float]:
    return [s[-1] for s in hist["srank"]]


def at_step(hist: dict, step: int, key: str = "srank", block: int = -1):
    """Value of a measured series at the measurement step ``step`` (exact match required)."""
    i = hist["m_step"].index(step)
    v = hist[key][i]
    return v[block] if isinstance(v, list) else v


def median_around(hist: dict, step: int, k: int = 10) -> float:
    """Median of the last block's srank over the ``k`` measurements ending at ``step``."""
    i = hist["m_step"].index(step)
    s = last_srank(hist)
    return statistics.median(s[max(0, i - k + 1) : i + 1])


def q_of(srank: float) -> float:
    return math.sqrt(max(srank - 1.0, 0.0))


def html_table(header: list[str], rows: list[list]) -> str:
    """A plain HTML table (the book renders Markdown outputs as CommonMark, which has no tables)."""
    from html import escape

    th = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="table"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


# -- treatment branches from a saved collapse ---------------------------------------------------------
TREATMENTS = ("penalty-1x", "penalty-4x", "hinge-1x", "hinge-4x", "cosine-1x", "untreated", "reversed-ramp")
LOSS_TERMS = ("penalty-1x", "penalty-4x", "hinge-1x", "hinge-4x", "cosine-1x")


def branch_spec(p, seed: int, start: int, treatment: str, betas: dict, s0: float) -> tr.RunSpec:
    """The treatment branch from the saved collapse of ``seed`` at step ``start``; a loss term's beta is its
    multiplier times ``betas[kind]`` (the 1x beta of its kind, :func:`prepare_events`)."""
    base = run_spec(p, seed)
    if treatment == "reversed-ramp":
        knots = ((start, p.alpha_min), (start + (p.ramp_end - p.ramp_start), 1.0))
        return tr.RunSpec(**{**base.__dict__, "alpha_knots": knots})
    knots = ((start, p.alpha_min),)
    term = None
    if treatment in LOSS_TERMS:
        kind, mult = treatment.split("-")
        term = tr.Term(kind, betas[kind] * float(mult[:-1]), s0 if kind == "hinge" else 0.0)
    return tr.RunSpec(**{**base.__dict__, "alpha_knots": knots, "term": term})


LITERAL_FRAC = 0.5  # the paper's rule: recovered when the 50-step median reaches half the healthy srank
CALIB_STEPS = 10  # beta is solved on the branch's first this many training batches


def prepare_events(p, drivers: dict, healthy: dict, log=None) -> list[dict]:
    """For every seed whose driver settled: the switch step, the healthy srank and Q there (s0), the
    recovery thresholds, and each loss term's beta solved so that it adds Lambda when it is switched on.

    Keys of each event: ``seed``, ``start`` (the switch step), ``collapse`` (the saved state),
    ``healthy_srank`` (10-measurement median of the healthy network at ``start``), ``s0`` (its Q),
    ``rec_threshold`` (the book's stricter rule: ``threshold + recover_frac * (healthy_srank -
    threshold)``), ``rec_threshold_literal`` (the paper's: ``LITERAL_FRAC * healthy_srank``), ``betas``
    (the 1x beta of each kind, :func:`switch_raws`), ``calib`` (per kind the raw term on each calibration
    batch, their mean, and what the former calibration on the probe batch would have set)."""
    ev = []
    steps = int(getattr(p, "calib_steps", CALIB_STEPS))
    for s in p.seeds:
        d = drivers[s]
        if d["collapse"] is None:
            continue
        t = d["det"]["settled"]
        hs = median_around(healthy[s]["hist"], t)
        s0 = q_of(hs)
        raws = switch_raws(d["collapse"], s0, p.alpha_min, s, t, steps, p.batch, run_spec(p, s).engine)
        betas, calib = {}, {}
        for kind, r in raws.items():
            raw = statistics.fmean(r)
            if raw <= 0:
                raise ValueError(f"seed {s}: term {kind} is zero at the saved state, so it cannot be set")
            betas[kind] = p.added_loss / raw
            probe_raw = tr.calibrate(d["collapse"], kind, p.added_loss, p.alpha_min, s, s0)[1]
            calib[kind] = {"raws": r, "raw": raw, "probe_raw": probe_raw}
        ev.append(
            {
                "seed": s,
                "start": t,
                "collapse": d["collapse"],
                "healthy_srank": hs,
                "s0": s0,
                "rec_threshold": p.threshold + p.recover_frac * (hs - p.threshold),
                "rec_threshold_literal": LITERAL_FRAC * hs,
                "betas": betas,
                "calib": calib,
            }
        )
    return ev


# -- calibration: beta such that the term adds its target when it is switched on --------------------------
def switch_raws(
    path, s0: float, alpha: float, seed: int, start: int, steps: int, batch: int, engine: str = "eager"
) -> dict:
    """Each raw term (beta = 1; the hinge with ``s0``) of the saved state at ``path`` on the training
    batches of the branch's first ``steps`` updates (steps ``start`` .. ``start + steps - 1``, the batches
    the training loop draws there), before any update: ``{kind: [raw per batch]}``.

    At the saved state the added loss is ``beta * raw``, linear in beta, so ``beta = target / mean raw``
    makes the term add its target there, averaged over those batches, exactly; the former calibration took
    ``raw`` on the probe batch instead, whose value differs from the training batches'. What the term adds
    over the following updates is its response, not its setting: the branch's history records it
    (:func:`added_loss`). Solving beta for that response by trial branches was tried and dropped: from a
    collapsed state it is not a smooth function of beta (smoke, avx2 kernels, seed 0, hinge 1x, 10 updates:
    beta 0.0854, 0.0912, 0.0928, 0.0964, 0.0976 added 0.0875, 0.0935, 0.1087, 0.1054, 0.1157 against 0.1).

    The raws are taken through the forward the branch trains with (``engine``, :func:`tr.forward_of`), with
    gradients enabled as in a training step: the compiled forward rounds otherwise than the eager one, and
    at full a calibration taken eagerly missed the compiled branch's first term by up to 1%
    (``calibration_batches_aligned`` false)."""
    m = tr.load_model(path, alpha)
    fwd = tr.forward_of(m, engine)
    c = corpus()
    out = {k: [] for k in tr.TERMS}
    with torch.no_grad() if engine == "eager" else torch.enable_grad():
        for t in range(start, start + steps):
            x, _ = c.batch(seed, t, batch, m.cfg.ctx)
            _, hs, _ = fwd(x, hidden=True)
            for k in tr.TERMS:
                out[k].append(float(tr.term_value(tr.Term(k, 1.0, s0), hs).detach()))
    return out


def calib_target(p, treatment: str) -> float:
    """The added loss a loss-term treatment is set to: its multiplier times Lambda (``p.added_loss``)."""
    return float(treatment.split("-")[1][:-1]) * p.added_loss


def added_loss(hist: dict, steps: int = CALIB_STEPS) -> float:
    """What a branch's term added over its first ``steps`` updates: the mean of ``beta * raw``
    (``hist["term"]``, taken on training batch ``t`` before update ``t``)."""
    return statistics.fmean(hist["term"][:steps])


def recovery(hist: dict, start: int, threshold: float, k: int) -> int | None:
    """Steps after the switch until the ``k``-measurement median of the last block's srank reaches the
    threshold (None: never within the branch)."""
    med = tr.rolling_median(last_srank(hist), k)
    for t, m in zip(hist["m_step"], med):
        if m >= threshold:
            return t - start
    return None


# -- controls (repair-path) ---------------------------------------------------------------------------
def held_control_job(p, seed: int, alpha: float, steps: int, depth: int | None = None) -> dict:
    """A control driver: the model and seed of ``p`` (or another ``depth``) ramped from ``ramp_start`` to
    ``ramp_end`` only down to ``alpha`` and held there until step ``steps``. Its first ``ramp_start`` updates
    are the shared plain prefix of its model and seed; its detector says whether it collapsed (a control that
    did is no control). With ``alpha = p.alpha_min`` and ``steps = driver_steps(p)`` it is
    :func:`driver_job`'s run (shared by content)."""
    return {
        "ds": tr.DriverSpec(run_spec(p, seed, depth, alpha), steps, p.threshold, p.window, p.settle_steps)
    }


def control_collapsed(summary: dict, threshold: float, k: int = 10) -> bool:
    """Whether a control driver collapsed: its detector settled, or the median of its last ``k``
    measurements of the last block's srank lies below ``threshold``."""
    h = summary["hist"]
    return summary["det"].get("settled") is not None or median_around(h, h["m_step"][-1], k) < threshold
