"""Statistics the chapters share: one rank correlation."""

from __future__ import annotations


def spearman(x, y, min_points: int = 4) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when there is nothing to rank: fewer than
    ``min_points`` pairs, or either side constant."""
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} x values against {len(y)} y values")
    if len(x) < min_points or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)
