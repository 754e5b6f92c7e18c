"""Chapter `toy-tasks`: the paper's Figures 3 (circle trajectories) and 4 (path effectiveness).

The parameter schema (``SCHEMA``, :func:`validate`) and what ``chapters/toy-tasks.md`` calls, re-exported
from the chapter's roles: experiments and training (:mod:`.experiments`), rules and verdicts
(:mod:`.verdicts`), records and tables (:mod:`.report`) and figures (:mod:`.figures`).
"""

from __future__ import annotations

from ...book.params import Param, ParameterError, Schema, require_divisible
from ...toy import nets as tn
from ...toy import tasks as tt
from .experiments import TASKS, circle_experiment, path_experiments
from .figures import fig_circle, fig_path_effectiveness, fig_training
from .report import record_circle, record_paths, table_circle, table_paths
from .verdicts import RULE_C2, RULE_C5, VERDICTS, judge_c2, judge_c5

__all__ = [
    "RULE_C2",
    "RULE_C5",
    "SCHEMA",
    "VERDICTS",
    "check",
    "circle_experiment",
    "fig_circle",
    "fig_path_effectiveness",
    "fig_training",
    "judge_c2",
    "judge_c5",
    "path_experiments",
    "record_circle",
    "record_paths",
    "table_circle",
    "table_paths",
    "validate",
]

