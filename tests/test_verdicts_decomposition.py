"""The decomposition chapter's verdicts, each a pure function of its evidence: synthetic evidence for every
outcome (``CASES``, checked by tests/test_verdict_rules.py) and the edge cases (no experiment run)."""

from fakes import RecordingChapter
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
EXPLODED = (2.0, 1.0, 0.99, 5e3)  # the forward pass exploded: in the regime, counted as not holding

CASES = {
    "D1": {
        "supported": _d1(),
        "refuted": _d1(e64=1e-3),
        "inconclusive": _d1(e64=1e-9),
    },
    "C5": {
        "supported": _c5([IDENTITY, (0.7, 0.13, 0.0, 1.2), (1.0, 0.68, 0.03, 3.3)]),
        "refuted": _c5([IDENTITY, (0.7, 0.5, 0.4, 2.0), (1.0, 0.9, 0.6, 8.0), EXPLODED]),
        "inconclusive": _c5([IDENTITY, (0.7, 0.13, 0.0, 1.2), (1.0, 0.9, 0.6, 8.0), EXPLODED]),
    },
}


def test_c5_ignores_the_identity_end_and_counts_exploded_scales_as_not_holding():
    ev = CASES["C5"]["supported"]
    assert [r["scale"] for r in verdicts.c5_regime(ev["scales"])] == [0.7, 1.0]
    # more identity-dominated scales change nothing
    more = _c5([(0.1, 0.0, 0.0, 1.0), *[tuple(r.values())[:4] for r in ev["scales"]]])
    assert verdicts.verdict_c5(more)[0] == "supported"
    # an exploded scale is in the regime, reported apart, and never holds, whatever its truncation error
    rows = [tuple(r.values())[:4] for r in ev["scales"]]
    v, reason = verdicts.verdict_c5(_c5([*rows, (1.2, 0.99, 0.05, 10.4)]))
    assert v == "inconclusive" and "1.2 (exploded)" in reason and "explodes (growth > 10) at 1.2" in reason
    assert verdicts.verdict_c5(_c5([*rows, (1.2, 0.99, 0.05, float("nan"))]))[0] == "inconclusive"
    # the previous rule left the exploded scale out: supported on the same evidence
    assert verdicts.prev_verdict_c5(_c5([*rows, (1.2, 0.99, 0.05, 10.4)]))[0] == "supported"
    # fewer than two scales in the regime: too few to decide
    assert verdicts.verdict_c5(_c5([IDENTITY, (1.0, 0.68, 0.03, 3.3)]))[0] == "inconclusive"
    reason = verdicts.verdict_c5(ev)[1]
    assert "0.7 to 1" in reason and "0.25" in reason and "random SANs with skips" in reason


def test_c5_without_skips_is_refuted_and_a_nan_residual_is_not_the_identity():
    L = 6
    rows = [(s, 1.0, 1.0, g) for s, g in ((0.5, 0.3), (1.0, 0.9), (2.0, 40.0))]
    assert verdicts.verdict_c5(_c5(rows, L))[0] == "refuted"
    assert verdicts.c5_regime(_c5([(1.0, float("nan"), float("nan"), 1.0)])["scales"])


def test_judge_c5_and_d1_put_their_controls_into_the_evidence():
    ch = RecordingChapter()
    noskip = _c5([(s, 1.0, 1.0, 0.5) for s in (0.7, 1.0, 2.0)])
    assert verdicts.judge_c5(ch, CASES["C5"]["supported"], control=noskip) == "supported"
    c = ch.verdicts["C5"]["evidence"]["control"]
    assert c["verdict"] == "refuted" and "without skips" in c["on"] and "without skips" in c["reason"]
    assert ch.values["c5_prev_rule_verdict"] == "supported"
    recon = [
        {"dtype": dt, "err_paths": 1e-16, "err_drop_longest": e}
        for dt, e in (("float64", 0.3), ("float32", 0.2), ("float64", 1.0))
    ]
    big = {"err_float64": 6e-16, "err_drop_longest_float64": 0.05}
    v = verdicts.judge_d1(ch, recon, {"float64": 5e-16, "float32": 4e-7}, big)
    c = ch.verdicts["D1"]["evidence"]["control"]
    assert v == "supported" and c["verdict"] == "refuted" and "smallest error" in c["reason"]
    assert c["evidence"]["min_err"] == 0.2 and "longest paths" in c["on"]


def test_d1_without_configurations_is_inconclusive():
    assert verdicts.verdict_d1(_d1(configs=0))[0] == "inconclusive"
