"""Synthetic evidence for every outcome of repair-lr-burst's verdict rules (H6: a burst settles into a
collapse with the query-key path open, and it can recover untreated; H7: after recovery the loss stays above
what a burst of the same size leaves without a collapse); tests/test_verdict_rules.py runs CASES. Edge cases
of the rules, the evidence builders and the controls below, and the previous rules kept beside."""

from types import SimpleNamespace

from rankcollapse.chapters.repair_lr_burst import verdicts

SKIP, HEALTHY = 2.5e-11, 5.8e-2  # the closed reference and the healthy parents' median Q/K (full's order)


def _h6(qk, rec, skip=SKIP, healthy=HEALTHY, n_bursts=12):
    return {
        "bursts": [f"seed {i} x24" for i in range(len(qk))],
        "qk_collapsed": qk,
        "recovered": rec,
        "qk_skip": skip,
        "qk_skip_median": skip,
        "qk_skip_by_seed": {} if skip is None else {"0": skip},
        "qk_healthy": healthy,
        "n_bursts": n_bursts,
    }


def _h7(gaps, n_collapsed=6):
    return {"recovered_gaps": gaps, "n_collapsed": n_collapsed, "all_gaps": {}}


def _s6(qk, rec, skip=SKIP, healthy=HEALTHY, n_bursts=12, n_transient=0, back=0, open_ended=0):
    """Evidence for the current H6 rule: ``qk``/``rec`` of the settled bursts."""
    return _h6(qk, rec, skip, healthy, n_bursts) | {
        "n_transient": n_transient,
        "n_open_ended": open_ended,
        "n_back_in_burst": back,
        "transient": [f"seed {i} x20" for i in range(n_transient)],
    }


def _j(gap, ref):
    return {
        "burst": "seed 0 x24",
        "gap": gap,
        "reference": ref,
        "diff": gap - ref,
        "against": ["seed 1 x24"],
    }


def _s7(pairs, n_candidates=None, n_settled=6):
    return {
        "what": "settled bursts that recovered within the branch",
        "judged": [_j(g, r) for g, r in pairs],
        "n_candidates": len(pairs) if n_candidates is None else n_candidates,
        "n_settled": n_settled,
    }


CASES = {
    "H6": {
        # settled bursts' Q/K 4e7 x the skip collapse (open), though only 0.017 of healthy; one recovered
        "supported": _s6([1e-3, 2e-3, 8e-4], [False, True, False], n_transient=3),
        # every settled burst within 100x of the skip collapse: closed like it
        "refuted": _s6([1e-10, 3e-11, 2e-9], [False, False, True]),
        # open, but none recovered untreated (two were back during the burst)
        "inconclusive": _s6([1e-3, 2e-3], [False, False], back=2),
    },
    "H7": {
        # recovered settled bursts 0.2 nats above what bursts of their size leave without a collapse
        "supported": _s7([(0.6, 0.4), (0.7, 0.45), (0.5, 0.4)]),
        # as high as the non-settled bursts of the same size: the gap is the burst's, not the collapse's
        "refuted": _s7([(0.45, 0.45), (0.40, 0.42), (0.5, 0.5)]),
        "inconclusive": _s7([], n_candidates=0),
    },
}


def test_h6_needs_a_collapse_and_a_closed_reference():
    v, why = verdicts.verdict_h6_dip(_h6([], []))
    assert v == "inconclusive" and "0 of 12 bursts" in why
    v, why = verdicts.verdict_h6_dip(_h6([1e-3], [True], skip=None))
    assert v == "inconclusive" and "no closed reference" in why
    # a skip collapse that does not close the path (only 1e3 below healthy): open and closed indistinct
    v, why = verdicts.verdict_h6_dip(_h6([1e-3], [True], skip=HEALTHY / 1e3))
    assert v == "inconclusive" and "does not close the path" in why
    # the reference exactly 1e4 below healthy is still testable
    assert verdicts.verdict_h6_dip(_h6([HEALTHY / 10], [True], skip=HEALTHY / 1e4))[0] == "supported"


