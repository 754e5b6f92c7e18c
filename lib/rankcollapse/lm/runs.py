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

from .. import store
from ..jobs import run_parallel
from . import training as tr
from .model import LMConfig


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


def prepare_events(p, drivers: dict, healthy: dict) -> list[dict]:
    """For every seed whose driver settled: the switch step, the healthy srank and Q there (s0), the recovery
    threshold, and beta of each term calibrated to add Lambda at the saved state."""
    ev = []
    for s in p.seeds:
        d = drivers[s]
        if d["collapse"] is None:
            continue
        t = d["det"]["settled"]
        hs = median_around(healthy[s]["hist"], t)
        s0 = q_of(hs)
        betas, raws = {}, {}
        for kind in tr.TERMS:
            betas[kind], raws[kind] = tr.calibrate(d["collapse"], kind, p.added_loss, p.alpha_min, s, s0)
        ev.append(
            {
                "seed": s,
                "start": t,
                "collapse": d["collapse"],
                "healthy_srank": hs,
                "s0": s0,
                "rec_threshold": p.threshold + p.recover_frac * (hs - p.threshold),
                "betas": betas,
                "raws": raws,
            }
        )
    return ev


def recovery(hist: dict, start: int, threshold: float, k: int) -> int | None:
    """Steps after the switch until the ``k``-measurement median of the last block's srank reaches the
    threshold (None: never within the branch)."""
    med = tr.rolling_median(last_srank(hist), k)
    for t, m in zip(hist["m_step"], med):
        if m >= threshold:
            return t - start
    return None
