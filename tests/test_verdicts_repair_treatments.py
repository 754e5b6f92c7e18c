"""Synthetic evidence for every outcome of repair-treatments' verdict rule (H2: no loss term repairs the
collapse, though the bounded one pushes hard); tests/test_verdict_rules.py runs CASES. Edge cases of the
rule, and of the two recovery thresholds it is judged under, below."""

from types import SimpleNamespace

from rankcollapse.chapters.repair_treatments import report
from rankcollapse.chapters.repair_treatments import verdicts as trt
from rankcollapse.repair.events import LITERAL_FRAC
from rankcollapse.repair.recovery import recovery
from rankcollapse.repair.treatments import TREATMENTS

TERMS = ("penalty-1x", "penalty-4x", "hinge-1x", "hinge-4x", "cosine-1x")
RHO = {"penalty-1x": 0.02, "penalty-4x": 0.06, "hinge-1x": 0.29, "hinge-4x": 1.1, "cosine-1x": 0.16}


def _ev(rec=0, rev=6, n=6, rho=None, untreated=0, **per_term):
    by = {t: rec for t in TERMS}
    by.update({k.replace("_", "-"): v for k, v in per_term.items()})
    return {
        "threshold": "book's stricter",
        "events": n,
        "recovered_by_term": by,
        "reversed_ramp_recovered": rev,
        "untreated_recovered": untreated,
        "rho_median": dict(RHO if rho is None else rho),
    }


CASES = {
    "H2": {
        "supported": _ev(n=7, rev=7, penalty_4x=1),  # the full record: 1 of 35, upper bound 12.9%
        "refuted": _ev(n=7, rev=7, rec=2, hinge_4x=4),  # 12 of 35: lower bound 21% > 20%
        "inconclusive": _ev(n=2, rev=2),  # the smoke record: 0 of 10, upper bound 25.9% > 20%
    }
}


def test_h2_fisher_supported_needs_the_positive_control_and_the_hinges_push():
    # the reversed ramp recovers in half the events: enough; in fewer than half: not
    assert trt.verdict_h2_fisher(_ev(rev=3))[0] == "supported"
    v, why = trt.verdict_h2_fisher(_ev(rev=2))
    assert v == "inconclusive" and "positive control" in why and "2 of 6" in why
    v, why = trt.verdict_h2_fisher(_ev(rev=None))
    assert v == "inconclusive" and "not run" in why
    # the hinge pushes no harder than 3x the penalty: no support, even with nothing recovered
    weak = dict(RHO, **{"hinge-1x": 0.05})
    v, why = trt.verdict_h2_fisher(_ev(rho=weak))
    assert v == "inconclusive" and "3x" in why
    v, _ = trt.verdict_h2_fisher(_ev(rho={k: x for k, x in RHO.items() if k != "penalty-1x"}))
    assert v == "inconclusive"


def test_h2_fisher_refutation_is_more_than_half_the_events_of_one_term():
    assert trt.verdict_h2_fisher(_ev(cosine_1x=3))[0] != "refuted"  # half is not more than half
    v, why = trt.verdict_h2_fisher(_ev(cosine_1x=4))
    assert v == "refuted" and why.startswith("cosine-1x") and "4 of 6" in why
    # two events (smoke): a term must recover in both to refute
    assert trt.verdict_h2_fisher(_ev(n=2, rev=2, hinge_1x=1))[0] != "refuted"
    assert trt.verdict_h2_fisher(_ev(n=2, rev=2, hinge_1x=2))[0] == "refuted"
    # a refutation does not need the positive control
    assert trt.verdict_h2_fisher(_ev(rev=0, penalty_1x=6))[0] == "refuted"
    v, why = trt.verdict_h2_fisher(_ev(n=0, rev=0))
    assert v == "inconclusive" and "0 events" in why


