"""What "exploded" means (rankcollapse.core.explosion): one rule for every chapter, per layer."""

import math

from rankcollapse.core import explosion


def test_the_bound_compounds_per_layer():
    assert explosion.bound(None) == explosion.EXPLODE  # a rollout without layers
    assert math.isclose(explosion.bound(explosion.EXPLODE_DEPTH), explosion.EXPLODE)
    assert math.isclose(explosion.bound(24), explosion.EXPLODE**4)
    # a deep skip network growing 1.35x per layer has not exploded; one growing 2x per layer has
    assert not explosion.exploded(1.35**24, 24) and explosion.exploded(2.0**24, 24)
    # at the decomposition's depth the per-layer bound is the old total bound
    assert explosion.exploded(10.4, 6) and not explosion.exploded(9.9, 6)
    assert explosion.exploded(None) and explosion.exploded(math.inf, 3) and explosion.exploded(math.nan)
    assert explosion.growth(float("nan"), 1.0) == math.inf and explosion.growth(2.0, 0.0) == math.inf
