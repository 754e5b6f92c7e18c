"""Reading a run's history: the last block's srank, a series at a measurement step, the median around a
step, Q of an srank, and the steps a branch takes to recover after its switch."""

from __future__ import annotations

import math
import statistics

from ..lm import training as tr


def last_srank(hist: dict) -> list[float]:
    return [s[-1] for s in hist["srank"]]


def at_step(hist: dict, step: int, key: str = "srank", block: int = -1):
    """Value of a measured series at the measurement step ``step`` (exact match required)."""
    i = hist["m_step"].index(step)
    v = hist[key][i]
    return v[block] if isinstance(v, list) else v


def median_around(hist: dict, step: int, k: int = 10) -> float:
    """Median of the last block's srank over the ``k`` measurements ending at ``step``."""
    i = hist["m_step"].index(step)
    s = last_srank(hist)
    return statistics.median(s[max(0, i - k + 1) : i + 1])


def q_of(srank: float) -> float:
    return math.sqrt(max(srank - 1.0, 0.0))


def recovery(hist: dict, start: int, threshold: float, k: int) -> int | None:
    """Steps after the switch until the ``k``-measurement median of the last block's srank reaches the
    threshold (None: never within the branch)."""
    med = tr.rolling_median(last_srank(hist), k)
    for t, m in zip(hist["m_step"], med):
        if m >= threshold:
            return t - start
    return None
