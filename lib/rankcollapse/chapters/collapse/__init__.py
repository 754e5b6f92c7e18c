"""Chapter `collapse`: Theorems 2.2/2.3, the doubly exponential loss of rank in pure SANs, for
``chapters/collapse.md``. This file holds the parameter schema (``SCHEMA``) and the checks across parameters
(``validate``), and re-exports what the page calls: the experiments (:mod:`.experiments`), the records and
table (:mod:`.report`), the figures (:mod:`.figures`) and the verdict C1 with its rule (:mod:`.verdicts`).
"""

from __future__ import annotations

from ...book.params import Param, Schema, require_distinct, require_divisible
from .experiments import _check_heads, bound_rows, curves, phase_diagram, skip_control
from .figures import fig_bound, fig_curves, fig_exponent, fig_floor, fig_phase
from .report import (
    record_bound,
    record_curves,
    record_exponents,
    record_floor,
    record_phase,
    record_skip_control,
    table_bound_by_scale,
)
from .verdicts import RULE_C1, VERDICTS, judge_c1

__all__ = [
    "RULE_C1",
    "SCHEMA",
    "VERDICTS",
    "bound_rows",
    "curves",
    "fig_bound",
    "fig_curves",
    "fig_exponent",
    "fig_floor",
    "fig_phase",
    "judge_c1",
    "phase_diagram",
    "skip_control",
    "record_bound",
    "record_curves",
    "record_exponents",
    "record_floor",
    "record_phase",
    "record_skip_control",
    "table_bound_by_scale",
    "validate",
]


SCHEMA = Schema(
    "collapse",
    [
        Param(
            "n_tokens",
            "int",
            "tokens n per input",
            {"smoke": 16, "full": 32, "paper": 128},
            low=2,
            high=4096,
        ),
        Param(
            "n_layers", "int", "depth L of the curves", {"smoke": 8, "full": 12, "paper": 12}, low=1, high=96
        ),
        Param(
            "widths",
            "int_list",
            "model widths d of the curves",
            {"smoke": [16, 32], "full": [32, 64, 128], "paper": [768]},
            low=2,
            high=8192,
        ),
        Param(
            "heads",
            "int_list",
            "head counts H of the curves (d_qk and d_v are d // H)",
            {"smoke": [1, 4], "full": [1, 4, 8], "paper": [1, 12]},
            low=1,
            high=128,
        ),
        Param(
            "scales",
            "float_list",
            "weight scales s of the curves (entries N(0, s^2/fan_in))",
            {"smoke": [0.5, 1.0, 2.0], "full": [0.25, 0.5, 1.0, 2.0, 4.0], "paper": [0.5, 1.0, 2.0]},
            low=1e-6,
            high=100.0,
        ),
        Param(
            "seeds",
            "int",
            "random networks (and inputs) per configuration",
            {"smoke": 2, "full": 3, "paper": 3},
            low=1,
            high=1000,
        ),
        Param(
            "bias", "bool", "layers carry a bias 1b^T (it never changes res, but moves the token mean)", True
        ),
        Param(
            "floor_mult",
            "float",
            "a curve stops at the float floor: r(X) at most floor_mult times machine epsilon",
            100.0,
            low=1.0,
            high=1e6,
        ),
        Param(
            "ref_scale",
            "float",
            "weight scale of the configuration whose bound is shown layer by layer",
            1.0,
            low=1e-6,
            high=100.0,
        ),
        Param(
            "phase_scales",
            "float_list",
            "weight scales of the phase diagram",
            {
                "smoke": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
                "full": [0.125, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0],
                "paper": [0.125, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0],
            },
            low=1e-6,
            high=100.0,
        ),
        Param(
            "phase_dqk",
            "int_list",
            "query-key widths d_qk of the phase diagram",
            {"smoke": [1, 4, 16], "full": [1, 2, 4, 8, 16, 32, 64], "paper": [1, 4, 16, 64, 256]},
            low=1,
            high=8192,
        ),
        Param(
            "phase_d",
            "int",
            "model width of the phase diagram",
            {"smoke": 16, "full": 64, "paper": 768},
            low=2,
            high=8192,
        ),
        Param(
            "phase_heads",
            "int",
            "heads of the phase diagram",
            {"smoke": 1, "full": 1, "paper": 12},
            low=1,
            high=128,
        ),
        Param(
            "phase_layers",
            "int",
            "depth of the phase diagram",
            {"smoke": 6, "full": 12, "paper": 12},
            low=1,
            high=96,
        ),
        Param(
            "phase_seeds",
            "int",
            "networks per phase-diagram cell",
            {"smoke": 1, "full": 2, "paper": 3},
            low=1,
            high=1000,
        ),
        Param(
            "fit_inputs",
            "int",
            "calibration inputs per network on which the certificate's one gamma is fitted (never the input "
            "it is tested on)",
            {"smoke": 4, "full": 8, "paper": 8},
            low=1,
            high=1000,
        ),
        Param(
            "fit_input_scales",
            "float_list",
            "scales c of the calibration inputs c X (so the fit sees the small residuals deep layers see)",
            [1.0, 0.1, 0.01],
            low=1e-8,
            high=1e3,
        ),
        Param(
            "collapse_tol",
            "float",
            "a network has collapsed when r(X_L) is at most collapse_tol",
            1e-3,
            low=0.0,
            high=1.0,
        ),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts)."""
    _check_heads(p.widths, p.heads)
    require_divisible(p, "phase_d", "phase_heads", "the phase diagram's d_v = phase_d / phase_heads")
    for name in ("phase_dqk", "phase_scales"):
        require_distinct(p, name, why="the phase diagram has one column per value")