def test_h2_fisher_reason_quotes_counts_with_denominators_on_one_line():
    _, why = trt.verdict_h2_fisher(_ev())
    assert "0 of 30 loss-term branches" in why and "reversed ramp 6 of 6 events" in why
    assert "14.5x" in why and "stricter threshold" in why and "\n" not in why


def _branch(sranks, start=1000):
    steps = [start + 10 * i for i in range(len(sranks))]
    return {"hist": {"m_step": steps, "srank": [[s] for s in sranks]}}


def test_the_literal_threshold_counts_a_branch_that_barely_moved():
    """Healthy srank 3.2: the paper's literal threshold is 1.6, the stricter one 1.5 + 0.5 * 1.7 = 2.35. A
    branch that climbs from 1.3 to 1.7 and stays there recovers under the literal rule, not the strict one;
    the H2 verdicts under the two differ."""
    hs, thr, k = 3.2, 1.5, 5
    strict, literal = thr + 0.5 * (hs - thr), LITERAL_FRAC * hs
    assert literal > thr and strict > literal
    b = _branch([1.3] * 5 + [1.7] * 20)
    assert recovery(b["hist"], 1000, strict, k) is None
    assert recovery(b["hist"], 1000, literal, k) == 70  # the 5-median reaches 1.7 at the third 1.7
    # six events, every term moves that far in four: strict supported, literal refuted
    assert trt.verdict_h2(_ev())[0] == "supported"
    lit = _ev(rec=4) | {"threshold": "paper's literal"}
    v, why = trt.verdict_h2(lit)
    assert v == "refuted" and "paper's literal threshold" in why


def _rows(lit):
    return [{"recovered_after": None, "recovered_after_literal": x} for x in lit]


def test_h2_evidence_reads_both_thresholds_and_leaves_out_literal_thresholds_below_collapse():
    """Two events: the first's literal threshold (1.55) lies above the collapse threshold, the second's
    (1.33) below it. The strict counts come from the summary over both; the literal ones only from the
    first event, the second listed as excluded."""
    p = SimpleNamespace(treatments=list(TREATMENTS), threshold=1.5)
    events = [{"seed": 0, "rec_threshold_literal": 1.55}, {"seed": 1, "rec_threshold_literal": 1.33}]
    summ = {
        t: {"recovered": 0, "recovered_literal": 1, "rho_median": RHO.get(t), "rows": _rows([None, 40])}
        for t in TREATMENTS
    }
    summ["hinge-4x"]["rows"] = _rows([20, 30])
    summ["reversed-ramp"].update(recovered=2, recovered_literal=2, rows=_rows([100, 90]))
    strict = trt.h2_evidence(p, events, summ)
    lit = trt.h2_evidence(p, events, summ, literal=True)
    assert strict["events"] == 2 and strict["recovered_by_term"]["hinge-1x"] == 0
    assert lit["events"] == 1 and lit["excluded_seeds"] == {"1": 1.33}
    assert lit["recovered_by_term"]["hinge-1x"] == 0 and lit["recovered_by_term"]["hinge-4x"] == 1
    assert lit["untreated_recovered"] == 0 and lit["reversed_ramp_recovered"] == 1
    assert trt.verdict_h2_zero(strict)[0] == "supported" and trt.verdict_h2_zero(lit)[0] == "refuted"
    assert "excluded_seeds" not in strict


def test_literal_position_phrase():
    assert report.literal_position([1.57, 1.73], 1.5).startswith("barely above")
    assert report.literal_position([1.2, 1.4], 1.5).startswith("at or below")
    assert "1 of 2 events" in report.literal_position([1.33, 1.55], 1.5)


