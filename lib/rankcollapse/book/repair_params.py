"""The parameters the four Part III chapters share (the driver, and the recovery rule), and the one place a
chapter's parameters become the study's typed spec (:func:`study_spec`).

Every repair chapter declares :data:`DRIVER_PARAMS`; ``repair-treatments`` and ``repair-path`` also declare
:data:`RECOVERY_PARAMS`, so both judge recovery by the same rule. The runs these parameters describe are in
:mod:`rankcollapse.repair`, which takes the :class:`~rankcollapse.repair.spec.StudySpec` made here.
"""

from __future__ import annotations

from ..repair.spec import (
    CALIB_STEPS,
    BranchSettings,
    DriverSettings,
    RecoverySettings,
    StudySpec,
    train_device,
)
from .params import Param, ParameterError, require_distinct, require_divisible

DRIVER_PARAMS = [
    Param(
        "depth",
        "int",
        "blocks of the driven network",
        {"smoke": 12, "full": 12, "paper": 12},
        low=1,
        high=96,
    ),
    Param("d_model", "int", "width", {"smoke": 48, "full": 48, "paper": 128}, low=4, high=4096),
    Param("heads", "int", "attention heads", 4, low=1, high=64),
    Param("ctx", "int", "context length (bytes)", {"smoke": 32, "full": 32, "paper": 256}, low=2, high=4096),
    Param(
        "batch",
        "int",
        "sequences per training batch",
        {"smoke": 8, "full": 16, "paper": 16},
        low=1,
        high=4096,
    ),
    Param("lr", "float", "AdamW learning rate", 1e-3, low=1e-6, high=1.0),
    # smoke: a faithful miniature of full. The network trains 500 steps with the skip intact (its last-block
    # srank is near 2.9 then, as full's before its ramp, where at 100 steps it was 1.5, at the threshold;
    # after 300 steps, 2.1-2.5, it crossed the threshold early in a fast ramp, at alpha 0.4-0.5, so that no
    # recovery could lie 3x above it), then ramps over 200 steps to alpha_min = 0: every smoke driver tried
    # (2 seeds x 3 kernel variants) settled there, while at 0.01 two of six healed and one never settled, and
    # at 0.02 one of four: at this batch size a floor above 0 is the knife-edge itself. Two seeds and
    # branches of 400 steps (two ramp lengths): with one event, the hinge's fade (H3) and whether a held
    # switch recovers within the branch (H7) changed with the floating-point kernels.
    Param(
        "ramp_start",
        "int",
        "driver: alpha is 1 until this step",
        {"smoke": 500, "full": 400, "paper": 1500},
        low=0,
        high=10**7,
    ),
    Param(
        "ramp_end",
        "int",
        "driver: alpha reaches alpha_min at this step",
        {"smoke": 700, "full": 800, "paper": 3000},
        low=1,
        high=10**7,
    ),
    Param(
        "alpha_min",
        "float",
        "driver: the skip scale's floor",
        {"smoke": 0.0, "full": 0.02, "paper": 0.02},
        low=0.0,
        high=1.0,
    ),
    Param(
        "tail_steps",
        "int",
        "driver: steps held at alpha_min after the ramp (the final srank is read there)",
        {"smoke": 200, "full": 300, "paper": 1000},
        low=0,
        high=10**7,
    ),
    Param(
        "branch_steps",
        "int",
        "steps of each treatment branch (also how far the healthy run goes past the driver)",
        {"smoke": 400, "full": 600, "paper": 4000},
        low=10,
        high=10**7,
    ),
    # full: ten seeds for at least six settled collapse events (issue #17; the paper had 8). Measured with
    # the full driver (compiled engine, native kernels): seeds 0-11 settled but for 2, 6 and 7, so 0-9 give
    # 7 events, one to spare should another machine's kernels lose one
    Param(
        "seeds",
        "int_list",
        "one driver (collapse event) and one healthy network per seed",
        {"smoke": [0, 1], "full": list(range(10)), "paper": [0, 1, 2, 3, 4, 5, 6, 7]},
        low=0,
        high=2**31 - 1,
    ),
    Param("threshold", "float", "collapse threshold on the last block's srank", 1.5, low=1.0, high=100.0),
    Param(
        "settle_steps", "int", "a collapse is settled this many steps after the first crossing", 100, low=0
    ),
    Param("window", "int", "measurements in the settling median", 10, low=1, high=1000),
    Param(
        "workers",
        "int",
        "parallel processes (one thread each) for independent runs; results do not depend on it (rcbook "
        "sets it from -j, the run's cores)",
        2,
        low=1,
        high=64,
    ),
    # the training engine is part of every run's spec (another engine, other round-off). smoke stays eager:
    # compiling costs ~40 s per process on a cold cache, more than a smoke run's training saves
    Param(
        "engine",
        "str",
        "training step: eager PyTorch, compiled (torch.compile), or auto (compiled where a compiler exists)",
        {"smoke": "eager", "full": "auto", "paper": "auto"},
        choices=("eager", "compiled", "auto"),
    ),
]


