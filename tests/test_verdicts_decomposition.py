"""The decomposition chapter's verdicts, each a pure function of its evidence: synthetic evidence for every
outcome (``CASES``, checked by tests/test_verdict_rules.py) and the edge cases (no experiment run)."""

from rankcollapse.chapters.decomposition import verdicts


def _d1(e64=5e-16, e32=4e-7, big=6e-16, configs=20):
    return {"configs": configs, "err_f64": e64, "err_f32": e32, "big_err_f64": big}


def _c5(rows, L=6):
    return {
        "L": L,
        "scales": [
            {"scale": s, "trunc0": t0, "trunc_half": th, "growth": g, "k90": 0} for s, t0, th, g in rows
        ],
    }


# (scale, truncation error at length 0, at length L/2, output growth)
IDENTITY = (0.25, 0.002, 0.0, 1.01)  # the input alone reproduces res(Y): outside the regime
EXPLODED = (2.0, 1.0, 0.99, 5e3)  # the forward pass exploded: outside the regime

CASES = {
    "D1": {
        "supported": _d1(),
        "refuted": _d1(e64=1e-3),
        "inconclusive": _d1(e64=1e-9),
    },
    "C5": {
        "supported": _c5([IDENTITY, (0.7, 0.13, 0.0, 1.2), (1.0, 0.68, 0.03, 3.3), EXPLODED]),
        "refuted": _c5([IDENTITY, (0.7, 0.5, 0.4, 2.0), (1.0, 0.9, 0.6, 8.0), EXPLODED]),
        "inconclusive": _c5([IDENTITY, (0.7, 0.13, 0.0, 1.2), (1.0, 0.9, 0.6, 8.0), EXPLODED]),
    },
}


def test_c5_ignores_the_grid_outside_the_regime():
    # the old rule read every scale: here it would say "inconclusive" (k90 = 0 at 0.25, = L at 2)
    ev = CASES["C5"]["supported"]
    assert [r["scale"] for r in verdicts.c5_regime(ev["scales"])] == [0.7, 1.0]
    # adding more identity-dominated or exploded scales changes nothing
    more = _c5([(0.1, 0.0, 0.0, 1.0), *[tuple(r.values())[:4] for r in ev["scales"]], (8.0, 1.0, 1.0, 1e9)])
    assert verdicts.verdict_c5(more)[0] == "supported"
    # fewer than two scales in the regime: too few to decide
    assert verdicts.verdict_c5(_c5([IDENTITY, (1.0, 0.68, 0.03, 3.3), EXPLODED]))[0] == "inconclusive"
    reason = verdicts.verdict_c5(ev)[1]
    assert "0.7 to 1" in reason and "0.25" in reason and "2" in reason


def test_d1_without_configurations_is_inconclusive():
    assert verdicts.verdict_d1(_d1(configs=0))[0] == "inconclusive"
