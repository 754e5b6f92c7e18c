"""Chapter `layernorm`: does layer normalisation help against rank collapse?

The parameter schema (:data:`SCHEMA`) and the checks across parameters (:func:`validate`), with what
``chapters/layernorm.md`` calls re-exported from the chapter's roles: :mod:`.experiments` (what is computed),
:mod:`.verdicts` (the rules of C4 and LN2), :mod:`.report` (records and tables) and :mod:`.figures`.
"""

from __future__ import annotations

from ...book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from .experiments import (
    attack,
    collapse_curves,
    constructed_table,
    counterexamples,
    random_claims,
    rewrite_check,
    side_table,
)
from .figures import fig_attack, fig_counterexample, fig_curves
from .report import (
    record_affine_examples,
    record_attack,
    record_collapse,
    record_constructed,
    record_counterexamples,
    record_random_claims,
    record_rewrite,
    record_sides,
    table_constructed,
    table_counterexamples,
    table_random_claims,
)
from .verdicts import RULE_C4, RULE_LN2, VERDICTS, judge_c4, judge_ln2

__all__ = [
    "RULE_C4",
    "RULE_LN2",
    "SCHEMA",
    "VERDICTS",
    "attack",
    "collapse_curves",
    "constructed_table",
    "counterexamples",
    "fig_attack",
    "fig_counterexample",
    "fig_curves",
    "judge_c4",
    "judge_ln2",
    "random_claims",
    "record_affine_examples",
    "record_attack",
    "record_collapse",
    "record_constructed",
    "record_counterexamples",
    "record_random_claims",
    "record_rewrite",
    "record_sides",
    "rewrite_check",
    "side_table",
    "table_constructed",
    "table_counterexamples",
    "table_random_claims",
    "validate",
]

SCHEMA = Schema(
    "layernorm",
    [
        Param(
            "n_tokens",
            "int",
            "tokens n of the random inputs and SANs",
            {"smoke": 8, "full": 16, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "d_model",
            "int",
            "width d of the random inputs and SANs",
            {"smoke": 16, "full": 32, "paper": 768},
            low=3,
            high=8192,
        ),
        Param(
            "random_trials",
            "int",
            "random inputs per family for the rank claims",
            {"smoke": 20, "full": 100, "paper": 500},
            low=1,
            high=100000,
        ),
        Param(
            "search_max_size",
            "int",
            "counterexample search: sizes with n + d up to this",
            {"smoke": 6, "full": 8, "paper": 10},
            low=4,
            high=20,
        ),
        Param(
            "search_trials",
            "int",
            "counterexample search: integer matrices drawn per size",
            {"smoke": 60, "full": 300, "paper": 2000},
            low=1,
            high=1000000,
        ),
        Param(
            "n_layers",
            "int",
            "depth L of the SANs, the horizon of C4: its rule needs L + 1 - depth > 5",
            {"smoke": 16, "full": 24, "paper": 24},
            low=1,
            high=96,
        ),
        Param(
            "n_heads", "int", "heads H of the SANs", {"smoke": 2, "full": 2, "paper": 12}, low=1, high=128
        ),
        Param(
            "weight_scales",
            "float_list",
            "attention weight scales for the collapse curves",
            {"smoke": [0.5, 1.0, 2.0, 4.0], "full": [0.5, 1.0, 2.0, 4.0], "paper": [0.5, 1.0, 2.0, 4.0]},
            low=1e-4,
            high=100.0,
        ),
        Param(
            "seeds",
            "int",
            "random SANs per configuration",
            {"smoke": 4, "full": 10, "paper": 20},
            low=1,
            high=1000,
        ),
        Param("collapse_tol", "float", "r(X_l) below this counts as collapsed", 1e-6, low=1e-15, high=0.5),
        Param(
            "attack_beta",
            "float",
            "C4 attack: the budget, the beta_h of every head; no bias",
            1.0,
            low=1e-3,
            high=100.0,
        ),
        Param(
            "attack_values",
            "float_list",
            "C4 construction: value scales c of W_VO, with W_QK scaled by beta / c",
            {
                "smoke": [0.25, 0.5, 1.0, 2.0],
                "full": [0.25, 0.5, 1.0, 2.0, 4.0],
                "paper": [0.25, 0.5, 1.0, 2.0, 4.0],
            },
            low=1e-3,
            high=1e3,
        ),
        Param(
            "attack_starts",
            "int",
            "C4 search: random starts on the constraint per objective (with LN, without LN)",
            {"smoke": 1, "full": 3, "paper": 8},
            low=0,
            high=1000,
        ),
        Param(
            "attack_steps",
            "int",
            "C4 search: Adam steps per start",
            {"smoke": 25, "full": 80, "paper": 300},
            low=0,
            high=100000,
        ),
        Param("attack_lr", "float", "C4 search: Adam learning rate", 0.05, low=1e-5, high=1.0),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts)."""
    require_divisible(p, "d_model", "n_heads", "d_qk = d_v = d_model / n_heads")
    if p.n_tokens >= p.d_model:
        raise ParameterError(
            f"parameters 'n_tokens' = {p.n_tokens} and 'd_model' = {p.d_model}: n_tokens must be below "
            "d_model (part (b)'s first input family and part (a)'s side checks are the case of fewer tokens "
            "than features; 2 d_model tokens is the case of more)"
        )
    require_distinct(p, "weight_scales", "scale", "each scale's values are recorded under its name")
