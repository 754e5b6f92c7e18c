"""Data of the toy tasks of Dong et al. (2021), Section 4: circle, sort, convex hull, memorisation.

Every draw comes from an explicit ``torch.Generator`` so that training is
reproducible and resumable (the generator's state is the data position).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np
import torch

Tensor = torch.Tensor


# -- circle (Figure 3) -------------------------------------------------------------------
def circle_points(n: int = 1000, radius: float = 0.3, dtype=torch.float32) -> Tensor:
    """``n`` points ``p_i = r (cos 2 pi i/n, sin 2 pi i/n)``, shape (n, 2)."""
    theta = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)
    return (radius * torch.stack([theta.cos(), theta.sin()], -1)).to(dtype)


def circle_dataset(n: int = 1000, radius: float = 0.3, dtype=torch.float32) -> tuple[Tensor, Tensor]:
    """The authors' examples: ``(p_i, p_{i+m}) -> (p_{i+1}, p_{i+m+1})`` with ``m = n//2 - 1``, ``i < m``.

    Returns inputs and targets of shape (m, 2 tokens, 2).
    """
    P = circle_points(n, radius, dtype)
    m = n // 2 - 1
    i = torch.arange(m)
    X = torch.stack([P[i], P[i + m]], 1)
    Y = torch.stack([P[i + 1], P[i + m + 1]], 1)
    return X, Y


# -- sort -----------------------------------------------------------------------------------
def sort_batch(gen: torch.Generator, batch: int, length: int = 8, vocab: int = 10) -> tuple[Tensor, Tensor]:
    """Integers in [0, vocab), shape (batch, length); label = the sorted sequence."""
    x = torch.randint(0, vocab, (batch, length), generator=gen)
    return x, x.sort(dim=-1).values


def sort_position_prior(length: int = 8, vocab: int = 10) -> tuple[list[int], float]:
    """The best input-blind predictor of sort: per position ``k`` the most probable value of the ``k``-th
    order statistic of ``length`` uniform draws from ``[0, vocab)``, and that predictor's expected token
    accuracy (exact, from ``P(X_(k) <= v) = P(#{X_i <= v} >= k)``)."""
    from math import comb

    def at_most(k: int, v: int) -> float:  # P(X_(k) <= v), k 1-based
        F = (v + 1) / vocab
        return sum(comb(length, j) * F**j * (1 - F) ** (length - j) for j in range(k, length + 1))

    modes, acc = [], 0.0
    for k in range(1, length + 1):
        pmf = [at_most(k, v) - (at_most(k, v - 1) if v else 0.0) for v in range(vocab)]
        best = max(range(vocab), key=lambda v: pmf[v])
        modes.append(best)
        acc += pmf[best] / length
    return modes, acc


# -- convex hull -------------------------------------------------------------------------------
def hull_labels(points: np.ndarray) -> np.ndarray:
    """1 for the points that are vertices of the convex hull of ``points`` (n, 2), else 0."""
    from scipy.spatial import ConvexHull

    lab = np.zeros(len(points), dtype=np.int64)
    lab[ConvexHull(points).vertices] = 1
    return lab


def hull_batch(
    gen: torch.Generator, batch: int, n_points: int = 10, side: float = 10.0, shift_std: float = 3.3
) -> tuple[Tensor, Tensor]:
    """Points uniform in [0, side]^2 plus one N(0, shift_std^2) offset shared by the sequence.

    Returns points divided by ``side`` (so the network sees coordinates of order one),
    shape (batch, n, 2) float32, and hull-vertex labels (batch, n) (labels do not depend on the scale).
    """
    pts = torch.rand(batch, n_points, 2, generator=gen, dtype=torch.float64) * side
    pts = pts + torch.randn(batch, 1, 2, generator=gen, dtype=torch.float64) * shift_std
    arr = pts.numpy()
    lab = np.stack([hull_labels(a) for a in arr])
    return (pts / side).to(torch.float32), torch.from_numpy(lab)


# -- memorisation ---------------------------------------------------------------------------------
WORD = re.compile(r"[A-Za-z_]+|\d+|[^\sA-Za-z_\d]")


@lru_cache(maxsize=2)
def stdlib_words() -> tuple[str, ...]:
    """Words of the Python language reference that ships with Python (``pydoc_data.topics``), in topic
    order."""
    from pydoc_data.topics import topics

    text = "\n".join(topics[k] for k in sorted(topics))
    return tuple(WORD.findall(text))


def memorisation_data(n_seq: int, seq_len: int, vocab: int, seed: int) -> tuple[Tensor, Tensor, dict]:
    """``n_seq`` windows of ``seq_len`` consecutive words of real text, each token with a random binary
    label.

    Words are mapped to the ``vocab - 1`` most frequent words plus one "other" id. The
    windows are consecutive from the start of the text (deterministic); labels come from ``seed``.
    Returns ids (n_seq, seq_len), labels (n_seq, seq_len) and facts about the data, among them the
    ``ceiling``: the best accuracy any network without positions can reach (equal ids in one
    sequence must get one prediction, so the majority label of each group is the best it can do).
    """
    words = stdlib_words()
    need = n_seq * seq_len
    if need > len(words):
        raise ValueError(f"the text has {len(words)} words; {n_seq} x {seq_len} = {need} asked for")
    from collections import Counter

    common = [w for w, _ in Counter(words).most_common(vocab - 1)]
    index = {w: i for i, w in enumerate(common)}
    ids = torch.tensor([index.get(w, vocab - 1) for w in words[:need]], dtype=torch.long).view(
        n_seq, seq_len
    )
    g = torch.Generator().manual_seed(int(seed))
    labels = torch.randint(0, 2, (n_seq, seq_len), generator=g)
    return (
        ids,
        labels,
        {
            "ceiling": memorisation_ceiling(ids, labels),
            "text_words": len(words),
            "other_share": float((ids == vocab - 1).float().mean()),
        },
    )


def memorisation_ceiling(ids: Tensor, labels: Tensor) -> float:
    """Best token accuracy for a permutation-equivariant network: per sequence and id, the majority label."""
    good = 0
    for s in range(ids.shape[0]):
        for v in ids[s].unique():
            lab = labels[s][ids[s] == v]
            ones = int(lab.sum())
            good += max(ones, len(lab) - ones)
    return good / ids.numel()