SCHEMA = Schema(
    "toy-tasks",
    [
        Param(
            "archs",
            "str_list",
            "architectures trained: 'bert' (the authors': input LayerNorm, post-LayerNorm attention layers; "
            "the verdicts use it) and 'plain' (the LN-free SAN, a final LayerNorm before the readout)",
            ["bert", "plain"],
            choices=tn.ARCHS,
        ),
        Param(
            "n_seeds",
            "int",
            "training seeds per network of the authors' architecture (seed, seed + 1, ...)",
            {"smoke": 3, "full": 3, "paper": 5},
            low=1,
            high=100,
        ),
        Param(
            "n_seeds_plain",
            "int",
            "training seeds per network of the LN-free SAN",
            {"smoke": 1, "full": 2, "paper": 5},
            low=1,
            high=100,
        ),
        Param(
            "weight_scale",
            "float",
            "initial scale of the SAN weights (Gaussian, fan-in x this^2); at 1 the LN-free SAN's attention "
            "starts saturated and does not learn",
            0.5,
            low=0.01,
            high=4.0,
        ),
        # circle
        Param(
            "circle_hidden",
            "int_list",
            "hidden sizes h of the one-layer circle models",
            {"smoke": [4, 8], "full": [4, 16, 64], "paper": [8, 32, 128]},
            low=2,
            high=4096,
        ),
        Param(
            "circle_steps",
            "int",
            "Adam steps (full batch) per circle model",
            {"smoke": 300, "full": 800, "paper": 20000},
            low=1,
        ),
        Param("circle_lr", "float", "learning rate of the circle models", 1e-2, low=1e-6, high=1.0),
        Param("circle_n", "int", "points on the circle (radius 0.3)", 1000, low=8, high=100000),
        Param(
            "circle_starts",
            "int",
            "antipodal start pairs spread around the circle, each network rolled out from every one (the "
            "first is the spec's (0.3, 0), (-0.3, 0), the one drawn)",
            16,
            low=1,
            high=1000,
        ),
        Param(
            "rollout_steps", "int", "recurrent steps from (0.3, 0) and (-0.3, 0)", 300, low=10, high=100000
        ),
        # path effectiveness
        Param("path_layers", "int", "depth L of the path-effectiveness SANs (paper: 6)", 6, low=1, high=24),
        Param("sort_heads", "int", "heads of the sort SAN (paper: 2)", 2, low=1, high=32),
        Param(
            "sort_d",
            "int",
            "width of the sort SAN (paper: 48)",
            {"smoke": 24, "full": 48, "paper": 48},
            low=2,
            high=4096,
        ),
        Param(
            "sort_steps", "int", "training steps, sort", {"smoke": 120, "full": 300, "paper": 20000}, low=1
        ),
        Param("hull_heads", "int", "heads of the convex-hull SAN (paper: 3)", 3, low=1, high=32),
        Param(
            "hull_d",
            "int",
            "width of the convex-hull SAN (paper: 84)",
            {"smoke": 24, "full": 84, "paper": 84},
            low=2,
            high=4096,
        ),
        Param(
            "hull_steps",
            "int",
            "training steps, convex hull",
            {"smoke": 200, "full": 500, "paper": 20000},
            low=1,
        ),
        Param("mem_heads", "int", "heads of the memorisation SAN (paper: 2)", 2, low=1, high=32),
        Param(
            "mem_d",
            "int",
            "width of the memorisation SAN (paper: 250)",
            {"smoke": 32, "full": 96, "paper": 250},
            low=2,
            high=4096,
        ),
        Param(
            "mem_steps",
            "int",
            "training steps, memorisation",
            {"smoke": 150, "full": 300, "paper": 20000},
            low=1,
        ),
        Param(
            "mem_seqs",
            "int",
            "sequences of real text to memorise",
            {"smoke": 16, "full": 64, "paper": 1024},
            low=1,
            high=100000,
        ),
        Param("mem_len", "int", "words per memorisation sequence", 32, low=2, high=512),
        Param(
            "mem_vocab",
            "int",
            "word vocabulary (most frequent words + one 'other')",
            2000,
            low=2,
            high=100000,
        ),
        Param(
            "batch",
            "int",
            "training batch size (sequences)",
            {"smoke": 32, "full": 128, "paper": 128},
            low=1,
        ),
        Param("lr", "float", "Adam learning rate of the sort SANs", 3e-3, low=1e-6, high=1.0),
        Param(
            "hull_lr",
            "float",
            "Adam learning rate of the convex-hull SANs (at 3e-3 the authors' architecture learns on some "
            "seeds only; the smoke miniature, 24 wide, learns at 3e-3)",
            {"smoke": 3e-3, "full": 1e-3, "paper": 1e-3},
            low=1e-6,
            high=1.0,
        ),
        Param(
            "mem_lr",
            "float",
            "Adam learning rate of the memorisation SAN (3e-3 is unstable at width 128)",
            {"smoke": 3e-3, "full": 1e-3, "paper": 1e-3},
            low=1e-6,
            high=1.0,
        ),
        Param(
            "eval_size",
            "int",
            "test sequences for sort and convex hull",
            {"smoke": 200, "full": 1000, "paper": 2000},
            low=1,
        ),
        Param(
            "n_paths",
            "int",
            "authors' method: paths sampled per length (paper: 5 or 20)",
            5,
            low=1,
            high=1000,
        ),
        Param(
            "n_repeat",
            "int",
            "authors' method: repetitions of the sampling",
            {"smoke": 2, "full": 5, "paper": 10},
            low=1,
            high=1000,
        ),
        Param(
            "model_cache",
            "str",
            "folder of the trained-model cache (None: $RCBOOK_CACHE or <store>/toy, by default "
            "build/states/toy)",
            None,
            optional=True,
        ),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts; the chapter
    again, as :func:`check`)."""
    for t in TASKS:
        require_divisible(p, f"{t}_d", f"{t}_heads")
    if p.mem_seqs * p.mem_len > len(tt.stdlib_words()):
        raise ParameterError(
            f"parameters 'mem_seqs' x 'mem_len' = {p.mem_seqs * p.mem_len} is not allowed: "
            f"the text has {len(tt.stdlib_words())} words"
        )
    if "bert" not in p.archs:
        raise ParameterError(
            f"parameter 'archs' = {p.archs} is not allowed: it must contain 'bert', the authors' "
            "architecture, on which the verdicts are decided"
        )
    if len(set(p.archs)) != len(p.archs):
        raise ParameterError(f"parameter 'archs' = {p.archs} is not allowed: an architecture twice")
    for h in p.circle_hidden:
        if h % 2:
            raise ParameterError(
                f"parameter 'circle_hidden' = {p.circle_hidden} is not allowed: every size must "
                "be even (2 heads)"
            )
    if len(set(p.circle_hidden)) != len(p.circle_hidden):
        raise ParameterError(
            f"parameter 'circle_hidden' = {p.circle_hidden} is not allowed: a size twice (its rollouts "
            "would be counted twice)"
        )
    if p.circle_n % 2:
        raise ParameterError(
            f"parameter 'circle_n' = {p.circle_n} is not allowed: it must be even (each start pair is a "
            "point and its antipode on the circle, p_j and p_(j + circle_n / 2))"
        )
    if p.circle_starts > p.circle_n:
        raise ParameterError(
            f"parameters 'circle_starts' = {p.circle_starts} and 'circle_n' = {p.circle_n}: circle_starts "
            "must not exceed circle_n (the start pairs are spread over the circle_n points, one per point "
            "at most)"
        )


check = validate  # the name the chapter's notebook calls
