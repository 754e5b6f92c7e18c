"""The treatment branches from a saved collapse: their names, the loss terms among them, the branch spec of
each (a loss term's beta its multiplier times the 1x beta of its kind), the added loss a loss term is set to,
and what a branch's term added over its first updates."""

from __future__ import annotations

import statistics

from ..lm import training as tr
from .drivers import run_spec
from .spec import CALIB_STEPS, RecoverySettings, StudySpec

TREATMENTS = ("penalty-1x", "penalty-4x", "hinge-1x", "hinge-4x", "cosine-1x", "untreated", "reversed-ramp")
LOSS_TERMS = ("penalty-1x", "penalty-4x", "hinge-1x", "hinge-4x", "cosine-1x")


def branch_spec(
    study: StudySpec, seed: int, start: int, treatment: str, betas: dict, s0: float
) -> tr.RunSpec:
    """The treatment branch from the saved collapse of ``seed`` at step ``start``; a loss term's beta is its
    multiplier times ``betas[kind]`` (the 1x beta of its kind, :func:`rankcollapse.repair.events
    .prepare_events`)."""
    d = study.driver
    base = run_spec(study, seed)
    if treatment == "reversed-ramp":
        knots = ((start, d.alpha_min), (start + (d.ramp_end - d.ramp_start), 1.0))
        return tr.RunSpec(**{**base.__dict__, "alpha_knots": knots})
    knots = ((start, d.alpha_min),)
    term = None
    if treatment in LOSS_TERMS:
        kind, mult = treatment.split("-")
        term = tr.Term(kind, betas[kind] * float(mult[:-1]), s0 if kind == "hinge" else 0.0)
    return tr.RunSpec(**{**base.__dict__, "alpha_knots": knots, "term": term})


def calib_target(recovery: RecoverySettings, treatment: str) -> float:
    """The added loss a loss-term treatment is set to: its multiplier times Lambda (``added_loss``)."""
    return float(treatment.split("-")[1][:-1]) * recovery.added_loss


def added_loss(hist: dict, steps: int = CALIB_STEPS) -> float:
    """What a branch's term added over its first ``steps`` updates: the mean of ``beta * raw``
    (``hist["term"]``, taken on training batch ``t`` before update ``t``)."""
    return statistics.fmean(hist["term"][:steps])


def branch_job(study: StudySpec, event: dict, treatment: str) -> dict:
    """The training job of ``treatment``'s branch from ``event``'s saved collapse
    (:func:`rankcollapse.repair.events.collapse_events`; a loss term also needs the event's ``betas``,
    :func:`rankcollapse.repair.events.prepare_events`): ``study.branch.steps`` updates under
    :func:`branch_spec`. Every chapter that asks for a branch builds it here, so the same branch has the same
    content key and is trained once (``untreated`` and ``reversed-ramp`` read neither beta nor ``s0``)."""
    spec = branch_spec(study, event["seed"], event["start"], treatment, event.get("betas", {}), event["s0"])
    return {"parent": event["collapse"], "spec": spec, "steps": study.branch.steps}
