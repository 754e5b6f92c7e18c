"""What "exploded" means, stated once for every chapter that meets an exploding network (#41): the
decomposition's C5 (random SANs over weight scales), the skip chapter's C2 (pure SANs against SAN+skip at
random initialisation) and the toy-tasks circle (a learned step rolled out on its own output, where an
exploded rollout is called *diverged*).

* **Definition.** A network (or rollout) has exploded when its output is not finite, or its norm has grown
  more than :data:`EXPLODE` times its input's over every :data:`EXPLODE_DEPTH` layers: ``growth = ||Y|| /
  ||X|| > 10 ** (L / 6)`` for a network of ``L`` layers (Frobenius norms of the token matrices), that is more
  than about 1.47 times per layer on average; for the circle, whose rollout has no layers, the largest token
  norm over the rollout against the start's radius above 10. Growth compounds layer by layer, so the bound
  is per layer. (The first statement of this rule bounded the total growth by 10 at every depth; the smoke
  run of the skip chapter showed that it calls the ordinary residual growth of 24-layer skip networks at
  weight scale 1, about 1.35 per layer, an explosion. At the decomposition's depth, 6, the two agree.)
* **Treatment.** An exploded network is an outcome of its own. Every rule that meets one counts it apart
  and names the count in its reason; none leaves it out of the networks judged, and none counts it as the
  behaviour the claim predicts (a collapse prevented, the circle kept, a shallow ensemble): it counts
  against such a claim, as one more network that does not show it. Nor is an exploded network a collapse:
  a relative residual that falls because the mean grows without bound is not rank collapse.
"""

from __future__ import annotations

import math

EXPLODE = 10.0  # growth ||Y|| / ||X|| above this per EXPLODE_DEPTH layers (or a non-finite output): exploded
EXPLODE_DEPTH = 6  # ... layers: about 1.47 per layer on average

TREATMENT = (
    "a network has exploded when its output is not finite or its norm exceeds "
    f"{EXPLODE:g} times its input's per {EXPLODE_DEPTH} layers (about {EXPLODE ** (1 / EXPLODE_DEPTH):.2f} "
    "per layer); an exploded network is its own outcome, counted apart and named in "
    "the reason, never left out and never counted as the behaviour the claim predicts (nor as a collapse)"
)


def bound(layers: int | None = None) -> float:
    """The growth above which a network of ``layers`` layers has exploded: ``EXPLODE ** (layers /
    EXPLODE_DEPTH)``; :data:`EXPLODE` for a rollout without layers (``None``)."""
    return EXPLODE if layers is None else EXPLODE ** (int(layers) / EXPLODE_DEPTH)


def growth(out_norm: float, in_norm: float) -> float:
    """``out_norm / in_norm`` as a float (inf when the output is not finite or the input is zero)."""
    out_norm, in_norm = float(out_norm), float(in_norm)
    if not math.isfinite(out_norm) or in_norm == 0.0:
        return math.inf
    return out_norm / in_norm


def exploded(g: float | None, layers: int | None = None) -> bool:
    """Whether a growth ``g`` (see :func:`growth`) of a network of ``layers`` layers means it exploded: not
    finite (None, nan or inf) or above :func:`bound`."""
    return g is None or not math.isfinite(float(g)) or float(g) > bound(layers)
