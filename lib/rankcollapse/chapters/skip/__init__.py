"""Chapter `skip`: Claim 3.1, the path that skips everything, and the open lower-bound problem.

The parameter schema (``SCHEMA``, :func:`validate`) and what ``chapters/skip.md`` calls, re-exported from
the chapter's roles: experiments (:mod:`.experiments`, each returns plain data), rules and verdicts
(:mod:`.verdicts`), records and tables (:mod:`.report`) and figures (:mod:`.figures`, each returns a
matplotlib figure). The search machinery is in :mod:`rankcollapse.core.adversary`.
"""

from __future__ import annotations

from ...book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from .experiments import constructions, frontier, input_scale, skip_curves
from .figures import fig_constructions, fig_effort, fig_frontier, fig_skip_curves
from .report import (
    record_constructions,
    record_frontier,
    record_frontier_noskip,
    record_skip_curves,
    summarise_constructions,
    table_frontier,
)
from .verdicts import RULE_C2, RULE_Q1, VERDICTS, judge_c2, judge_q1

__all__ = [
    "RULE_C2",
    "RULE_Q1",
    "SCHEMA",
    "VERDICTS",
    "check",
    "constructions",
    "fig_constructions",
    "fig_effort",
    "fig_frontier",
    "fig_skip_curves",
    "frontier",
    "input_scale",
    "judge_c2",
    "judge_q1",
    "record_constructions",
    "summarise_constructions",
    "record_frontier",
    "record_frontier_noskip",
    "record_skip_curves",
    "skip_curves",
    "table_frontier",
    "validate",
]

SCHEMA = Schema(
    "skip",
    [
        Param(
            "n_tokens",
            "int",
            "tokens n of the constructions and the curves",
            {"smoke": 16, "full": 32, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "d_model",
            "int",
            "width d of the constructions and the curves",
            {"smoke": 32, "full": 64, "paper": 768},
            low=2,
            high=8192,
        ),
        Param(
            "heads",
            "int",
            "heads H of the constructions and the curves",
            {"smoke": 2, "full": 4, "paper": 12},
            low=1,
            high=128,
        ),
        Param(
            "construct_depths",
            "int_list",
            "depths at which the constructions are checked",
            {"smoke": [1, 4, 16, 64], "full": [1, 4, 16, 64, 256], "paper": [1, 12, 64, 256]},
            low=1,
            high=4096,
        ),
        Param(
            "construct_betas",
            "float_list",
            "beta of the non-trivial family (every head's beta_h equal to it)",
            [1e-6, 1e-3, 1.0, 1e3],
            low=0.0,
            high=1e9,
        ),
        Param(
            "subspace_dim",
            "int",
            "dimension k of the subspace holding the inputs' residual in the family",
            {"smoke": 4, "full": 8, "paper": 64},
            low=1,
            high=8192,
        ),
        Param(
            "curve_layers",
            "int",
            "depth of the SAN vs SAN+skip curves",
            {"smoke": 24, "full": 24, "paper": 12},
            low=1,
            high=256,
        ),
        Param(
            "curve_scales",
            "float_list",
            "weight scales of the curves",
            {"smoke": [0.5, 1.0, 2.0, 4.0], "full": [0.5, 1.0, 2.0, 4.0], "paper": [0.5, 1.0, 2.0]},
            low=1e-6,
            high=100.0,
        ),
        Param(
            "curve_seeds",
            "int",
            "random networks per scale",
            {"smoke": 2, "full": 4, "paper": 3},
            low=1,
            high=1000,
        ),
        Param(
            "floor_mult",
            "float",
            "curves stop at floor_mult float64 machine epsilons",
            100.0,
            low=1.0,
            high=1e6,
        ),
        Param(
            "search_tokens",
            "int",
            "tokens of the lower-bound search",
            {"smoke": 8, "full": 8, "paper": 16},
            low=2,
            high=4096,
        ),
        Param(
            "search_d",
            "int",
            "width of the lower-bound search",
            {"smoke": 8, "full": 8, "paper": 16},
            low=2,
            high=8192,
        ),
        Param(
            "search_heads",
            "int",
            "heads of the lower-bound search (d_qk and d_v are d // H)",
            {"smoke": 1, "full": 1, "paper": 2},
            low=1,
            high=128,
        ),
        Param(
            "search_depths",
            "int_list",
            "depths of the lower-bound search (the shallowest is the one compounded in Q1)",
            {"smoke": [1, 2, 4], "full": [1, 2, 4, 8], "paper": [1, 2, 4, 8, 12]},
            low=1,
            high=96,
        ),
        Param(
            "search_betas",
            "float_list",
            "beta constraints of the lower-bound search",
            {
                "smoke": [0.1, 1.0],
                "full": [0.03, 0.3, 3.0],
                "paper": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
            },
            low=1e-9,
            high=1e6,
        ),
        Param(
            "search_random",
            "int",
            "random parameterisations per (depth, beta)",
            {"smoke": 32, "full": 128, "paper": 1024},
            low=1,
            high=100000,
        ),
        Param(
            "search_steps",
            "int",
            "gradient steps per restart at the first effort level (doubled at each level)",
            {"smoke": 25, "full": 50, "paper": 100},
            low=1,
            high=100000,
        ),
        Param(
            "search_starts",
            "int",
            "random restarts of the adversarial search (the padded and structured candidates descend beside "
            "them)",
            {"smoke": 4, "full": 8, "paper": 16},
            low=1,
            high=1000,
        ),
        Param(
            "search_levels",
            "int",
            "effort cap: at most this many effort levels (steps doubled at each)",
            {"smoke": 5, "full": 8, "paper": 10},
            low=3,
            high=16,
        ),
        Param(
            "search_tol",
            "float",
            "plateau: a cell has converged when four times the effort lowers the random restarts' best "
            "by less than this fraction",
            0.05,
            low=1e-6,
            high=0.9,
        ),
        Param(
            "search_lr",
            "float",
            "Adam learning rate of the adversarial search (on scale-free weights)",
            0.01,
            low=1e-6,
            high=1.0,
        ),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts; the chapter
    again, as :func:`check`)."""
    for d, H in (("d_model", "heads"), ("search_d", "search_heads")):
        require_divisible(p, d, H, f"d_qk = d_v = {d} / {H}")
    if p.subspace_dim >= p.d_model:
        raise ParameterError(
            f"parameters 'subspace_dim' = {p.subspace_dim} and 'd_model' = {p.d_model}: subspace_dim must "
            "be below d_model (the values must have a complement to live in)"
        )
    for name in ("search_depths", "search_betas"):
        require_distinct(p, name, why="the frontier has one cell per depth and beta")


check = validate  # the name the chapter's notebook calls