def validate_driver(p) -> None:
    """Checks across the driver parameters, before any work."""
    if p.ramp_end <= p.ramp_start:
        raise ParameterError(
            f"parameters 'ramp_end' = {p.ramp_end} and 'ramp_start' = {p.ramp_start}: ramp_end must be "
            "larger than ramp_start"
        )
    for name in ("ramp_start", "ramp_end", "tail_steps", "branch_steps", "settle_steps"):
        if getattr(p, name) % 10:
            raise ParameterError(
                f"parameter '{name}' = {getattr(p, name)} must be a multiple of 10 "
                "(the measurement interval)"
            )
    require_divisible(p, "d_model", "heads")
    if p.ramp_start + p.settle_steps > p.ramp_end + p.tail_steps:
        # the detector is armed at ramp_start and settles settle_steps after a crossing, within the driver's
        # ramp_end + tail_steps steps
        raise ParameterError(
            f"parameters 'ramp_start' = {p.ramp_start}, 'settle_steps' = {p.settle_steps}, 'ramp_end' = "
            f"{p.ramp_end} and 'tail_steps' = {p.tail_steps}: no collapse could settle within the driver "
            f"(ramp_start + settle_steps = {p.ramp_start + p.settle_steps} must be at most ramp_end + "
            f"tail_steps = {p.ramp_end + p.tail_steps}, the driver's last step)"
        )
    require_distinct(p, "seeds", "seed", "one driver and one healthy network per seed, counted once")


RECOVERY_PARAMS = [
    Param(
        "added_loss",
        "float",
        "Lambda: nats the 1x term adds when switched on (4x adds 4 Lambda)",
        0.1,
        low=1e-6,
        high=10.0,
    ),
    Param(
        "recover_frac",
        "float",
        "recovered when the 50-step median srank climbs this fraction of the way "
        "from the collapse threshold to the healthy srank",
        0.5,
        low=0.0,
        high=1.0,
    ),
    Param(
        "recover_window", "int", "measurements (10 steps each) in the recovery median", 5, low=1, high=1000
    ),
]


def study_spec(p) -> StudySpec:
    """The study's typed spec from a repair chapter's parameters ``p`` (any object with the
    :data:`DRIVER_PARAMS`; the recovery rule when it has every one of :data:`RECOVERY_PARAMS`, the
    calibration length ``calib_steps`` when it has one). A chapter makes it once, at its entry, and passes it
    to :mod:`rankcollapse.repair`."""
    driver = DriverSettings(
        depth=p.depth,
        d_model=p.d_model,
        heads=p.heads,
        ctx=p.ctx,
        batch=p.batch,
        lr=p.lr,
        ramp_start=p.ramp_start,
        ramp_end=p.ramp_end,
        alpha_min=p.alpha_min,
        tail_steps=p.tail_steps,
        seeds=tuple(p.seeds),
        threshold=p.threshold,
        settle_steps=p.settle_steps,
        window=p.window,
        engine=getattr(p, "engine", "eager"),
    )
    branch = BranchSettings(steps=p.branch_steps, calib_steps=int(getattr(p, "calib_steps", CALIB_STEPS)))
    recovery = None
    if all(hasattr(p, q.name) for q in RECOVERY_PARAMS):
        recovery = RecoverySettings(
            added_loss=p.added_loss, recover_frac=p.recover_frac, recover_window=p.recover_window
        )
    return StudySpec(
        driver=driver,
        branch=branch,
        recovery=recovery,
        workers=getattr(p, "workers", 1),
        device=train_device(getattr(p, "device", "cpu")),
    )
