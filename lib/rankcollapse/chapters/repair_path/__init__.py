"""Chapter `repair-path`: force without transmission (Figures 2 and 3 of Hofmann & Mäder).

Per-block gradients at each saved collapse (task loss, hinge, healthy network), the query–key gradient after
the skip scale is switched back, switches held at several alpha, the reversed-ramp hysteresis and the loss
after recovery. The saved collapses and healthy networks come from
:func:`rankcollapse.repair.drivers.main_runs`; the switches are :func:`rankcollapse.lm.training.branch` runs
with a constant alpha; the reversed ramp is the same branch ``repair-treatments`` asks for (loaded by content
if it ran). The page makes the study's spec (``study``, :func:`rankcollapse.book.repair_params.study_spec`)
once and passes it to what trains or builds a run's spec here.

The parameter schema (:data:`SCHEMA`) and the checks across parameters (:func:`validate`), with what the page
calls re-exported from the chapter's roles: :mod:`.experiments`, :mod:`.verdicts` (the rules of H3, H4, H5,
H7 and W1), :mod:`.report` (records, tables and sentences) and :mod:`.figures`.
"""

from __future__ import annotations

from ...book.params import Param, Schema
from ...book.repair_params import DRIVER_PARAMS, RECOVERY_PARAMS, validate_driver
from ...lm import training as tr
from .experiments import (
    control_rows,
    delayed_points,
    driver_traces,
    gradients_after,
    gradients_at_collapse,
    h5_effects,
    h5_replicates,
    h7_null_rows,
    hysteresis,
    open_path_rows,
    predictor_split,
    ramp_control_rows,
    rank_one_table,
    reopen_control_rows,
    run_switches,
    same_depth_controls,
    summarise_switches,
    trace_summary,
    weight_rank_table,
)
from .figures import (
    fig_block_grads,
    fig_block_grads_seeds,
    fig_delays,
    fig_hysteresis,
    fig_hysteresis_seeds,
    fig_predictor,
    fig_switch_qk,
    fig_switches,
    fig_weight_trace,
)
from .report import (
    glue_paper,
    record_block_grads,
    record_delays,
    record_events,
    record_h3_control,
    record_h7_controls,
    record_h7_null,
    record_hysteresis,
    record_open_path,
    record_predictor,
    record_ramp_control,
    record_rank_one,
    record_reopen_control,
    record_reopening,
    record_slow_ramp,
    record_switches,
    record_trace,
    record_weight_ranks,
    table_delayed,
    table_h3_control,
    table_h5_pairs,
    table_h7,
    table_open_path,
    table_predictor,
    table_reopening,
    table_switches,
    table_weight_ranks,
)
from .verdicts import (
    RULE_H3,
    RULE_H4,
    RULE_H5,
    RULE_H7,
    RULE_W1,
    SMOKE_VERDICT_NOTES,
    VERDICTS,
    judge_h3,
    judge_h4,
    judge_h5,
    judge_h7,
    judge_w1,
)

__all__ = [
    "RULE_H3",
    "RULE_H4",
    "RULE_H5",
    "RULE_H7",
    "RULE_W1",
    "SCHEMA",
    "SMOKE_VERDICT_NOTES",
    "VERDICTS",
    "control_rows",
    "delayed_points",
    "driver_traces",
    "fig_block_grads",
    "fig_block_grads_seeds",
    "fig_delays",
    "fig_hysteresis",
    "fig_hysteresis_seeds",
    "fig_predictor",
    "fig_switch_qk",
    "fig_switches",
    "fig_weight_trace",
    "glue_paper",
    "gradients_after",
    "gradients_at_collapse",
    "h5_effects",
    "h5_replicates",
    "h7_null_rows",
    "hysteresis",
    "judge_h3",
    "judge_h4",
    "judge_h5",
    "judge_h7",
    "judge_w1",
    "open_path_rows",
    "predictor_split",
    "ramp_control_rows",
    "rank_one_table",
    "record_block_grads",
    "record_delays",
    "record_events",
    "record_h3_control",
    "record_h7_controls",
    "record_h7_null",
    "record_hysteresis",
    "record_open_path",
    "record_predictor",
    "record_ramp_control",
    "record_rank_one",
    "record_reopen_control",
    "record_reopening",
    "record_slow_ramp",
    "record_switches",
    "record_trace",
    "record_weight_ranks",
    "reopen_control_rows",
    "run_switches",
    "same_depth_controls",
    "summarise_switches",
    "table_delayed",
    "table_h3_control",
    "table_h5_pairs",
    "table_h7",
    "table_open_path",
    "table_predictor",
    "table_reopening",
    "table_switches",
    "table_weight_ranks",
    "trace_summary",
    "validate",
    "weight_rank_table",
]


