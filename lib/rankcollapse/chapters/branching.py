"""Not a chapter: how the three repair chapters that branch from saved states (``repair-treatments``,
``repair-path``, ``repair-lr-burst``) train a stage of jobs, and the parameter that chooses it.

A stage is a list of independent training jobs (:mod:`rankcollapse.lm.runs`: drivers, healthy runs, branches
from a saved state, chains of branches). :func:`run_stage` trains each job alone, in ``p.workers``
processes (:func:`rankcollapse.lm.runs.run_jobs`), or, with ``stack_branches``, the stage's branches and
chains as stacks of networks in one batched computation (:func:`rankcollapse.lm.stacked_runs.run_jobs`).
``repair-driver`` trains no branches and does not import this module.
"""

from __future__ import annotations

from ..book.params import Param
from ..lm import runs as rp
from ..lm import stacked_runs

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
