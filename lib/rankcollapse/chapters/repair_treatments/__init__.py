"""Chapter `repair-treatments`: every loss term from each saved collapse (Figure 1, Table 2, Figure 6 left
and middle).

The saved collapses come from :func:`rankcollapse.repair.drivers.main_runs` (train-or-load by content key,
the same runs ``repair-driver`` asks for), never from another chapter's output folder. The page makes the
study's spec (``study``, :func:`rankcollapse.book.repair_params.study_spec`) once and passes it here.

This file holds the parameter schema (:data:`SCHEMA`) and the checks across parameters (:func:`validate`),
with what ``chapters/repair-treatments.md`` calls re-exported from the chapter's roles: :mod:`.experiments`
(what is computed), :mod:`.verdicts` (the rule of H2), :mod:`.report` (records and tables) and
:mod:`.figures`.
"""

from __future__ import annotations

from ...book.params import Param, ParameterError, Schema, require_distinct
from ...book.repair_params import DRIVER_PARAMS, RECOVERY_PARAMS, validate_driver
from ...repair.spec import CALIB_STEPS
from ...repair.treatments import TREATMENTS
from .experiments import (
    at_switch,
    line_point,
    line_summary,
    loglog_slope,
    loss_terms,
    random_direction,
    rho_along_line,
    run_branches,
    summarise,
    synthetic_force,
)
from .figures import fig_after_switch, fig_line, fig_rho, fig_synthetic
from .report import (
    glue_paper,
    line_text,
    literal_position,
    record_events,
    record_line,
    record_recovery,
    record_synthetic,
    record_table2,
    record_term_recoveries,
    table_loss_gap,
    table_recovery,
    table_rho,
)
from .verdicts import (
    H2_MAX_RATE,
    RULE_F6M,
    RULE_H2,
    RULE_H2_CHANGE,
    RULE_H2_FISHER,
    RULE_H2_ZERO,
    SMOKE_VERDICT_NOTES,
    VERDICTS,
    control_evidence,
    detectable_rate,
    fisher_greater,
    h2_evidence,
    judge_h2,
    min_significant,
    rate_bounds,
    read_line,
    shape_word,
    verdict_h2,
    verdict_h2_fisher,
    verdict_h2_zero,
)

__all__ = [
    "H2_MAX_RATE",
    "RULE_F6M",
    "RULE_H2",
    "RULE_H2_CHANGE",
    "RULE_H2_FISHER",
    "RULE_H2_ZERO",
    "SCHEMA",
    "SMOKE_VERDICT_NOTES",
    "VERDICTS",
    "control_evidence",
    "detectable_rate",
    "at_switch",
    "fig_after_switch",
    "fig_line",
    "fig_rho",
    "fig_synthetic",
    "fisher_greater",
    "glue_paper",
    "h2_evidence",
    "judge_h2",
    "line_point",
    "line_summary",
    "line_text",
    "literal_position",
    "loglog_slope",
    "loss_terms",
    "min_significant",
    "random_direction",
    "rate_bounds",
    "read_line",
    "record_events",
    "record_line",
    "record_recovery",
    "record_synthetic",
    "record_table2",
    "record_term_recoveries",
    "rho_along_line",
    "run_branches",
    "shape_word",
    "summarise",
    "synthetic_force",
    "table_loss_gap",
    "table_recovery",
    "table_rho",
    "validate",
    "verdict_h2",
    "verdict_h2_fisher",
    "verdict_h2_zero",
]


SCHEMA = Schema(
    "repair-treatments",
    DRIVER_PARAMS
    + [
        Param(
            "treatments",
            "str_list",
            "treatment branches started from each saved collapse",
            list(TREATMENTS),
            choices=TREATMENTS,
        ),
        *RECOVERY_PARAMS,
        Param(
            "calib_steps",
            "int",
            "beta is set on the training batches of the branch's first this many updates (saved state)",
            CALIB_STEPS,
            low=1,
            high=10**6,
        ),
        Param(
            "synth_deltas",
            "float_list",
            "delta values of the synthetic X, a v^T + delta E",
            {
                "smoke": [1.0, 1e-1, 1e-2, 1e-3, 1e-4],
                "full": [1.0, 3e-1, 1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4],
                "paper": [1.0, 3e-1, 1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4],
            },
            low=1e-12,
            high=100.0,
        ),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts; the chapter
    again)."""
    validate_driver(p)
    if p.calib_steps > p.branch_steps:
        raise ParameterError(
            f"parameters 'calib_steps' = {p.calib_steps} and 'branch_steps' = {p.branch_steps}: calib_steps "
            "must not exceed branch_steps (the added loss is read over the branch's first calib_steps steps)"
        )
    require_distinct(p, "treatments", "treatment")
    if "reversed-ramp" in p.treatments and p.branch_steps < p.ramp_end - p.ramp_start:
        raise ParameterError(
            f"parameters 'branch_steps' = {p.branch_steps}, 'ramp_start' = {p.ramp_start} and 'ramp_end' = "
            f"{p.ramp_end}: the reversed-ramp branch climbs back to alpha = 1 over the driver's ramp length "
            f"({p.ramp_end - p.ramp_start} steps), so branch_steps must be at least ramp_end - ramp_start"
        )
