"""Chapter `mlp`: Corollary 3.2, the tug-of-war between attention and the MLP's Lipschitz constant.

The parameter schema (:data:`SCHEMA`) and the checks across parameters (:func:`validate`), with what
``chapters/mlp.md`` calls re-exported from the chapter's roles: :mod:`.experiments` (what is computed),
:mod:`.verdicts` (the rules of C3 and Q3), :mod:`.report` (records and tables) and :mod:`.figures`.
"""

from __future__ import annotations

from ...book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from .experiments import c3_control, lambda_check, q3_slowing, q3_sweep, summarise, summarise_q3, sweep
from .figures import fig_curves, fig_q3, fig_rate
from .report import (
    record_c3_control,
    record_curves,
    record_lambda_check,
    record_q3,
    record_rate,
    table_slowing,
)
from .verdicts import RULE_C3, RULE_Q3, SMOKE_VERDICT_NOTES, VERDICTS, judge_c3, judge_q3, q3_evidence

__all__ = [
    "RULE_C3",
    "RULE_Q3",
    "SCHEMA",
    "SMOKE_VERDICT_NOTES",
    "VERDICTS",
    "c3_control",
    "fig_curves",
    "fig_q3",
    "fig_rate",
    "judge_c3",
    "judge_q3",
    "lambda_check",
    "q3_evidence",
    "q3_slowing",
    "q3_sweep",
    "record_c3_control",
    "record_curves",
    "record_lambda_check",
    "record_q3",
    "record_rate",
    "summarise",
    "summarise_q3",
    "sweep",
    "table_slowing",
    "validate",
]

SCHEMA = Schema(
    "mlp",
    [
        Param(
            "n_layers",
            "int",
            "depth L of the SAN+MLP networks",
            {"smoke": 12, "full": 12, "paper": 12},
            low=1,
            high=96,
        ),
        Param("n_heads", "int", "heads H per layer", {"smoke": 2, "full": 2, "paper": 4}, low=1, high=64),
        Param("d_model", "int", "width d", {"smoke": 32, "full": 32, "paper": 128}, low=2, high=4096),
        Param(
            "n_tokens", "int", "tokens n per input", {"smoke": 16, "full": 16, "paper": 64}, low=2, high=4096
        ),
        Param("mlp_ratio", "int", "MLP hidden width m: mlp_ratio times d", 4, low=1, high=16),
        Param(
            "mlp_scales",
            "float_list",
            "multipliers of the MLP's output weights (lambda scales with them exactly)",
            {
                "smoke": [0.25, 0.5, 1.0, 2.0, 4.0, 16.0, 64.0],
                "full": [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
                "paper": [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
            },
            low=1e-4,
            high=1e4,
        ),
        Param(
            "weight_scales",
            "float_list",
            "attention weight scales s (entries N(0, s^2/fan_in))",
            {"smoke": [1.0, 2.0], "full": [1.0, 2.0], "paper": [0.5, 1.0, 2.0]},
            low=1e-4,
            high=100.0,
        ),
        Param(
            "seeds",
            "int",
            "random networks (and inputs) per configuration",
            {"smoke": 3, "full": 10, "paper": 20},
            low=1,
            high=1000,
        ),
        Param(
            "q3_seeds",
            "int",
            "networks per lambda and family for the sensitivity measurement (Q3)",
            {"smoke": 3, "full": 6, "paper": 20},
            low=1,
            high=1000,
        ),
        Param(
            "q3_layers",
            "int",
            "depth of Q3's shallow family (SAN+MLP without skips), shallow enough that r(X_L) stays "
            "far above round-off",
            {"smoke": 2, "full": 2, "paper": 2},
            low=1,
            high=8,
        ),
        Param(
            "c3_control_layers",
            "int",
            "depth of C3's control, SAN+MLP without skips as in (a, b) but shallow enough that r(X_L) stays "
            "above round-off at all but the smallest lambdas",
            {"smoke": 3, "full": 3, "paper": 3},
            low=1,
            high=8,
        ),
        Param(
            "q3_dirs",
            "int",
            "random input directions per network for the residual sensitivity (Q3)",
            {"smoke": 4, "full": 8, "paper": 16},
            low=1,
            high=1000,
        ),
        Param(
            "jac_iters",
            "int",
            "power-iteration steps for Jacobian norms",
            {"smoke": 20, "full": 40, "paper": 100},
            low=1,
            high=1000,
        ),
        Param("collapse_tol", "float", "r(X_l) below this counts as collapsed", 1e-6, low=1e-15, high=0.5),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts)."""
    require_divisible(p, "d_model", "n_heads", "d_qk = d_v = d_model / n_heads")
    require_distinct(p, "weight_scales", "scale", "each scale's values are recorded under its name")
    if len(set(p.mlp_scales)) < 4:
        raise ParameterError(
            f"parameter 'mlp_scales' = {p.mlp_scales} needs at least 4 distinct values: the rank "
            "correlation of lambda and rank preservation is taken over them (core.stats.spearman)"
        )
