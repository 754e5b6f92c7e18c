"""The study's runs from a saved start: the run spec of a seed (optionally at another depth or floor), the
driver and healthy specs and jobs built on it, and the main drivers and healthy networks of every seed."""

from __future__ import annotations

from ..lm import training as tr
from ..lm.model import LMConfig
from .spec import StudySpec
from .stages import run_jobs


def run_spec(
    study: StudySpec, seed: int, depth: int | None = None, alpha_min: float | None = None
) -> tr.RunSpec:
    """The driver's run of ``seed`` (its model, optimiser and schedule), at ``depth`` or ``alpha_min`` when
    given instead of the driver's."""
    d = study.driver
    cfg = LMConfig(depth=depth or d.depth, d_model=d.d_model, heads=d.heads, ctx=d.ctx)
    am = d.alpha_min if alpha_min is None else alpha_min
    return tr.RunSpec(
        model=cfg,
        seed=seed,
        batch=d.batch,
        lr=d.lr,
        probe_batch=16,
        alpha_knots=tr.driver_knots(d.ramp_start, d.ramp_end, am),
        device=study.device,
        engine=tr.resolve_engine(d.engine, study.device),
    )


def driver_steps(study: StudySpec) -> int:
    return study.driver.steps


def driver_spec(
    study: StudySpec, seed: int, depth: int | None = None, alpha_min: float | None = None
) -> tr.DriverSpec:
    d = study.driver
    return tr.DriverSpec(
        run_spec(study, seed, depth, alpha_min), driver_steps(study), d.threshold, d.window, d.settle_steps
    )


def healthy_steps(study: StudySpec) -> int:
    """The healthy network runs as far as any branch can reach: driver length plus branch length."""
    return driver_steps(study) + study.branch.steps


def driver_job(study: StudySpec, seed, depth=None, alpha_min=None) -> dict:
    return {"ds": driver_spec(study, seed, depth, alpha_min)}


def healthy_job(study: StudySpec, seed) -> dict:
    return {
        "spec": run_spec(study, seed),
        "steps": healthy_steps(study),
        "share_at": tr.prefix_end(run_spec(study, seed)),
    }


def main_runs(study: StudySpec, log=None) -> tuple[dict, dict]:
    """Train-or-load the main drivers and the healthy networks of every seed (in parallel).

    Returns ({seed: driver summary}, {seed: healthy summary})."""
    seeds = study.driver.seeds
    jobs, labels = [], []
    for s in seeds:
        jobs.append(("driver", driver_job(study, s)))
        labels.append(f"driver seed {s}")
        jobs.append(("healthy", healthy_job(study, s)))
        labels.append(f"healthy seed {s}")
    out = run_jobs(jobs, study.workers, log, labels)
    drivers = {s: out[2 * i] for i, s in enumerate(seeds)}
    healthy = {s: out[2 * i + 1] for i, s in enumerate(seeds)}
    return drivers, healthy