def test_fisher_greater_is_the_hypergeometric_tail():
    from math import comb

    assert trt.fisher_greater(0, 0, 7) == 1.0
    assert abs(trt.fisher_greater(1, 0, 7) - 0.5) < 1e-15  # one recovery: either arm, equally likely
    assert abs(trt.fisher_greater(4, 0, 10) - comb(10, 4) / comb(20, 4)) < 1e-15
    assert abs(trt.fisher_greater(4, 0, 8) - 70 / 1820) < 1e-15
    assert trt.fisher_greater(0, 3, 8) == 1.0  # fewer than the control: nothing to see
    assert trt.fisher_greater(3, 1, 8) > trt.fisher_greater(4, 1, 8) > trt.fisher_greater(5, 1, 8)
    from scipy.stats import fisher_exact

    for k, c, n in [(2, 0, 6), (3, 1, 8), (5, 2, 9), (1, 1, 2)]:
        ref = fisher_exact([[k, n - k], [c, n - c]], alternative="greater").pvalue
        assert abs(trt.fisher_greater(k, c, n) - ref) < 1e-12
    for bad in [(-1, 0, 3), (4, 0, 3), (0, 0, 0)]:
        try:
            trt.fisher_greater(*bad)
        except ValueError as e:
            assert "0 <= k <= n" in str(e)
        else:
            raise AssertionError(bad)


def test_h2_one_recovered_branch_does_not_decide_but_the_first_rule_did():
    """The two full hosts: an AVX-512 host with 7 events of which seed 0's penalty-4x recovered (1 of 35),
    an AVX2 host with 8 events and no loss-term branch recovered (0 of 40). The first rule gave them
    different verdicts; the rule that decides gives both the same."""
    avx512 = _ev(n=7, rev=7, penalty_4x=1)
    avx2 = _ev(n=8, rev=8)
    assert trt.verdict_h2_zero(avx512)[0] == "inconclusive" and trt.verdict_h2_zero(avx2)[0] == "supported"
    assert trt.verdict_h2_fisher(avx512)[0] == trt.verdict_h2_fisher(avx2)[0] == "supported"
    _, why = trt.verdict_h2_fisher(avx512)
    assert "penalty-4x's 0.5" in why and "1 of 35" in why
    # the pooled rule too: 1 of 35 (upper bound 12.9%) and 0 of 40 (7.2%) are both below the allowed 20%
    assert trt.verdict_h2(avx512)[0] == trt.verdict_h2(avx2)[0] == "supported"
    _, why = trt.verdict_h2(avx512)
    assert "1 of 35 = 2.86%" in why and "0.146% to 12.9%" in why and "at most 20%" in why


def test_h2_fisher_a_term_that_beats_the_untreated_is_not_support():
    v, why = trt.verdict_h2_fisher(_ev(n=8, rev=8, hinge_1x=4))  # 4 of 8 against 0 of 8: p 0.038
    assert v == "inconclusive" and "hinge-1x recovered more often than the untreated" in why
    assert trt.verdict_h2_fisher(_ev(n=8, rev=8, hinge_1x=4, untreated=2))[0] == "supported"  # p 0.30
    assert trt.verdict_h2_fisher(_ev(n=8, rev=8, hinge_1x=3))[0] == "supported"  # p 0.10: not shown
    # without the negative control there is nothing to compare with
    v, why = trt.verdict_h2_fisher(_ev(untreated=None))
    assert v == "inconclusive" and "untreated control was not run" in why
    assert trt.verdict_h2_zero(_ev(untreated=None))[0] == "supported"  # the first rule did not ask


def test_h2_first_rule_outcomes():
    assert trt.verdict_h2_zero(_ev())[0] == "supported"
    assert trt.verdict_h2_zero(_ev(hinge_4x=4))[0] == "refuted"
    v, why = trt.verdict_h2_zero(_ev(hinge_4x=1))
    assert v == "inconclusive" and "some loss-term branches recovered" in why
    assert trt.verdict_h2_zero(_ev(n=0))[0] == "inconclusive"


def test_min_significant():
    assert trt.min_significant(0, 8) == 4 and trt.min_significant(0, 10) == 4
    assert trt.min_significant(0, 2) is None  # two events cannot show anything at 0.05
    assert trt.min_significant(2, 8) == 7


