"""Chapter `decomposition`: Theorem 2.1, the sum over paths, checked and used exactly, for
``chapters/decomposition.md``. This file holds the parameter schema (``SCHEMA``), the checks across
parameters (``validate``) and the paper profile's cost estimate (``PAPER_VS_FULL``), and re-exports what the
page calls: the experiments (:mod:`.experiments`), the records and table (:mod:`.report`), the figures
(:mod:`.figures`) and the verdicts D1 and C5 with their rules (:mod:`.verdicts`).
"""

from __future__ import annotations

from ...book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from .experiments import architecture_lengths, length_shares, reconstruction, recursion_at_scale
from .figures import fig_length_shares, fig_path_lengths, fig_reconstruction, fig_regime
from .report import (
    record_architectures,
    record_reconstruction,
    record_recursion,
    record_shares,
    table_architectures,
)
from .verdicts import RULE_C5, RULE_D1, VERDICTS, c5_evidence, judge_c5, judge_d1

__all__ = [
    "PAPER_VS_FULL",
    "RULE_C5",
    "RULE_D1",
    "SCHEMA",
    "VERDICTS",
    "architecture_lengths",
    "c5_evidence",
    "fig_length_shares",
    "fig_path_lengths",
    "fig_reconstruction",
    "fig_regime",
    "judge_c5",
    "judge_d1",
    "length_shares",
    "reconstruction",
    "record_architectures",
    "record_reconstruction",
    "record_recursion",
    "record_shares",
    "recursion_at_scale",
    "table_architectures",
    "validate",
]


SCHEMA = Schema(
    "decomposition",
    [
        Param(
            "recon_layers",
            "int_list",
            "depths L for the explicit path-sum reconstruction",
            {"smoke": [1, 2, 3, 4], "full": [1, 2, 3, 4, 6], "paper": [1, 2, 3, 4, 6]},
            low=1,
            high=12,
        ),
        Param(
            "recon_heads",
            "int_list",
            "head counts H for the explicit path-sum reconstruction",
            {"smoke": [1, 2, 3], "full": [1, 2, 4], "paper": [1, 2, 4, 8]},
            low=1,
            high=16,
        ),
        Param(
            "n_tokens",
            "int",
            "tokens n of the small networks",
            {"smoke": 8, "full": 16, "paper": 32},
            low=2,
            high=4096,
        ),
        Param(
            "d_model",
            "int",
            "width d of the small networks",
            {"smoke": 16, "full": 32, "paper": 64},
            low=2,
            high=8192,
        ),
        Param(
            "max_paths",
            "int",
            "largest number of paths enumerated one by one (skip configurations above it)",
            {"smoke": 1024, "full": 20000, "paper": 100000},
            low=1,
        ),
        Param(
            "weight_scale",
            "float",
            "weight scale s (entries N(0, s^2/fan_in)) of the reconstruction networks",
            1.0,
            low=1e-6,
            high=100.0,
        ),
        Param(
            "big_layers",
            "int",
            "depth of the large network for the exact recursion",
            {"smoke": 6, "full": 12, "paper": 12},
            low=1,
            high=96,
        ),
        Param(
            "big_heads",
            "int",
            "heads of the large network",
            {"smoke": 4, "full": 12, "paper": 12},
            low=1,
            high=128,
        ),
        Param(
            "big_tokens",
            "int",
            "tokens of the large network",
            {"smoke": 32, "full": 128, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "big_d",
            "int",
            "width of the large network",
            {"smoke": 64, "full": 768, "paper": 768},
            low=2,
            high=8192,
        ),
        Param(
            "share_scales",
            "float_list",
            "weight scales at which the share of each path length is measured (a wide grid: C5 is decided "
            "on the part of it where the question is meaningful)",
            {
                "smoke": [0.25, 0.5, 0.7, 0.85, 1.0, 1.2, 1.4, 2.0, 4.0],
                "full": [0.25, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 2.0, 2.8, 4.0],
                "paper": [0.125, 0.25, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 2.0, 2.8, 4.0],
            },
            low=1e-6,
            high=100.0,
        ),
        Param(
            "share_seeds",
            "int",
            "random networks per scale for the shares",
            {"smoke": 2, "full": 2, "paper": 10},
            low=1,
            high=1000,
        ),
    ],
)


# estimated cost of the paper profile relative to full (more seeds, larger enumerations); used by
# `rcbook run --profile paper` to tell a CPU user how long it would take
PAPER_VS_FULL = 3.0


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts)."""
    small = [H for H in p.recon_heads if p.d_model // H < 1]
    if small:
        raise ParameterError(
            f"parameters 'd_model' = {p.d_model} and 'recon_heads' = {p.recon_heads}: every head count "
            f"must be at most d_model (each head's d_qk = d_v = d_model // H must be >= 1; "
            f"{p.d_model} // {small[0]} = 0)"
        )
    require_divisible(p, "big_d", "big_heads", "d_qk = d_v = big_d / big_heads")
    fewest = min(p.recon_heads) ** min(p.recon_layers)
    if fewest > p.max_paths:
        raise ParameterError(
            f"parameters 'recon_heads' = {p.recon_heads}, 'recon_layers' = {p.recon_layers} and "
            f"'max_paths' = {p.max_paths}: no configuration would be enumerated (the smallest has H^L = "
            f"{fewest} paths > max_paths)"
        )
    require_distinct(p, "share_scales", "scale", "each scale's values are recorded under its name")
