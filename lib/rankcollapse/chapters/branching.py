"""Not a chapter: how the three repair chapters that branch from saved states (``repair-treatments``,
``repair-path``, ``repair-lr-burst``) train a stage of jobs, and the parameter that chooses it.

A stage is a list of independent training jobs (:mod:`rankcollapse.lm.runs`: drivers, healthy runs, branches
from a saved state, chains of branches). :func:`run_stage` trains each job alone, in ``p.workers``
processes (:func:`rankcollapse.lm.runs.run_jobs`), or, with ``stack_branches``, the stage's branches and
chains as stacks of networks in one batched computation (:func:`rankcollapse.lm.stacked_runs.run_jobs`).
``repair-driver`` trains no branches and does not import this module.

Two controls that are one run for a while share it: :func:`control_chain_job` trains a never-collapsed
control as two legs from the shared prefix, so another control that follows it until the split branches
from its saved state there; :func:`control_summary` gives the summary its driver would have given.
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..book.params import Param
from ..lm import runs as rp
from ..lm import stacked_runs
from ..lm import training as tr

BRANCH_PARAMS = [
    # opt-in until the repair chapters are re-recorded with it (issue #21): a stacked branch is another
    # engine (batched kernels, other round-off) with saved states of its own, so turning it on moves every
    # number trained from a branch
    Param(
        "stack_branches",
        "bool",
        "train each stage's independent branches as stacks, one batched computation per stack "
        "(lm.stacked: an engine of its own, other round-off, states of its own)",
        False,
    ),
]


def run_stage(p, jobs: list[tuple[str, dict]], log=None, labels=None) -> list:
    """A chapter's stage of training jobs on ``p.workers`` processes: each job alone, or, when
    ``p.stack_branches`` is true, its branches and chains trained as stacks. Results in job order either
    way."""
    if getattr(p, "stack_branches", False):
        return stacked_runs.run_jobs(jobs, p.workers, log, labels)
    return rp.run_jobs(jobs, p.workers, log, labels)


# -- controls that share their first steps ---------------------------------------------------------------
MEASURED = ("m_step", "srank", "probe_loss", "alpha")  # one entry per measurement
PER_STEP = ("loss", "gnorm", "clipped", "term")  # one entry per update


def prefix_path(p, seed: int) -> str:
    """The saved shared prefix of ``seed``'s model (its first ``ramp_start`` updates at alpha = 1,
    :func:`rankcollapse.lm.training.prefix`): trained once for every driver of that seed, loaded here."""
    spec = rp.run_spec(p, seed)
    pd = tr.prefix(spec, tr.prefix_end(spec))
    return str(tr.states_dir() / pd["key"] / "prefix.pt")


def control_chain_job(p, seed: int, alpha: float, split: int, steps: int, then=None) -> dict:
    """The never-collapsed control of :func:`rankcollapse.lm.runs.held_control_job` (``seed``'s model ramped
    only down to ``alpha`` and held, to step ``steps``) as a chain of two branches from the shared prefix,
    split at step ``split``. Its state at ``split`` is saved, so a second control that follows it until
    ``split`` and then goes on under ``then`` (its spec from there on) branches from that state instead of
    training those steps again. The weights, measurements and steps are the driver's, update for update
    (the same loop from the same state; a resumed run is bit-identical); :func:`control_summary` makes its
    summary."""
    spec = rp.run_spec(p, seed, alpha_min=alpha)
    P = tr.prefix_end(spec)
    if not P < split < steps:
        raise ValueError(f"split {split} must lie between the prefix's end {P} and the end {steps}")
    return {"parent": prefix_path(p, seed), "segments": [(spec, split - P), (then or spec, steps - split)]}


def control_summary(p, job: dict, legs: list[dict]) -> dict:
    """The summary :func:`rankcollapse.lm.training.driver` gives (``hist``, ``det``, ``final_probe``,
    ``step``, ``key``) for a control trained as :func:`control_chain_job` (``legs``: its branches'
    summaries): the prefix's history, then each leg's (a leg's first measurement repeats its parent's last:
    dropped), and the driver's detector replayed over the measurements (armed where the first leg's ramp
    starts)."""
    hist = copy.deepcopy(tr.load_dict(Path(job["parent"]))["hist"])
    for leg in legs:
        h = leg["hist"]
        dup = bool(hist["m_step"]) and h["m_step"][:1] == hist["m_step"][-1:]
        for k in MEASURED:
            hist[k] += copy.deepcopy(h[k][1:] if dup else h[k])
        wdup = bool(hist["w_step"]) and h["w_step"][:1] == hist["w_step"][-1:]
        for k in ("w_step", "wsrank"):
            hist[k] += copy.deepcopy(h[k][1:] if wdup else h[k])
        for k in PER_STEP:
            hist[k] += copy.deepcopy(h[k])
    spec = job["segments"][0][0]
    det = tr.Detector(p.threshold, p.window, p.settle_steps, arm_step=spec.alpha_knots[1][0])
    for t, sr in zip(hist["m_step"], hist["srank"]):
        det.feed(t, sr[-1])
    last = legs[-1]
    return {
        "key": last["key"],
        "hist": hist,
        "det": det.to_dict(),
        "final_probe": last["final_probe"],
        "collapse": None,
        "step": last["step"],
    }
