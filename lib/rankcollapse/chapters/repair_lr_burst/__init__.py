"""Chapter `repair-lr-burst`: a second cause of rank collapse, with the skip intact (Figure 4 of Hofmann &
Mäder).

From each healthy network (skip intact, the final saved state of :func:`rankcollapse.lm.training.healthy`)
the learning rate is multiplied for ``burst_steps`` updates, then training continues untreated at the base
rate for ``branch_steps``; a paired control continues from the same state at the base rate for the same total
(same data batches: a batch is seeded by seed and step). All three are
:func:`rankcollapse.lm.training.branch` runs (the after-burst run's parent is the burst's saved
``branch.pt``), cached by content like every other trained state.

The parameter schema (``SCHEMA``, :func:`validate`) and what ``chapters/repair-lr-burst.md`` calls,
re-exported from the chapter's roles: experiments (:mod:`.experiments`, each returns plain data), rules and
verdicts (:mod:`.verdicts`), records and tables (:mod:`.report`) and figures (:mod:`.figures`, each returns
a matplotlib figure).
"""

from __future__ import annotations

from ...book.params import Param, ParameterError, Schema, require_distinct
from ...book.repair_params import DRIVER_PARAMS, validate_driver
from .experiments import (
    climbing,
    qk_gradients,
    run_bursts,
    run_extensions,
    summarise,
    summarise_extensions,
)
from .figures import fig_burst_qk, fig_burst_srank
from .report import (
    glue_paper,
    record_bursts,
    record_extensions,
    record_loss_gaps,
    record_open_path,
    record_qk,
    record_runs,
    record_settling,
    table_bursts,
    table_extensions,
)
from .verdicts import OPEN_FACTOR, RULE_H6, RULE_H7, SMOKE_VERDICT_NOTES, VERDICTS, judge_h6_h7

__all__ = [
    "RULE_H6",
    "RULE_H7",
    "SCHEMA",
    "SMOKE_VERDICT_NOTES",
    "VERDICTS",
    "climbing",
    "fig_burst_qk",
    "fig_burst_srank",
    "glue_paper",
    "judge_h6_h7",
    "record_settling",
    "record_open_path",
    "OPEN_FACTOR",
    "qk_gradients",
    "record_bursts",
    "record_extensions",
    "record_loss_gaps",
    "record_qk",
    "record_runs",
    "run_bursts",
    "run_extensions",
    "summarise",
    "summarise_extensions",
    "table_bursts",
    "table_extensions",
    "validate",
]


SCHEMA = Schema(
    "repair-lr-burst",
    DRIVER_PARAMS
    + [
        # full: the paper's two multipliers and a grid between them fine enough (steps of 1.14-1.25x) to
        # bracket the collapse onset, with bursts as long as the paper's (200 updates). A pilot at full size
        # (seed 0, eager): min rolling srank 2.09 at x16, 1.71 at x20, 1.45 at x24, 1.44 at x28, 1.40 at
        # x32 (the dip comes in the burst's first 30-50 steps, then the rank climbs back during the burst;
        # with 50-step bursts x16 did not collapse and x24 did in every seed). x24 recovered within 80 steps
        # after the burst, x28 and x32 did not within 600. smoke: the onset bracketed robustly by one
        # multiplier on each side (x8: min 2.45 and 2.08; x32: 1.17 and 1.01 on seeds 0 and 1; not x16,
        # whose 1.61 on seed 1 is 0.11 above the threshold, and which ends at 2.30 against a recovery
        # threshold of about 2.2: a dip under another kernel would count as collapse and recovery), bursts of
        # 200 as at full; at smoke's batch of 8 and 400-step branch no collapsed burst climbed back to the
        # recovery threshold (x24 and x32 ended at 1.14-1.99 against 2.2-2.45), where full's x24 did
        Param(
            "multipliers",
            "float_list",
            "learning-rate multipliers of the burst (one burst per value and seed)",
            {"smoke": [8.0, 32.0], "full": [16.0, 20.0, 24.0, 28.0, 32.0], "paper": [16.0, 32.0]},
            low=1.0,
            high=1e4,
        ),
        Param(
            "burst_steps",
            "int",
            "updates at the multiplied rate (a multiple of 10); branch_steps follow at the base rate",
            {"smoke": 200, "full": 200, "paper": 200},
            low=10,
            high=10**6,
        ),
        Param(
            "recover_frac",
            "float",
            "recovered when the rolling median srank climbs this fraction of the way from the "
            "collapse threshold to the control's srank at the burst's end (as in repair-treatments)",
            0.5,
            low=0.0,
            high=1.0,
        ),
        Param(
            "recover_window",
            "int",
            "measurements (10 steps each) in the rolling median",
            5,
            low=1,
            high=1000,
        ),
        Param(
            "extend_steps",
            "int",
            "collapsed bursts still climbing at the branch's end (and their controls) continue "
            "this many more steps at the base rate (0: none; a multiple of 10)",
            {"smoke": 0, "full": 600, "paper": 0},
            low=0,
            high=10**7,
        ),
    ],
)


def validate(p) -> None:
    """Checks beyond the schema (before any work)."""
    validate_driver(p)
    for name in ("burst_steps", "extend_steps"):
        if getattr(p, name) % 10:
            raise ParameterError(
                f"parameter '{name}' = {getattr(p, name)} must be a multiple of 10 "
                "(the measurement interval)"
            )
    require_distinct(p, "multipliers", "multiplier", "one burst per value and seed, recorded under its name")