SCHEMA = Schema(
    "repair-path",
    DRIVER_PARAMS
    + [
        # H4 is decided on the held switches, so their grid must locate the recovery threshold and reach a
        # refutation: its lowest value lies at or below 1.5x the alpha of collapse (full: 0.03 = 1.5x the
        # 0.02 floor). smoke's drivers first cross anywhere from alpha 0.2 down to its floor 0 (seeds 0, 1:
        # 0.2 and 0.05 native, 0.0 and 0.05 avx2, 0.0 and 0.0 scalar: median 0.125, 0.025 and 0), so its
        # lowest value is the floor 0 itself (the untreated branch, shared by content with
        # repair-treatments'): a refutation stays reachable even where the median crossing is at the floor
        # (with 0.02 there, scalar's median crossing 0 made H4 "unreachable" where native's was supported).
        # smoke keeps five values (each costs two branches of 400 steps); its switches recover only from
        # 0.6 (seed 0 at 0.6: after 340 of 400 steps in one run, not at all in another, native kernels), so
        # 1.0 stands above it, where the smoke network does recover.
        Param(
            "switch_alphas",
            "float_list",
            "alpha held after the switch (one branch per value and event; increasing)",
            {
                "smoke": [0.0, 0.1, 0.3, 0.6, 1.0],
                "full": [0.03, 0.1, 0.15, 0.2, 0.25, 0.3, 0.6],
                "paper": [0.03, 0.1, 0.15, 0.2, 0.25, 0.3, 0.6],
            },
            low=0.0,
            high=1.0,
        ),
        Param(
            "probe_alphas",
            "float_list",
            "alpha at which the query-key gradient is read right after the switch",
            [0.3, 1.0],
            low=0.0,
            high=1.0,
        ),
        Param(
            "after_steps",
            "int",
            "the query-key gradient is read again after this many updates at each probe alpha",
            50,
            low=1,
            high=10**6,
        ),
        *RECOVERY_PARAMS,  # the same recovery rule as repair-treatments
        # H5 is judged at the delay alpha whose undelayed switch recovered in a share of events closest to
        # 1/2 (strictly between 0 and 1): full delays at the three alphas between "never" (0.1) and "always"
        # (0.3) of the previous grid; two delays keep its cost that of three delays at two alphas. smoke:
        # one delay at 0.3, where no smoke switch recovered (H5 inconclusive by the rule, as the recovery
        # there is certain or impossible at every delayed alpha).
        Param(
            "delays",
            "int_list",
            "further steps held at alpha_min before a delayed switch (multiples of 10, increasing)",
            {"smoke": [100], "full": [250, 500], "paper": [500, 1500, 3000]},
            low=10,
            high=10**7,
        ),
        Param(
            "delay_alphas",
            "float_list",
            "alpha switched to after each delay (each must be one of switch_alphas: "
            "the undelayed switch is the held one)",
            {"smoke": [0.3], "full": [0.15, 0.2, 0.25], "paper": [0.15, 0.2, 0.25]},
            low=0.0,
            high=1.0,
        ),
        # H3's control: a network that reaches the same small alpha without collapsing. full: depth 6, at
        # which the full driver at alpha_min = 0.02 does not collapse (repair-driver's depth grid). smoke
        # (alpha_min = 0, no skip at all): depth 6 sits on the knife-edge (final srank 1.03 native, 1.58
        # avx2) and depth 4 collapsed (settled; final srank 1.35 and 1.00, seeds 0 and 1, native). Depth 2
        # does not: final 10-measurement median srank 2.46 and 2.10 native, 2.42 and 2.10 avx2 (seeds 0, 1;
        # never settled, lowest single measurement after the ramp 1.42-1.46), its median Q/K task gradient
        # at alpha 0 15-18x the healthy depth-12 network's. (Depth 1: 2.87 and 2.49 under both kernels.)
        Param(
            "control_depth",
            "int",
            "depth of H3's control: a driver through the same ramp to the same alpha_min that does not "
            "collapse",
            {"smoke": 2, "full": 6, "paper": 6},
            low=1,
            high=96,
        ),
        # H7's control: the same model and seed ramped only down to each of these alphas and held there,
        # never collapsed, as far as the switches at that alpha reach (one driver per seed and alpha; at 1,
        # the healthy network). smoke: its switches recover only at 0.6 and 1.0.
        Param(
            "h7_control_alphas",
            "float_list",
            "held alphas whose recovered switches enter H7, each beside a never-collapsed control held at "
            "the same alpha (each must be one of switch_alphas)",
            {"smoke": [0.6, 1.0], "full": [0.3, 0.6], "paper": [0.3, 0.6]},
            low=0.0,
            high=1.0,
        ),
        # The reversed ramp at the driver's rate answers late: its recovery median lags half its window
        # (25 steps, 0.061 in alpha at full), more than the held grid's resolution (0.05). A ramp
        # slow_ramp_factor times slower shrinks that lag as many times (full: 0.015). Its branch runs the
        # whole ramp and 200 steps at alpha 1: a first full run of 800 steps (to alpha 0.51) saw only 3 of 7
        # events recover, the others' rank still climbing (last-block srank 1.8-2.5 at the end, below
        # their recovery thresholds). smoke (alpha_min 0, a 200-step ramp): twice slower, 400 + 200 steps.
        Param(
            "slow_ramp_factor",
            "int",
            "a second reversed ramp rises alpha this many times more slowly than the driver's ramp, "
            "its detection lag that many times smaller (1: none)",
            {"smoke": 2, "full": 4, "paper": 4},
            low=1,
            high=1000,
        ),
        Param(
            "slow_ramp_steps",
            "int",
            "length of the slow reversed ramp's branch (steps; a multiple of 10)",
            {"smoke": 600, "full": 1800, "paper": 6200},
            low=10,
            high=10**7,
        ),
        Param(
            "trace_every",
            "int",
            "the weights' stable ranks are shown every this many steps through the driver (a multiple of "
            "50, the training loop's recording interval)",
            50,
            low=50,
            high=10**6,
        ),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the schema checks each one alone)."""
    from ...book.params import ParameterError

    validate_driver(p)
    if any(d % 10 for d in p.delays) or list(p.delays) != sorted(set(p.delays)):
        raise ParameterError(f"parameter 'delays' = {p.delays} must be strictly increasing multiples of 10")
    if list(p.switch_alphas) != sorted(set(p.switch_alphas)):
        raise ParameterError(f"parameter 'switch_alphas' = {p.switch_alphas} must be strictly increasing")
    for name in ("delay_alphas", "h7_control_alphas"):
        missing = [a for a in getattr(p, name) if a not in p.switch_alphas]
        if missing:
            raise ParameterError(
                f"parameter '{name}' = {getattr(p, name)}: each must be one of "
                f"switch_alphas = {p.switch_alphas} (missing {missing})"
            )
    if p.control_depth >= p.depth:
        raise ParameterError(
            f"parameter 'control_depth' = {p.control_depth} must be below 'depth' = {p.depth} (H3's control "
            "is a shallower network that does not collapse)"
        )
    if p.slow_ramp_steps % 10:
        raise ParameterError(f"parameter 'slow_ramp_steps' = {p.slow_ramp_steps} must be a multiple of 10")
    ramp = p.ramp_end - p.ramp_start
    if p.branch_steps < ramp:
        raise ParameterError(
            f"parameters 'branch_steps' = {p.branch_steps}, 'ramp_start' = {p.ramp_start} and 'ramp_end' = "
            f"{p.ramp_end}: the reversed ramp climbs back to alpha = 1 over the driver's ramp length "
            f"({ramp} steps) within one branch, so branch_steps must be at least ramp_end - ramp_start"
        )
    if p.slow_ramp_factor > 1 and p.slow_ramp_steps < p.slow_ramp_factor * ramp:
        raise ParameterError(
            f"parameters 'slow_ramp_steps' = {p.slow_ramp_steps} and 'slow_ramp_factor' = "
            f"{p.slow_ramp_factor}: the slow reversed ramp takes slow_ramp_factor x (ramp_end - ramp_start) "
            f"= {p.slow_ramp_factor * ramp} steps to reach alpha = 1, so its branch must be at least that "
            "long"
        )
    if min(p.h7_control_alphas) < 1.0 and p.ramp_start + p.settle_steps + p.branch_steps <= p.ramp_end + 1:
        # the reversed ramp's control splits off H7's control after max(switch, ramp_end) and must end
        # after it (repair.controls.control_chain_job); the earliest switch is ramp_start + settle_steps
        raise ParameterError(
            f"parameters 'ramp_start' = {p.ramp_start}, 'settle_steps' = {p.settle_steps}, 'branch_steps' = "
            f"{p.branch_steps} and 'ramp_end' = {p.ramp_end}: ramp_start + settle_steps + branch_steps must "
            "exceed ramp_end + 1 (a control held below alpha = 1 must reach past the driver's ramp)"
        )
    if p.trace_every <= 0 or p.trace_every % tr.RunSpec.weights_every:
        raise ParameterError(
            f"parameter 'trace_every' = {p.trace_every} must be a positive multiple of "
            f"{tr.RunSpec.weights_every} (the training loop records the weights' stable ranks that often)"
        )
