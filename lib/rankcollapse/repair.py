"""Part III (Hofmann & Mäder) shared pieces: the driver parameters every repair chapter declares, the runs
they describe, and the train-or-load helpers that make the chapters share trained states by content.

Every repair chapter declares :data:`DRIVER_PARAMS` in its schema. Two chapters with the same values of
these parameters ask :func:`rankcollapse.train.driver` for the same :class:`~rankcollapse.train.DriverSpec`,
so the second one loads the first one's saved collapses from ``build/states/<key>/`` instead of training
them again — it never reads another chapter's output folder.
"""
from __future__ import annotations

import hashlib
import math
import statistics
from contextlib import contextmanager

from . import store
from . import train as tr
from .lm import LMConfig
from .params import Param

DRIVER_PARAMS = [
    Param("depth", "int", "blocks of the driven network", {"smoke": 12, "full": 12, "paper": 12}, low=1, high=96),
    Param("d_model", "int", "width", {"smoke": 48, "full": 48, "paper": 128}, low=4, high=4096),
    Param("heads", "int", "attention heads", 4, low=1, high=64),
    Param("ctx", "int", "context length (bytes)", {"smoke": 32, "full": 32, "paper": 256}, low=2, high=4096),
    Param("batch", "int", "sequences per training batch", {"smoke": 8, "full": 16, "paper": 16}, low=1, high=4096),
    Param("lr", "float", "AdamW learning rate", 1e-3, low=1e-6, high=1.0),
    # smoke: a faithful miniature of full. The network trains 500 steps with the skip intact (its last-block srank
    # is near 2.9 then, as full's before its ramp, where at 100 steps it was 1.5, at the threshold; after 300 steps,
    # 2.1-2.5, it crossed the threshold early in a fast ramp, at alpha 0.4-0.5, so that no recovery could lie 3x
    # above it), then ramps over 200 steps to alpha_min = 0: every smoke driver tried (2 seeds x 3 kernel
    # variants) settled there, while at 0.01 two of six healed and one never settled, and at 0.02 one of four:
    # at this batch size a floor above 0 is the knife-edge itself. Two seeds and branches of 400 steps (two ramp
    # lengths): with one event, the hinge's fade (H3) and whether a held switch recovers within the branch (H7)
    # changed with the floating-point kernels.
    Param("ramp_start", "int", "driver: alpha = 1 until this step", {"smoke": 500, "full": 400, "paper": 1500},
          low=0, high=10**7),
    Param("ramp_end", "int", "driver: alpha reaches alpha_min at this step", {"smoke": 700, "full": 800, "paper": 3000},
          low=1, high=10**7),
    Param("alpha_min", "float", "driver: the skip scale's floor", {"smoke": 0.0, "full": 0.02, "paper": 0.02},
          low=0.0, high=1.0),
    Param("tail_steps", "int", "driver: steps held at alpha_min after the ramp (the final srank is read there)",
          {"smoke": 200, "full": 300, "paper": 1000}, low=0, high=10**7),
    Param("branch_steps", "int", "steps of each treatment branch (also how far the healthy run goes past the driver)",
          {"smoke": 400, "full": 600, "paper": 4000}, low=10, high=10**7),
    Param("seeds", "int_list", "one driver (collapse event) and one healthy network per seed",
          {"smoke": [0, 1], "full": [0, 1, 2], "paper": [0, 1, 2, 3, 4, 5, 6, 7]}, low=0, high=2**31 - 1),
    Param("threshold", "float", "collapse threshold on the last block's srank", 1.5, low=1.0, high=100.0),
    Param("settle_steps", "int", "a collapse is settled this many steps after the first crossing", 100, low=0),
    Param("window", "int", "measurements in the settling median", 10, low=1, high=1000),
    Param("workers", "int", "parallel processes (one thread each) for independent runs", 2, low=1, high=64),
]


def validate_driver(p) -> None:
    from .params import ParameterError
    if p.ramp_end <= p.ramp_start:
        raise ParameterError(f"parameter 'ramp_end' = {p.ramp_end} must be larger than 'ramp_start' = {p.ramp_start}")
    for name in ("ramp_start", "ramp_end", "tail_steps", "branch_steps"):
        if getattr(p, name) % 10:
            raise ParameterError(f"parameter '{name}' = {getattr(p, name)} must be a multiple of 10 "
                                 "(the measurement interval)")
    if p.d_model % p.heads:
        raise ParameterError(f"parameter 'd_model' = {p.d_model} must be divisible by 'heads' = {p.heads}")