def test_h6_open_but_none_recovered_and_mostly_closed():
    v, why = verdicts.verdict_h6_dip(_h6([1e-3, 2e-3, 5e-4], [False] * 3))
    assert v == "inconclusive" and "0 of 3 collapsed bursts recovered" in why
    # one burst open, the median closed: neither open nor closed like the skip collapse
    ev = _h6([3e-11, 5e-11, 1e-3], [True, True, True])
    assert verdicts.path_state(ev)["state"] == "mostly closed"
    v, why = verdicts.verdict_h6_dip(ev)
    assert v == "inconclusive" and "1 of 3 at or above 100x" in why


def test_h6_open_is_relative_to_the_skip_collapse_at_100x():
    # exactly 100 R is open; just below is closed
    assert verdicts.verdict_h6_dip(_h6([100 * SKIP], [True]))[0] == "supported"
    assert verdicts.verdict_h6_dip(_h6([99 * SKIP], [True]))[0] == "refuted"
    # the healthy ratio is reported, not tested: 1e-5 of healthy still counts as open
    v, why = verdicts.verdict_h6_dip(_h6([HEALTHY * 1e-5], [True]))
    assert v == "supported" and "of healthy" in why


def test_old_h6_rule_reads_the_median_reference():
    # the new reference is the largest skip collapse, the old one their median
    ev = _h6([1e-8], [True]) | {"qk_skip": 1e-9, "qk_skip_median": 1e-12}
    assert verdicts.verdict_h6_dip(ev)[0] == "refuted"  # 10x the largest: closed
    assert verdicts.old_verdict_h6(ev)[0] == "inconclusive"  # 1e4x the median, but far below 1/10 of healthy


def test_old_h6_rule_kept_beside():
    # the old rule asked for 1/10 of the healthy Q/K: 0.014 of healthy (full, 50-step bursts): not open
    ev = _h6([1e-3, 2e-3, 8e-4], [False, True, False])
    assert verdicts.old_verdict_h6(ev)[0] == "inconclusive" and verdicts.verdict_h6_dip(ev)[0] == "supported"
    assert verdicts.old_verdict_h6(_h6([1e-2, 2e-2], [True, False]))[0] == "supported"
    assert verdicts.old_verdict_h6(_h6([1e-10], [True]))[0] == "refuted"
    assert verdicts.old_verdict_h6(_h6([], []))[0] == "inconclusive"
    assert verdicts.old_verdict_h6(_h6([1e-3], [True], skip=None))[0] == "inconclusive"


def test_h7_thresholds_and_denominators():
    v, why = verdicts.old_verdict_h7(_h7([], n_collapsed=9))
    assert v == "inconclusive" and "0 of 9" in why
    assert verdicts.old_verdict_h7(_h7([0.03]))[0] == "inconclusive"
    v, why = verdicts.old_verdict_h7(_h7([0.2, 0.1], n_collapsed=5))
    assert v == "supported" and "2 of 5" in why


def test_onset_bracket():
    ms = [8.0, 10.0, 12.0, 16.0]
    assert verdicts.onset_bracket(ms, {8.0: 0, 10.0: 0, 12.0: 2, 16.0: 3}) == (10.0, 12.0)
    assert verdicts.onset_bracket(ms, {8.0: 1, 10.0: 0, 12.0: 2, 16.0: 3}) == (None, 8.0)
    assert verdicts.onset_bracket(ms, dict.fromkeys(ms, 0)) == (16.0, None)
    # a grid given out of order is read in order
    assert verdicts.onset_bracket([16.0, 8.0], {8.0: 0, 16.0: 1}) == (8.0, 16.0)


def test_h6_testable_on_the_typical_skip_collapse_not_the_least_closed_one():
    """RULE_H6_CHANGE: one skip collapse that keeps 1.4e-4 of the healthy Q/K (the others ~1e-10 of it) made
    the evidence 'not testable' under the rule before the change; the typical (median) skip collapse closes
    the path, so the test is made, and 'open' is still judged against 100 x the least closed one."""
    ev = _h6([3e-3, 2e-3, 4e-3], [True, False, False]) | {"qk_skip": 7.5e-6, "qk_skip_median": 8.7e-11}
    assert verdicts.verdict_h6_dip(ev)[0] == "supported"
    v, why = verdicts.verdict_h6_dip(ev, testable_on="max")
    assert v == "inconclusive" and "largest skip collapse" in why
    # open is judged against the largest: bursts within 100x of it are closed even though the median is tiny
    closed = ev | {"qk_collapsed": [5e-4, 6e-4, 7e-4]}
    assert (
        verdicts.path_state(closed)["state"] == "closed" and verdicts.verdict_h6_dip(closed)[0] == "refuted"
    )
    # and when the typical skip collapse does not close the path either, the test is not made
    loose = ev | {"qk_skip_median": 1e-5}
    assert (
        verdicts.verdict_h6_dip(loose)[0] == "inconclusive"
        and "median skip collapse" in verdicts.verdict_h6_dip(loose)[1]
    )


