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