def test_h2_across_the_counts_intervals_both_outcomes():
    # 0 of 20 everywhere, the ramp at 20 of 20: every count's interval (0-3 of 20) keeps H2 supported
    far = trt.h2_across_interval(_ev(n=20, rev=20))
    assert far["verdict"] == "supported" and far["holds"] and far["counts"]["penalty-1x"] == [0, 20, 0, 3]
    # 0 of 7: a term's interval reaches 2 of 7, the untreated's too; at 7 events the ramp's 4 of 7 reaches
    # 1 (below half): the verdict does not hold, and the flip is named
    near = trt.h2_across_interval(_ev(n=7, rev=4))
    assert near["verdict"] == "supported" and not near["holds"]
    assert near["flips"]["reversed ramp"][0] == [3, "inconclusive"]
    from rankcollapse.book import checks

    assert "reversed ramp at 3 of 7 instead of 4" in checks.interval_text(near)


# -- the pooled rule (issue #42): bounds, the counts it decides at, its power, its control -----------------
def test_rate_bounds_are_the_one_sided_clopper_pearson_bounds():
    from scipy.stats import beta

    lo, hi = trt.rate_bounds(0, 35)
    assert lo == 0.0 and abs(hi - (1 - 0.05 ** (1 / 35))) < 1e-12
    assert abs(trt.rate_bounds(7, 7)[0] - 0.05 ** (1 / 7)) < 1e-12 and trt.rate_bounds(7, 7)[1] == 1.0
    lo, hi = trt.rate_bounds(3, 20)
    assert abs(lo - beta.ppf(0.05, 3, 18)) < 1e-12 and abs(hi - beta.ppf(0.95, 4, 17)) < 1e-12


def test_support_and_refute_counts():
    assert trt.support_count(35) == 2 and trt.refute_count(35) == 12  # the full record's 35 branches
    assert trt.support_count(40) == 3  # the paper's 0 of 40 would have been supported with room
    assert trt.support_count(10) is None and trt.refute_count(10) == 5  # smoke: cannot support
    assert trt.refute_count(35, untreated_rate=4 / 7) == 32  # the untreated's rate raises the line
    assert trt.refute_count(1) is None and trt.support_count(0) is None
    for n in (10, 35, 40):
        ks, kr = trt.support_count(n), trt.refute_count(n)
        assert ks is None or ks < kr  # the two lines never meet: a gap of 'inconclusive' between


def test_detectable_rate_is_where_refutation_reaches_the_power():
    from scipy.stats import binom

    r = trt.detectable_rate(35)
    k = trt.refute_count(35)
    assert abs(binom.sf(k - 1, 35, r) - trt.H2_POWER) < 1e-9  # P(at least 12 of 35) = 0.8 there
    assert binom.sf(k - 1, 35, r - 1e-4) < trt.H2_POWER  # and not below it
    assert 0.39 < r < 0.41 and r > trt.H2_MAX_RATE
    # a brute-force check on a grid: the first rate whose refutation probability reaches 0.8
    grid = [i / 10000 for i in range(10001)]
    first = next(x for x in grid if binom.sf(k - 1, 35, x) >= trt.H2_POWER)
    assert abs(first - r) <= 1e-4
    assert trt.detectable_rate(10) > trt.detectable_rate(35) > trt.detectable_rate(100)
    assert trt.detectable_rate(35, untreated_rate=2 / 7) > r  # untreated recoveries cost power
    assert trt.detectable_rate(1) is None


def test_h2_pooled_refutation_is_beyond_the_untreated_control():
    assert trt.verdict_h2(_ev(n=7, rev=7, rec=2, hinge_4x=4))[0] == "refuted"  # 12 of 35, untreated 0
    v, why = trt.verdict_h2(_ev(n=7, rev=7, rec=2, hinge_4x=4, untreated=2))  # untreated 2 of 7: 29%
    assert v == "inconclusive" and "12 of 35" in why
    assert trt.verdict_h2(_ev(n=7, rev=7, rec=2, hinge_4x=4, untreated=None))[0] == "inconclusive"
    # a refutation needs neither the positive control nor the hinge's push
    assert trt.verdict_h2(_ev(n=7, rev=0, rec=3, rho={}))[0] == "refuted"


