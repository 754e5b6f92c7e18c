"""The tolerance rule: every recorded tolerance comes from the spread measured between kernel variants.

Each outcome of the rule is tried on synthetic evidence: a value that moved, one that did not, a count,
a round-off floor, a string or verdict that differs (refused), a malformed record (named)."""

import json

import pytest

from rankcollapse.book import records as R


def entry(v, rtol=0.0, atol=0.0, note="own note"):
    return {"value": v, "rtol": rtol, "atol": atol, "note": note}


def test_moved_float_gets_safety_times_spread():
    e = R.derive_tolerance(entry(1.0), [1.001, 0.9995], ["avx2", "scalar"])
    assert e["rtol"] == pytest.approx(R.SAFETY * 1e-3)
    assert e["atol"] == 0.0
    assert "own note" in e["note"] and "max deviation over 2 kernel variant(s)" in e["note"]
    # what was measured is inside the tolerance, and a deviation beyond SAFETY x measured is not
    assert R._close(1.0, 1.001, e["rtol"], e["atol"])
    assert not R._close(1.0, 1.0 + 1.01 * R.SAFETY * 1e-3, e["rtol"], e["atol"])


def test_chapter_tolerance_kept_when_larger():
    e = R.derive_tolerance(entry(2.0, rtol=0.3), [2.0002], ["avx2"])
    assert e["rtol"] == 0.3


def test_unmoved_float_gets_the_minimum():
    e = R.derive_tolerance(entry(0.123456789), [0.123456789], ["avx2"])
    assert e["rtol"] == R.MIN_RTOL


def test_unmoved_integer_stays_exact_and_moved_count_is_widened():
    assert R.derive_tolerance(entry(7), [7, 7], ["a", "b"])["rtol"] == 0.0
    assert R.derive_tolerance(entry(7), [7, 7], ["a", "b"])["atol"] == 0.0
    e = R.derive_tolerance(entry([3, 5]), [[3, 6]], ["a"])
    assert e["atol"] == R.SAFETY * 1 and e["rtol"] == 0.0  # widened by the count it moved, not more


def test_round_off_floor_is_checked_absolutely():
    e = R.derive_tolerance(entry([1.95e-16, 0.5]), [[3.1e-16, 0.5]], ["a"])
    assert e["atol"] == R.FLOOR_ATOL and "round-off floor" in e["note"]
    assert R._close([1.95e-16, 0.5], [8e-16, 0.5], e["rtol"], e["atol"])  # another floor value passes
    assert not R._close(
        [1.95e-16, 0.5], [1e-6, 0.5], e["rtol"], e["atol"]
    )  # signal where the floor was fails


def test_reference_at_floor_other_not():
    e = R.derive_tolerance(entry(0.0), [2e-9], ["a"])
    assert e["atol"] >= 2e-9


def test_differing_string_or_flag_is_refused():
    with pytest.raises(R.RecordError, match="differs between kernel variants"):
        R.derive_tolerance(entry("seed 0"), ["seed 1"], ["a"])
    with pytest.raises(R.RecordError):
        R.derive_tolerance(entry({"x": True}), [{"x": False}], ["a"])
    with pytest.raises(R.RecordError, match="structure"):
        R.derive_tolerance(entry({"a": [1.0, 2.0]}), [{"b": [1.0, 2.0]}], ["a"])
    with pytest.raises(R.RecordError, match="structure"):
        R.derive_tolerance(entry([1.0, 2.0]), [1.0], ["a"])
    with pytest.raises(R.RecordError, match="structure"):  # a string inside a list of another length
        R.derive_tolerance(entry(["x", 2.0]), [["y"]], ["a"])


def test_a_list_per_event_of_another_length_is_recorded_unchecked():
    """At full, which seeds settle into a collapse event is decided by round-off (native 7 of 10, avx2 8 of
    10): a list with one entry per event has another length under another variant. It is kept for reading,
    not checked; the count of events is a value of its own, checked with its measured spread."""
    e = R.derive_tolerance(
        entry({"penalty": [1.0, 2.0], "hinge": [3.0, None]}),
        [{"penalty": [1.1], "hinge": [3.0, 4.0, 5.0]}],
        ["avx2"],
    )
    assert e["unchecked"] and "another set of events" in e["note"] and "own note" in e["note"]
    rows = R.compare({"values": {"x": e}, "verdicts": {}}, {"values": {"x": entry([9.0])}, "verdicts": {}})
    assert rows[0].ok and rows[0].tolerance == "not checked"
    n = R.derive_tolerance(entry(7), [8], ["avx2"])  # the count that moved is widened, and checked
    assert not n.get("unchecked")
    assert not R.compare({"values": {"x": n}, "verdicts": {}}, {"values": {"x": entry(20)}, "verdicts": {}})[
        0
    ].ok


def doc(verdict="supported", v=1.0):
    return {
        "chapter": "c",
        "params": {"seed": 0},
        "values": {"x": entry(v, rtol=0.01)},
        "verdicts": {"C9": {"verdict": verdict, "claim": "", "rule": "", "evidence": {}}},
    }