def run_spec(p, seed: int, depth: int | None = None, alpha_min: float | None = None) -> tr.RunSpec:
    cfg = LMConfig(depth=depth or p.depth, d_model=p.d_model, heads=p.heads, ctx=p.ctx)
    am = p.alpha_min if alpha_min is None else alpha_min
    return tr.RunSpec(model=cfg, seed=seed, batch=p.batch, lr=p.lr, probe_batch=16,
                      alpha_knots=tr.driver_knots(p.ramp_start, p.ramp_end, am))


def driver_steps(p) -> int:
    return p.ramp_end + p.tail_steps


def driver_spec(p, seed: int, depth: int | None = None, alpha_min: float | None = None) -> tr.DriverSpec:
    return tr.DriverSpec(run_spec(p, seed, depth, alpha_min), driver_steps(p), p.threshold, p.window, p.settle_steps)


def healthy_steps(p) -> int:
    """The healthy network runs as far as any branch can reach: driver length plus branch length."""
    return driver_steps(p) + p.branch_steps


def driver_job(p, seed, depth=None, alpha_min=None) -> dict:
    return {"ds": driver_spec(p, seed, depth, alpha_min)}


def healthy_job(p, seed) -> dict:
    return {"spec": run_spec(p, seed), "steps": healthy_steps(p)}


def main_runs(p, log=None) -> tuple[dict, dict]:
    """Train-or-load the main drivers and the healthy networks of every seed (in parallel).

    Returns ({seed: driver summary}, {seed: healthy summary})."""
    jobs, fns, labels = [], [], []
    for s in p.seeds:
        jobs.append(("driver", driver_job(p, s))); labels.append(f"driver seed {s}")
        jobs.append(("healthy", healthy_job(p, s))); labels.append(f"healthy seed {s}")
    out = tr.run_parallel(_dispatch, [{"kind": k, "kw": kw} for k, kw in jobs], p.workers, log, labels)
    drivers = {s: out[2 * i] for i, s in enumerate(p.seeds)}
    healthy = {s: out[2 * i + 1] for i, s in enumerate(p.seeds)}
    return drivers, healthy


@contextmanager
def job_lock(kind: str, kw: dict):
    """An exclusive lock per job under ``build/states/locks/``: two chapters running at once (``rcbook book -j 2``)
    that ask for the same run train it once; the second waits and then loads it."""
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
    if kind == "trace":
        from .gradpath import trace_weights
        return trace_weights(**kw)
    raise ValueError(kind)


def chain(parent: str, segments: list) -> list[dict]:
    """Branches one after another: segment ``i`` continues the saved end of segment ``i - 1`` (the first continues
    ``parent``). ``segments`` = ``[(spec, steps), ...]``. Each segment is cached by content like any branch, so the
    end of segment ``i`` is a saved state (``branch_path``) other branches can start from. Returns the summaries."""
    out = []
    for spec, steps in segments:
        with job_lock("branch", {"parent": parent, "spec": spec, "steps": steps}):  # shared prefixes train once
            b = tr.branch(parent, spec, steps)
        out.append(b)
        parent = str(branch_path(b))
    return out


def branch_path(summary: dict):
    """The saved end state of a branch summary."""
    return tr.states_dir() / summary["key"] / "branch.pt"


def run_jobs(jobs: list[tuple[str, dict]], workers: int, log=None, labels=None) -> list:
    return tr.run_parallel(_dispatch, [{"kind": k, "kw": kw} for k, kw in jobs], workers, log, labels)


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
    return statistics.median(s[max(0, i - k + 1): i + 1])


def q_of(srank: float) -> float:
    return math.sqrt(max(srank - 1.0, 0.0))


def spearman(x, y) -> float | None:
    """Spearman rank correlation (None with fewer than 4 pairs, or when either side is constant: nothing to rank)."""
    if len(x) < 4 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    from scipy.stats import spearmanr
    return float(spearmanr(x, y).statistic)


def html_table(header: list[str], rows: list[list]) -> str:
    """A plain HTML table (the book renders Markdown outputs as CommonMark, which has no tables)."""
    from html import escape
    th = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="table"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