def test_h2_pooled_support_needs_the_bound_the_positive_control_and_the_push():
    assert trt.verdict_h2(_ev(n=7, rev=7, rec=0, hinge_1x=2))[0] == "supported"  # 2 of 35: upper 17.9%
    v, why = trt.verdict_h2(_ev(n=7, rev=7, rec=0, hinge_1x=3))  # 3 of 35: upper 21%
    assert v == "inconclusive" and "exceeds the allowed 20%" in why
    v, why = trt.verdict_h2(_ev(n=7, rev=1))  # the ramp's lower bound 0.7%: the rule could not refute it
    assert v == "inconclusive" and "positive control" in why
    v, why = trt.verdict_h2(_ev(n=7, rev=7, untreated=None))
    assert v == "inconclusive" and "untreated control was not run" in why
    v, why = trt.verdict_h2(_ev(n=7, rev=7, rho=dict(RHO, **{"hinge-1x": 0.05})))
    assert v == "inconclusive" and "3x" in why
    v, why = trt.verdict_h2(_ev(n=0, rev=0))
    assert v == "inconclusive" and "0 events" in why


def test_h2_control_is_the_reversed_ramp_under_the_same_rule():
    full = _ev(n=7, rev=7, penalty_4x=1)
    ctl = trt.control_evidence(full)
    assert ctl["recovered_by_term"] == {"reversed-ramp": 7} and full["recovered_by_term"]["penalty-4x"] == 1
    v, why = trt.verdict_h2(ctl)
    assert v == "refuted" and "7 of 7 reversed-ramp branches" in why and "65.2%" in why
    assert trt.verdict_h2(trt.control_evidence(_ev(n=2, rev=2)))[0] == "refuted"  # smoke: lower 22.4%
    assert trt.verdict_h2(trt.control_evidence(_ev(n=7, rev=1)))[0] == "inconclusive"
    assert trt.verdict_h2(trt.control_evidence(_ev(n=7, rev=None)))[0] == "inconclusive"


class _Ch:
    def __init__(self):
        self.values, self.glued, self.verdicts = {}, {}, {}
        self.results = SimpleNamespace(values={})  # what rankcollapse.book.checks marks (kinds, lines)

    def value(self, name, v, **kw):
        self.values[name] = v
        self.results.values[name] = {"value": v}
        if kw.get("glue", True):
            self.glued[name] = v
        return v

    def glue(self, name, v):
        self.glued[name] = v

    def verdict(self, cid, v, *, claim, rule, evidence):
        self.verdicts[cid] = {"verdict": v, "rule": rule, "evidence": evidence}
        return v


def _summary(n, recovered, literal_rows):
    """A summary of ``n`` events: ``recovered`` per treatment (strict), the literal recoveries per event."""
    out = {}
    for t in TREATMENTS:
        out[t] = {
            "recovered": recovered.get(t, 0),
            "rho_median": RHO.get(t),
            "calib_error": 0.0,
            "rows": _rows(literal_rows.get(t, [None] * n)),
            "events": n,
        }
    return out