def test_h6_across_the_recovered_count_both_outcomes():
    open_qk = [1e-3] * 10
    # 1 of 10: the exact interval (0.25%-45%) excludes 0, so "supported" holds across it
    one = verdicts.h6_across_interval(_s6(open_qk, [True] + [False] * 9))
    assert (
        one["verdict"] == "supported" and one["holds"] and one["counts"]["recovered settled bursts"][2] == 1
    )
    # 0 of 10: its interval reaches 3 of 10, where the rule would say "supported"
    none = verdicts.h6_across_interval(_s6(open_qk, [False] * 10))
    assert none["verdict"] == "inconclusive" and not none["holds"]
    assert none["flips"]["recovered settled bursts"][0] == [1, "supported"]


# -- the current rules: settling, transient dips apart, controls ------------------------------------------
def test_h6_reports_transient_dips_and_needs_a_settled_collapse():
    v, why = verdicts.verdict_h6(_s6([], [], n_transient=4, n_bursts=10))
    assert v == "inconclusive" and "0 of 10 bursts settled" in why and "4 dipped" in why
    v, why = verdicts.verdict_h6(_s6([1e-3], [True], n_transient=2))
    assert v == "supported" and "2 dipped" in why and "transient" in why
    v, why = verdicts.verdict_h6(_s6([1e-3], [True], skip=None))
    assert v == "inconclusive" and "no closed reference" in why
    v, why = verdicts.verdict_h6(_s6([1e-3], [True], skip=HEALTHY / 1e3))
    assert v == "inconclusive" and "does not close the path" in why
    v, why = verdicts.verdict_h6(_s6([3e-11, 5e-11, 1e-3], [True] * 3))
    assert v == "inconclusive" and "mostly closed" in why
    assert "crossed too close" in verdicts.verdict_h6(_s6([1e-3], [True], open_ended=1))[1]


def test_h6_back_during_the_burst_is_not_an_untreated_recovery():
    v, why = verdicts.verdict_h6(_s6([1e-3, 1e-3], [False, False], back=2))
    assert v == "inconclusive" and "2 more were back" in why and "not untreated" in why


def hist(start, sranks, losses=None):
    n = len(sranks)
    return {
        "m_step": [start + 10 * i for i in range(n)],
        "srank": [[1.0, s] for s in sranks],
        "probe_loss": losses or [0.0] * n,
    }


def test_settling_classes_follow_the_drivers_detector():
    from rankcollapse.chapters.repair_lr_burst import experiments as ex

    # window 3, settle 20 steps: a one-measurement dip that climbs back is transient
    dip = hist(0, [3.0, 1.4, 2.5, 2.6, 2.7, 2.8])
    assert ex.settling(dip, 1.5, 3, 20) == {"kind": "transient", "settled": None, "dips": [[10, 30]]}
    held = hist(0, [3.0, 1.4, 1.3, 1.2, 1.3, 2.0, 2.6])
    assert (
        ex.settling(held, 1.5, 3, 20)["kind"] == "settled" and ex.settling(held, 1.5, 3, 20)["settled"] == 30
    )
    assert ex.settling(hist(0, [3.0, 2.0, 1.4]), 1.5, 3, 20)["kind"] == "open-ended"
    assert ex.settling(hist(0, [3.0, 2.0, 1.6]), 1.5, 3, 20)["kind"] == "none"


def test_untreated_recovery_after_settling_and_the_burst():
    from rankcollapse.chapters.repair_lr_burst import experiments as ex

    h = hist(0, [3.0, 1.2, 1.1, 1.0, 1.2, 2.5, 2.6])
    assert ex.untreated_recovery(h, 30, 20, 2.0, 1) == (30, False)  # from 30 (settled), back at 50
    # back above the recovery threshold by the burst's end: not untreated
    g = hist(0, [3.0, 1.2, 1.1, 1.0, 2.4, 2.5, 2.6])
    assert ex.untreated_recovery(g, 30, 40, 2.0, 1) == (None, True)
    assert ex.untreated_recovery(h, None, 20, 2.0, 1) == (None, False)
    assert ex.untreated_recovery(hist(0, [3.0, 1.2, 1.1, 1.0]), 20, 20, 2.0, 1) == (None, False)


