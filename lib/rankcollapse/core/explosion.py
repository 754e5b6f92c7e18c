"""What "exploded" means, stated once for every chapter that meets an exploding network (#41): the
decomposition's C5 (random SANs over weight scales), the skip chapter's C2 (pure SANs against SAN+skip at
random initialisation) and the toy-tasks circle (a learned step rolled out on its own output, where an
exploded rollout is called *diverged*).

* **Definition.** A network (or rollout) has exploded when its output is not finite, or its norm has grown
  more than :data:`EXPLODE` times its input's: ``growth = ||Y|| / ||X|| > 10`` (Frobenius norms of the
  token matrices; for the circle, the largest token norm over the rollout against the start's radius).
* **Treatment.** An exploded network is an outcome of its own. Every rule that meets one counts it apart
  and names the count in its reason; none leaves it out of the networks judged, and none counts it as the
  behaviour the claim predicts (a collapse prevented, the circle kept, a shallow ensemble): it counts
  against such a claim, as one more network that does not show it. Nor is an exploded network a collapse:
  a relative residual that falls because the mean grows without bound is not rank collapse.
"""

from __future__ import annotations

import math

EXPLODE = 10.0  # growth ||Y|| / ||X|| above this (or a non-finite output): the network has exploded

TREATMENT = (
    "a network has exploded when its output is not finite or its norm exceeds "
    f"{EXPLODE:g} times its input's; an exploded network is its own outcome, counted apart and named in "
    "the reason, never left out and never counted as the behaviour the claim predicts (nor as a collapse)"
)


def growth(out_norm: float, in_norm: float) -> float:
    """``out_norm / in_norm`` as a float (inf when the output is not finite or the input is zero)."""
    out_norm, in_norm = float(out_norm), float(in_norm)
    if not math.isfinite(out_norm) or in_norm == 0.0:
        return math.inf
    return out_norm / in_norm


def exploded(g: float | None) -> bool:
    """Whether a growth ``g`` (see :func:`growth`) means the network exploded: not finite (None, nan or
    inf) or above :data:`EXPLODE`."""
    return g is None or not math.isfinite(float(g)) or float(g) > EXPLODE