def test_record_with_spread_and_verdicts_exact():
    out = R.record_with_spread(doc(), {"avx2": doc(v=1.05)})
    assert out["values"]["x"]["rtol"] == pytest.approx(R.SAFETY * 0.05)
    assert "tolerance_rule" in out
    with pytest.raises(R.RecordError, match="verdict C9"):
        R.record_with_spread(doc(), {"avx2": doc(verdict="refuted")})
    other = doc()
    other["params"] = {"seed": 1}
    with pytest.raises(R.RecordError, match="other parameters"):
        R.record_with_spread(doc(), {"avx2": other})
    # a variant run by other code (an earlier version left in its build root) gives no spread of this code
    stale, mine = doc(v=1.01), doc()
    stale["code_hash"], mine["code_hash"] = "a" * 64, "b" * 64
    with pytest.raises(R.RecordError, match="ran other code"):
        R.record_with_spread(mine, {"avx2": stale})
    assert R.record_with_spread(mine, {R.RECORDED: stale})["values"]["x"]["spread"]["variants"] == [
        R.RECORDED
    ]


def test_the_record_being_replaced_counts_as_one_more_variant():
    """`rcbook record --with-recorded`: what another host measured (the record being replaced) widens the
    tolerance; a value that record lacks (new since) takes its spread from the kernel variants alone."""
    mine = doc()
    mine["values"]["new"] = {"value": 2.0, "rtol": 0.0, "atol": 0.0, "note": ""}
    avx2 = doc(v=1.01)
    avx2["values"]["new"] = {"value": 2.02, "rtol": 0.0, "atol": 0.0, "note": ""}
    out = R.record_with_spread(mine, {"avx2": avx2, R.RECORDED: doc(v=1.2)})
    assert out["values"]["x"]["rtol"] == pytest.approx(R.SAFETY * 0.2)
    x = out["values"]["x"]
    assert "the record replaced" in x["note"] and x["spread"]["variants"] == ["avx2", R.RECORDED]
    assert out["values"]["new"]["rtol"] == pytest.approx(R.SAFETY * 0.01)
    assert out["values"]["new"]["spread"]["variants"] == ["avx2"]
    with pytest.raises(R.RecordError, match="missing under variant 'avx2'"):
        R.record_with_spread(mine, {"avx2": doc(v=1.01)})


def test_compare_verdicts_exactly():
    rows = R.compare(doc(), doc(verdict="inconclusive"))
    assert [r.ok for r in rows if r.name == "verdict C9"] == [False]


def test_malformed_records_are_named(tmp_path):
    p = tmp_path / "r.json"
    p.write_text('{"values": {')
    with pytest.raises(R.MalformedRecord, match="r.json"):
        R.load_checked(p)
    d = doc()
    del d["values"]["x"]["rtol"]
    p.write_text(json.dumps(d))
    with pytest.raises(R.MalformedRecord, match="value 'x' lacks 'rtol'"):
        R.load_checked(p)


def test_number_in_one_variant_none_in_another_is_recorded_unchecked():
    e = R.derive_tolerance(entry([120, None]), [[None, None]], ["avx2"])
    assert e["unchecked"] and "not checked" in e["note"]
    rows = R.compare(
        {"values": {"x": e}, "verdicts": {}}, {"values": {"x": entry([999, 3])}, "verdicts": {}}
    )
    assert rows[0].ok and rows[0].tolerance == "not checked"


def test_a_dict_per_event_with_other_seeds_is_recorded_unchecked_with_a_checked_summary():
    """Keyed by seed (``"0"``, ``"seed 2 alpha 0.3"``), a per-event dict has other keys where other seeds
    settled. Its summary over events (medians, shares of no outcome) is checked instead of the entries,
    with a tolerance from the summaries' own spread: a third run whose events say something else fails."""
    e = R.derive_tolerance(
        entry({"0": [1.0, 2.0], "2": [3.0, None]}, rtol=0.0), [{"1": [1.2, 2.0], "2": [3.0, None]}], ["avx2"]
    )
    assert e["unchecked"] and e["summary"]["value"] == {".*[*] median": 2.0, ".*[*] none": 0.25}
    assert e["summary"]["rtol"] == pytest.approx(R.MIN_RTOL)  # the medians agree (2.0 and 2.0)

    def check(v):
        return R.compare({"values": {"x": e}, "verdicts": {}}, {"values": {"x": entry(v)}, "verdicts": {}})

    ok = check({"5": [2.0, 1.0, None, 3.0], "7": [0.5, 9.0, None, 2.0]})  # other seeds, same summary
    assert [r.ok for r in ok] == [True, True] and ok[1].name == "x (summary over events)"
    assert not check({"5": [4.0, 5.0], "7": [6.0, None]})[1].ok  # the median moved
    assert not check({"5": [2.0, 2.0], "7": [2.0, 2.0]})[1].ok  # every event has an outcome now
    assert not check({"5": ["a"]})[1].ok  # nothing a number could summarise
    f = R.derive_tolerance(entry([True, False]), [[True, False, True]], ["avx2"])
    assert f["summary"]["value"] == {"[*] share": 0.5}
    assert f["summary"]["rtol"] == pytest.approx(R.SAFETY * (2 / 3 - 0.5) / 0.5)  # measured: 1/2 vs 2/3
    with pytest.raises(R.RecordError, match="structure"):  # keys that name no event still must agree
        R.derive_tolerance(entry({"penalty": [1.0], "0": [2.0]}), [{"hinge": [1.0], "0": [2.0]}], ["a"])