def _b(label, m, settle, gap, rec_branch=None, rec=None, seed=0, qk=1e-3, dip_rec=False, dip_back=False):
    return {
        "dip_recovered": dip_rec,
        "dip_back": dip_back,
        "label": label,
        "seed": seed,
        "m": m,
        "settle": settle,
        "recovered_branch": rec_branch,
        "recovered": rec_branch is not None if rec is None else rec,
        "back_in_burst": False,
        "gap": gap,
        "gap_ext": None,
        "qk": qk,
    }


def test_h7_reference_is_same_multiplier_else_adjacent_and_leaves_itself_out():
    ms = [16.0, 20.0, 24.0, 28.0]
    pool = [_b("a", 16.0, "none", 0.2), _b("b", 20.0, "transient", 0.3), _b("c", 24.0, "none", 0.45)]
    assert verdicts.reference(_b("x", 20.0, "settled", 0.5), pool, ms) == (0.3, ["b"])
    # no non-settled burst at x28: the adjacent x24 (x32 is off the grid)
    assert verdicts.reference(_b("y", 28.0, "settled", 0.7), pool, ms) == (0.45, ["c"])
    # the control's leave-one-out: b alone at x20 falls back to x16 and x24
    ref, who = verdicts.reference(pool[1], pool, ms)
    assert who == ["a", "c"] and abs(ref - 0.325) < 1e-12


def test_h7_evidence_judges_recovered_settled_bursts_and_the_control_the_others():
    p = SimpleNamespace(multipliers=[16.0, 20.0, 24.0])
    bursts = [
        _b("s0 x16", 16.0, "none", 0.18),
        _b("s1 x16", 16.0, "none", 0.20),
        _b("s0 x20", 20.0, "transient", 0.19),
        _b("s1 x20", 20.0, "settled", 0.55, rec_branch=70),
        _b("s0 x24", 24.0, "settled", 0.60),
        _b("s1 x24", 24.0, "settled", 0.50, rec=True),  # recovered only in the extension
    ]
    ev = verdicts.h7_evidence(p, bursts)
    assert [x["burst"] for x in ev["judged"]] == ["s1 x20"] and ev["judged"][0]["reference"] == 0.19
    assert ev["n_settled"] == 3 and [x["burst"] for x in ev["extension_only"]] == ["s1 x24"]
    v, why = verdicts.verdict_h7(ev)  # one judged burst: fewer than the rule needs
    assert v == "inconclusive" and f"needs {verdicts.H7_MIN_JUDGED}" in why
    ctl = verdicts.h7_control_evidence(p, bursts)
    assert [x["burst"] for x in ctl["judged"]] == ["s0 x16", "s1 x16", "s0 x20"]
    vc, why = verdicts.verdict_h7(ctl)
    assert vc == "refuted" and "bursts that did not settle" in why


def test_h7_without_a_reference_or_a_recovery():
    v, why = verdicts.verdict_h7(_s7([], n_candidates=0, n_settled=4))
    assert v == "inconclusive" and "of 4 settled" in why
    v, why = verdicts.verdict_h7(_s7([], n_candidates=2))
    assert v == "inconclusive" and "none has a burst of similar size" in why
    three = [(0.43, 0.40), (0.44, 0.41), (0.42, 0.39)]
    assert verdicts.verdict_h7(_s7(three))[0] == "inconclusive"  # +0.03: in between
    assert verdicts.verdict_h7(_s7([(g + 0.1, r) for g, r in three]))[0] == "supported"
    assert verdicts.verdict_h7(_s7([(r, r) for g, r in three]))[0] == "refuted"
    # two bursts, each against the other, cancel by construction: no decision
    v, why = verdicts.verdict_h7(_s7([(0.5, 0.4), (0.4, 0.5)]))
    assert v == "inconclusive" and "cancel by construction" in why


