"""The typed settings of Part III's study: the driver, the branches, the recovery rule, and the study spec
holding them with where and how widely its jobs run.

:func:`rankcollapse.book.repair_params.study_spec` makes a :class:`StudySpec` from a chapter's parameters;
every other module of :mod:`rankcollapse.repair` takes the spec (or one of its parts).
"""

from __future__ import annotations

from dataclasses import dataclass

CALIB_STEPS = 10  # a loss term's beta is solved on the branch's first this many training batches


@dataclass(frozen=True)
class DriverSettings:
    """The network, its training and the driver's schedule (the chapters' ``DRIVER_PARAMS`` but
    ``branch_steps`` and ``workers``): alpha is 1 until ``ramp_start``, falls to ``alpha_min`` at
    ``ramp_end`` and is held there for ``tail_steps``; the detector settles ``settle_steps`` after the
    ``window``-median of the last block's srank crosses ``threshold``."""

    depth: int
    d_model: int
    heads: int
    ctx: int
    batch: int
    lr: float
    ramp_start: int
    ramp_end: int
    alpha_min: float
    tail_steps: int
    seeds: tuple[int, ...]
    threshold: float
    settle_steps: int
    window: int
    engine: str = "eager"  # eager, compiled or auto (resolved per process, :func:`drivers.run_spec`)

    @property
    def steps(self) -> int:
        """The driver's length: the ramp's end and the held tail."""
        return self.ramp_end + self.tail_steps


@dataclass(frozen=True)
class BranchSettings:
    """The branches from a saved collapse: ``steps`` updates each (also how far the healthy network runs
    past the driver), a loss term's beta solved on the first ``calib_steps`` training batches."""

    steps: int
    calib_steps: int = CALIB_STEPS


@dataclass(frozen=True)
class RecoverySettings:
    """The recovery rule (the chapters' ``RECOVERY_PARAMS``): a 1x loss term adds ``added_loss`` (Lambda)
    when switched on; recovered when the ``recover_window``-median srank climbs ``recover_frac`` of the way
    from the collapse threshold to the healthy srank."""

    added_loss: float
    recover_frac: float
    recover_window: int


@dataclass(frozen=True)
class StudySpec:
    """What the study's runs are: the driver and branch settings, the recovery rule (None for a chapter that
    judges no recovery by it), the processes a stage trains on (``workers``, one thread each; results do not
    depend on it) and the training ``device`` (``cpu`` or ``cuda``, part of every run's spec)."""

    driver: DriverSettings
    branch: BranchSettings
    recovery: RecoverySettings | None = None
    workers: int = 1
    device: str = "cpu"


def train_device(device: str | None) -> str:
    """Where training jobs run, from a chapter's resolved ``device``: ``cuda`` for any CUDA device, else
    ``cpu``. It is part of every run's spec, so states trained on a GPU are never mistaken for CPU ones."""
    dev = str(device or "cpu")
    return "cuda" if dev.startswith("cuda") else "cpu"
