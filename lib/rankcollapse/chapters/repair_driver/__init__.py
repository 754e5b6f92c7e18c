"""Chapter `repair-driver`: collapse a small LM by weakening its skip, and show the knife-edge.

The parameter schema (:data:`SCHEMA`: the driver parameters shared with the other repair chapters, from
:mod:`rankcollapse.book.repair_params`, which makes them the study's spec that the runs of
:mod:`rankcollapse.repair` take, and the knife-edge's grids), the checks across parameters
(:func:`validate`) and the paper's numbers the page quotes (:data:`PAPER`, :func:`glue_paper`), with what
``chapters/repair-driver.md`` calls re-exported from the chapter's roles: :mod:`.experiments` (what is
computed), :mod:`.verdicts` (the rule of H1 and its controls), :mod:`.report` (records and tables) and
:mod:`.figures`.
"""

from __future__ import annotations

from ...book.params import Param, Schema
from ...book.repair_params import DRIVER_PARAMS, RECOVERY_PARAMS, validate_driver
from .experiments import (
    BRANCHES,
    all_runs,
    branch_rows,
    branches,
    corpus_info,
    early_dip,
    events,
    final_srank,
    healthy_settled,
)
from .figures import fig_drivers, fig_knife_edge
from .report import (
    record_branches,
    record_collapse,
    record_corpus,
    record_dips,
    record_events,
    record_knife_edge,
    table_branches,
    table_events,
)
from .verdicts import (
    FIRST_RULE_H1,
    OLD_RULE_H1,
    RULE_H1,
    VERDICTS,
    control_evidence_h1,
    first_verdict_h1,
    h1_evidence,
    healthy_evidence_h1,
    judge_h1,
    old_verdict_h1,
    verdict_h1,
)

__all__ = [
    "BRANCHES",
    "FIRST_RULE_H1",
    "OLD_RULE_H1",
    "PAPER",
    "RULE_H1",
    "SCHEMA",
    "VERDICTS",
    "all_runs",
    "branch_rows",
    "branches",
    "control_evidence_h1",
    "corpus_info",
    "early_dip",
    "events",
    "fig_drivers",
    "fig_knife_edge",
    "final_srank",
    "first_verdict_h1",
    "glue_paper",
    "h1_evidence",
    "healthy_evidence_h1",
    "healthy_settled",
    "judge_h1",
    "old_verdict_h1",
    "record_branches",
    "record_collapse",
    "record_corpus",
    "record_dips",
    "record_events",
    "record_knife_edge",
    "table_branches",
    "table_events",
    "validate",
    "verdict_h1",
]


SCHEMA = Schema(
    "repair-driver",
    DRIVER_PARAMS
    # H1 reads each collapse's untreated branch by the recovery rule of repair-treatments and repair-path
    # (issue #42): its fraction and window, the same parameters (added_loss calibrates loss terms, not read)
    + [q for q in RECOVERY_PARAMS if q.name in ("recover_frac", "recover_window")]
    + [
        Param(
            "alpha_grid",
            "float_list",
            "alpha_min values of the knife-edge (first seed)",
            {
                "smoke": [0.02, 0.3],
                "full": [0.02, 0.05, 0.1, 0.2, 0.4],
                "paper": [0.01, 0.02, 0.05, 0.1, 0.2],
            },
            low=0.0,
            high=1.0,
        ),
        Param(
            "depth_grid",
            "int_list",
            "depths of the knife-edge at alpha_min (first seed)",
            {"smoke": [6, 12], "full": [4, 6, 8, 12], "paper": [6, 12, 24]},
            low=1,
            high=96,
        ),
    ],
)


# Hofmann & Mäder (2026), as the page quotes them (not measured here): loss and attention entropy at the
# collapse (Section 4) and the knife-edge at depth 12 (Figure 5, left). Their driver's schedule is the paper
# profile's defaults (ramp_start, ramp_end, alpha_min); the specification's CPU scale is the full profile's
PAPER = {
    "width": 128,
    "context": 256,
    "collapse_loss": (7.55, 7.63),  # nats, GPT-2 vocabulary
    "unigram_loss": 7.64,
    "entropy_collapsed": (0.94, 0.99),  # normalised attention entropy (blocks averaged: not said which)
    "entropy_healthy": (0.65, 0.69),
    "knife_edge_depth": 12,  # at this depth only alpha_min <= 0.02 collapses
    "knife_edge_alpha": 0.02,
}


def _num(v) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def glue_paper(ch) -> None:
    """Glue the numbers the page quotes rather than measures: the paper's (:data:`PAPER`, and its schedule
    from the paper profile) as ``paper_*``, and the specification's CPU scale (the full profile) as
    ``spec_*``."""
    for k, v in PAPER.items():
        ch.glue(f"paper_{k}", f"{v[0]:g}–{v[1]:g}" if isinstance(v, tuple) else _num(v))
    for prefix, profile in (("paper", "paper"), ("spec", "full"), ("smoke", "smoke")):
        for k in ("ramp_start", "ramp_end", "alpha_min", "batch"):
            ch.glue(f"{prefix}_{k}", _num(SCHEMA.all[k].default(profile)))
    full = SCHEMA.all
    ch.glue("spec_ramp_steps", _num(full["ramp_end"].default("full") - full["ramp_start"].default("full")))


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts; the chapter
    again)."""
    validate_driver(p)