def test_h7_control_is_run_beside_any_h7_and_can_refute():
    """H7's control is the same rule on the bursts that did not settle, run whatever H7 judged (before
    RULE_H7_CONTROL_CHANGE it was "not run" beside an H7 with too few recoveries to judge): on bursts whose
    gaps match their neighbours' it reads "refuted", so an "inconclusive" H7 stands beside a decision."""
    assert not hasattr(verdicts, "verdict_h7_control")
    bursts = [
        _b("seed 0 x16", 16.0, "none", 0.30),
        _b("seed 1 x16", 16.0, "transient", 0.31, seed=1),
        _b("seed 2 x16", 16.0, "none", 0.30, seed=2),
        _b("seed 0 x32", 32.0, "settled", 0.9),
    ]
    p = SimpleNamespace(multipliers=[16.0, 32.0])
    assert verdicts.verdict_h7(verdicts.h7_evidence(p, bursts))[0] == "inconclusive"  # none recovered
    assert verdicts.verdict_h7(verdicts.h7_control_evidence(p, bursts))[0] == "refuted"
    assert "always run" in verdicts.RULE_H7_CONTROL_CHANGE


def test_h6_evidence_counts_classes_and_the_skip_control_is_refuted():
    p = SimpleNamespace(
        multipliers=[8.0, 32.0], seeds=[0, 1], threshold=1.5, recover_frac=0.5, recover_window=1
    )
    bursts = [
        _b("seed 0 x8", 8.0, "none", 0.03),
        _b("seed 1 x8", 8.0, "transient", 0.07, seed=1),
        _b("seed 0 x32", 32.0, "settled", 0.5, qk=8e-4),
        _b("seed 1 x32", 32.0, "settled", 0.7, rec=True, seed=1, qk=7e-4),
    ]
    path = {"skip": 1e-12, "skip_by_seed": {"0": 1e-10, "1": 1e-14}, "healthy": 0.03}
    ev = verdicts.h6_evidence(p, bursts, path)
    assert ev["bursts"] == ["seed 0 x32", "seed 1 x32"] and ev["recovered"] == [False, True]
    assert ev["n_transient"] == 1 and ev["transient"] == ["seed 1 x8"] and ev["qk_skip"] == 1e-10
    assert ev["settle_by_multiplier"]["8"] == {"settled": 0, "transient": 1, "open-ended": 0, "none": 1}
    assert verdicts.verdict_h6(ev)[0] == "supported"
    drivers = {
        0: {"det": {"settled": 20, "heals": []}, "hist": hist(0, [3.0, 1.4, 1.2, 1.1, 1.2])},
        1: {"det": {"settled": 20, "heals": [[0, 10]]}, "hist": hist(0, [3.0, 1.4, 1.2, 1.1, 2.9])},
    }
    healthy = {s: {"hist": hist(0, [3.0] * 5)} for s in (0, 1)}
    ctl = verdicts.skip_control_evidence(p, drivers, healthy, path)
    assert ctl["qk_collapsed"] == [1e-10, 1e-14] and ctl["recovered"] == [False, True]
    assert ctl["ref_each"] == [1e-14, 1e-10]  # each against the other, itself left out
    # seed 0 is 10^4 x seed 1: open against it, so the skip collapses are "mostly closed", not "closed"
    v, why = verdicts.verdict_h6(ctl)
    assert v == "inconclusive" and "skip-collapse drivers" in why and "itself left out" in why
    assert "1 of 2 at or above" in why