def test_judge_h2_records_the_control_beside_the_verdict_and_the_earlier_rules():
    p = SimpleNamespace(treatments=list(TREATMENTS), threshold=1.5)
    lits = [1.68, 1.34, 1.80, 1.51, 1.48, 1.41, 1.46]  # the full record's literal thresholds
    events = [{"seed": s, "rec_threshold_literal": x} for s, x in enumerate(lits)]
    summ = _summary(7, {"penalty-4x": 1, "reversed-ramp": 7}, {"hinge-4x": [10, 0, None, 90, 0, 0, 0]})
    ch = _Ch()
    assert trt.judge_h2(ch, p, events, summ) == "supported"
    ev = ch.verdicts["H2"]["evidence"]
    assert ch.verdicts["H2"]["rule"] == trt.RULE_H2
    # what the rule reads against its lines is recorded with them: supported, so the upper bound is at or
    # below the allowed rate and the positive control's lower bound (less the untreated) above it
    lines = ch.results.values
    assert lines["h2_upper_bound"]["limits"] == [trt.H2_MAX_RATE]
    assert ch.values["h2_upper_bound"] <= trt.H2_MAX_RATE < ch.values["h2_reversed_lower_minus_untreated"]
    assert ch.values["h2_hinge_over_penalty"] > trt.PUSH_RATIO == lines["h2_hinge_over_penalty"]["limits"][0]
    assert ev["control"]["verdict"] == "refuted" and "reversed ramp" in ev["control"]["on"]
    assert ev["control"]["reason"].startswith("the reversed-ramp branches recover")
    assert ev["fisher_rule"]["verdict"] == "supported" and ev["fisher_rule"]["rule"] == trt.RULE_H2_FISHER
    assert ev["first_rule"]["verdict"] == "inconclusive"
    assert ev["pooled"]["recovered"] == 1 and ev["pooled"]["branches"] == 35
    assert ev["max_rate"] == trt.H2_MAX_RATE and abs(ev["detectable_rate"] - trt.detectable_rate(35)) < 1e-12
    # the literal judgement: the four events at or below 1.5 are shown, not judged; hinge-4x 2 of 3
    assert ev["literal"]["events"] == 3 and set(ev["literal"]["excluded_seeds"]) == {"1", "4", "5", "6"}
    assert ev["literal"]["recovered_by_term"]["hinge-4x"] == 2
    assert ch.glued["h2_verdict_literal"] == ev["literal"]["verdict"]
    assert ch.values["h2_literal_counts"]["recovered_by_term"]["hinge-4x"] == 2
    assert ch.values["h2_literal_counts"]["events"] == 3
    assert ch.glued["h2_control_verdict"] == "refuted" and ch.glued["h2_branches"] == 35
    assert (
        "4 of 7 events" in ch.glued["h2_literal_excluded"]
        and "seeds 1 at 1.34" in ch.glued["h2_literal_excluded"]
    )
    assert "supported at up to 2 recoveries, refuted from 12" in ch.glued["h2_power"]


def test_figure_6_middle_reading_reaches_every_word_and_both_comparisons():
    assert trt.shape_word(2.01) == "rises" and trt.shape_word(0.49) == "falls"
    assert trt.shape_word(2.0).startswith("stays") and trt.shape_word(0.5).startswith("stays")
    r = trt.read_line({"line": {"a": 0.1, "b": 1.2, "c": 5.0}, "random": {"a": 1.0, "b": 0.9, "c": 0.3}})
    assert r["a"] == {"line": "falls", "random": "stays within a factor 2", "differs": True}
    assert r["b"]["differs"] is False and r["b"]["line"] == r["b"]["random"]
    assert r["c"] == {"line": "rises", "random": "falls", "differs": True}
    text = report.line_text(
        {
            lab: {t: {"factor": f, "factors": [f, f]} for t, f in fs.items()}
            for lab, fs in {"line": {"a": 0.1, "b": 1.2}, "random": {"a": 1.0, "b": 0.9}}.items()
        },
        {k: r[k] for k in ("a", "b")},
    )
    assert "otherwise than the random direction for 1 of 2 terms (a)" in text
    same = report.line_text(
        {lab: {"b": {"factor": 1.0, "factors": [1.0]}} for lab in ("line", "random")}, {"b": r["b"]}
    )
    assert same.endswith("reads as the random direction does for each of the 1 terms")
