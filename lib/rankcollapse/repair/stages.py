"""Training a stage of the study's jobs: each job (a driver, a healthy run, a branch from a saved state, a
chain of branches) alone, in ``workers`` processes, under a lock per job so that two chapters running at once
train a shared run once."""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

from .. import store
from ..jobs import run_parallel
from ..lm import training as tr
from .spec import StudySpec


def run_stage(study: StudySpec, jobs: list[tuple[str, dict]], log=None, labels=None) -> list:
    """A chapter's stage of training jobs (``[(kind, kwargs), ...]``) on ``study.workers`` processes, each
    job alone. Results in job order."""
    return run_jobs(jobs, study.workers, log, labels)


def run_jobs(jobs: list[tuple[str, dict]], workers: int, log=None, labels=None) -> list:
    return run_parallel(_dispatch, [{"kind": k, "kw": kw} for k, kw in jobs], workers, log, labels)


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