def test_h6_control_each_skip_collapse_against_the_others():
    """The control reads each settled skip collapse against the largest of the others: within 100x of one
    another they are all closed ("refuted"); one 100x above the rest is open, so the reading is not forced
    by the reference being the largest of the same collapses; alone, none is left to be a reference."""
    p = SimpleNamespace(seeds=[0, 1, 2], threshold=1.5, recover_frac=0.5, recover_window=1)
    drivers = {
        s: {"det": {"settled": 20, "heals": []}, "hist": hist(0, [3.0, 1.4, 1.2, 1.1, 1.2])}
        for s in range(3)
    }
    healthy = {s: {"hist": hist(0, [3.0] * 5)} for s in range(3)}

    def ctl(by):
        path = {"skip": sorted(by.values())[len(by) // 2], "skip_by_seed": by, "healthy": 0.03}
        return verdicts.skip_control_evidence(p, drivers, healthy, path)

    v, why = verdicts.verdict_h6(ctl({"0": 2e-7, "1": 1e-9, "2": 8e-8}))
    assert v == "refuted" and "0 of 3 at or above" in why
    v, why = verdicts.verdict_h6(ctl({"0": 2e-5, "1": 1e-9, "2": 8e-8}))
    assert v == "inconclusive" and "1 of 3 at or above" in why and "mostly closed" in why
    # the lower median with an even count: one unit open does not open the two middle ones' reading
    p2 = SimpleNamespace(seeds=[0, 1], threshold=1.5, recover_frac=0.5, recover_window=1)
    path2 = {"skip": 1e-9, "skip_by_seed": {"0": 1e-6, "1": 1e-9}, "healthy": 0.03}
    ev2 = verdicts.skip_control_evidence(p2, drivers, healthy, path2)
    assert verdicts.path_state(ev2)["vs_skip"] == 1e-3
    # alone, a settled skip collapse has no other to be its reference
    ev1 = verdicts.skip_control_evidence(
        p2,
        {0: {"det": {"heals": []}}, 1: drivers[1]},
        healthy,
        {"skip": 1e-9, "skip_by_seed": {"1": 1e-9}, "healthy": 0.03},
    )
    v, why = verdicts.verdict_h6(ev1)
    assert v == "inconclusive" and "none is left to be the others' reference" in why


def test_dip_recovery_reads_a_transient_from_its_first_crossing():
    from rankcollapse.chapters.repair_lr_burst import experiments as ex

    # window 1, settle 20 steps: crossed at 10, back above 1.5 at 20 (transient); the recovery threshold
    # 2.0 is reached at 40, after the burst's end at 20: an untreated recovery, 20 steps after the burst
    h = hist(0, [3.0, 1.4, 1.6, 1.8, 2.2, 2.3])
    st = ex.settling(h, 1.5, 1, 20)
    assert st["kind"] == "transient" and st["dips"][0][0] == 10
    assert ex.dip_recovery(h, st, 20, 2.0, 1) == (20, False)
    # the same dip back above the recovery threshold while the rate was raised: not untreated
    assert ex.dip_recovery(h, st, 50, 2.0, 1) == (None, True)
    # any other class gives nothing
    held = hist(0, [3.0, 1.4, 1.3, 1.2, 1.3, 2.0, 2.6])
    assert ex.dip_recovery(held, ex.settling(held, 1.5, 3, 20), 20, 2.0, 1) == (None, False)


def test_h6_open_reference_is_the_transient_dips_and_reaches_the_other_outcome():
    """The open-path reference (beside the control) reads the transient dips by H6's rule against the same
    closed reference: it says "supported" where the dips' path is open and one recovered, "refuted" where
    their path is as closed as the skip collapses', and cannot read the settled bursts or the skip
    collapses at all."""
    path = {"skip": 1e-12, "skip_by_seed": {"0": 1e-10, "1": 1e-14}, "healthy": 0.03}
    bursts = [
        _b("seed 0 x16", 16.0, "transient", 0.1, qk=5e-4, dip_rec=True),
        _b("seed 1 x16", 16.0, "transient", 0.1, seed=1, qk=7e-4, dip_back=True),
        _b("seed 0 x32", 32.0, "settled", 0.5, qk=1e-11),
        _b("seed 1 x32", 32.0, "none", 0.5, seed=1, qk=1e-2),
    ]
    ctl = verdicts.open_control_evidence(bursts, path)
    assert ctl["bursts"] == ["seed 0 x16", "seed 1 x16"] and ctl["qk_collapsed"] == [5e-4, 7e-4]
    assert ctl["recovered"] == [True, False] and ctl["n_back_in_burst"] == 1 and ctl["qk_skip"] == 1e-10
    v, why = verdicts.verdict_h6(ctl)
    assert v == "supported" and "2 of 4 bursts dipped" in why and "1 of 2 transient dips recovered" in why
    # the settled burst alone, by the main rule, is closed: H6 refuted beside a supported control
    assert verdicts.verdict_h6(verdicts.h6_evidence(_P, bursts, path))[0] == "refuted"
    closed = [b | {"qk": 1e-11} for b in bursts]
    assert verdicts.verdict_h6(verdicts.open_control_evidence(closed, path))[0] == "refuted"
    none = [b for b in bursts if b["settle"] != "transient"]
    assert verdicts.verdict_h6(verdicts.open_control_evidence(none, path))[0] == "inconclusive"


_P = SimpleNamespace(multipliers=[16.0, 32.0], seeds=[0, 1])
