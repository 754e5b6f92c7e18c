"""Outcomes that change with the floating-point kernels, recorded as what they are (``--fragile``).

A verdict (or its control, or a non-numeric value such as a previous rule's verdict) that differs between
the kernel variants of a record's spread changes on someone's machine. Without ``--fragile`` the record is
refused; with it, every outcome seen is kept, ``rcbook check`` accepts those and no other, and the ledger
says the claim counts on no machine. A value per event whose events differ between variants, and a value
a rule reads that the variants put on both sides of its line, are recorded so that the check can pass on
any of those machines, and say why."""

import json

import pytest

from rankcollapse.book import ledger, records
from rankcollapse.book.cli import main


def _doc(verdict="supported", control="refuted", values=None, rule="r"):
    return {
        "chapter": "t",
        "params": {},
        "values": values or {"x": {"value": 1.0, "rtol": 0.0, "atol": 0.0, "note": "a ratio"}},
        "verdicts": {
            "H": {
                "verdict": verdict,
                "claim": "",
                "rule": rule,
                "evidence": {},
                "control": {"verdict": control, "on": "a control run"},
            }
        },
    }


def _ok(rec: dict, now: dict) -> bool:
    return all(r.ok for r in records.compare(rec, now))


def test_a_verdict_that_moves_with_the_kernels_is_refused_unless_recorded_fragile():
    with pytest.raises(records.RecordError, match="--fragile"):
        records.record_with_spread(_doc(), {"avx2": _doc(verdict="inconclusive")})
    rec = records.record_with_spread(_doc(), {"avx2": _doc(verdict="inconclusive")}, fragile=True)
    h = rec["verdicts"]["H"]
    assert h["seen"] == {records.THIS_RUN: "supported", "avx2": "inconclusive"}
    assert records.kernel_fragile(h) == {"verdict": h["seen"], "control": None}
    # the check accepts what some variant gave, and no other outcome
    assert _ok(rec, _doc()) and _ok(rec, _doc(verdict="inconclusive"))
    assert not _ok(rec, _doc(verdict="refuted"))
    # a verdict on which every variant agreed stays exact, fragile or not
    same = records.record_with_spread(_doc(), {"avx2": _doc()}, fragile=True)
    assert records.kernel_fragile(same["verdicts"]["H"]) is None
    assert not _ok(same, _doc(verdict="inconclusive"))


def test_a_control_that_moves_with_the_kernels_is_recorded_fragile_on_its_own():
    with pytest.raises(records.RecordError, match="its control"):
        records.record_with_spread(_doc(), {"avx2": _doc(control="inconclusive")})
    rec = records.record_with_spread(_doc(), {"avx2": _doc(control="inconclusive")}, fragile=True)
    kf = records.kernel_fragile(rec["verdicts"]["H"])
    assert kf["verdict"] is None and kf["control"] == {records.THIS_RUN: "refuted", "avx2": "inconclusive"}
    assert _ok(rec, _doc(control="inconclusive")) and not _ok(rec, _doc(control="supported"))
    assert not _ok(rec, _doc(verdict="inconclusive"))  # the verdict itself held, and is held exactly


def test_a_previous_rules_verdict_that_moves_is_kept_with_every_outcome_seen():
    def v(x):
        return {"old": {"value": x, "rtol": 0.0, "atol": 0.0, "note": "the first rule's verdict"}}

    with pytest.raises(records.RecordError, match="non-numeric"):
        records.record_with_spread(_doc(values=v("supported")), {"avx2": _doc(values=v("inconclusive"))})
    rec = records.record_with_spread(
        _doc(values=v("supported")), {"avx2": _doc(values=v("inconclusive"))}, fragile=True
    )
    e = rec["values"]["old"]
    assert e["seen"] == {records.THIS_RUN: "supported", "avx2": "inconclusive"}
    assert "KERNEL-FRAGILE" in e["note"]
    assert _ok(rec, _doc(values=v("inconclusive"))) and not _ok(rec, _doc(values=v("refuted")))


def test_a_count_the_kernels_put_on_both_sides_of_its_line_is_held_to_its_spread_not_to_a_side():
    def v(k):
        return {
            "n": {
                "value": k,
                "rtol": 0.0,
                "atol": 0.0,
                "note": "pairs slower",
                "kind": "count",
                "of": 10,
                "limits": [6.5],
            }
        }

    # without --fragile the line caps the tolerance, and the other side fails
    strict = records.record_with_spread(_doc(values=v(7)), {"avx2": _doc(values=v(5))})
    assert not _ok(strict, _doc(values=v(5)))
    rec = records.record_with_spread(_doc(values=v(7)), {"avx2": _doc(values=v(5))}, fragile=True)
    e = rec["values"]["n"]
    assert e["fragile"] and e["straddled_limits"] == [6.5] and "limits" not in e
    assert e["margin"] == pytest.approx(0.5) and "both sides" in e["note"]
    assert _ok(rec, _doc(values=v(5))) and _ok(rec, _doc(values=v(8)))
    assert not _ok(rec, _doc(values=v(0)))  # past the measured spread (+-8 = 4 x 2): still a failure
    # a count that stayed on its side keeps its line, fragile or not
    kept = records.record_with_spread(_doc(values=v(9)), {"avx2": _doc(values=v(8))}, fragile=True)
    assert kept["values"]["n"]["limits"] == [6.5] and not _ok(kept, _doc(values=v(6)))


def test_a_value_per_event_read_in_decades_whose_events_differ_is_recorded_for_reading():
    def v(per_seed):
        return {
            "g": {
                "value": per_seed,
                "rtol": 0.0,
                "atol": 0.0,
                "note": "per event",
                "kind": "log",
                "decades": 1.0,
            }
        }

    here, there = {"0": [1e-8, 2e-8], "1": [3e-9, 1e-9]}, {"0": [1e-7, 1e-8], "3": [5e-9, 2e-9]}
    rec = records.record_with_spread(_doc(values=v(here)), {"avx2": _doc(values=v(there))})
    e = rec["values"]["g"]
    assert e["unchecked"] and e["kind"] == "log" and "differ between kernel variants" in e["note"]
    assert "summary" not in e
    assert _ok(rec, _doc(values=v(there)))
    # with the same events, a value in decades is still checked in decades
    same = records.record_with_spread(_doc(values=v(here)), {"avx2": _doc(values=v(here))})
    assert not same["values"]["g"].get("unchecked")
    assert not _ok(same, _doc(values=v({"0": [1e-4, 2e-8], "1": [3e-9, 1e-9]})))


def test_the_ledger_says_a_kernel_fragile_verdict_counts_on_no_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("RCBOOK_EXPECTED", str(tmp_path))
    rec = records.record_with_spread(_doc(), {"avx2": _doc(verdict="inconclusive")}, fragile=True)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "t.json").write_text(json.dumps(rec))
    text = ledger.fragile_note("full", "t", "H")
    assert "does not count" in text and "'supported' (this run)" in text and "'inconclusive' (avx2)" in text
    steady = records.record_with_spread(_doc(), {"avx2": _doc()})
    (tmp_path / "full" / "t.json").write_text(json.dumps(steady))
    assert ledger.fragile_note("full", "t", "H") == ""
    assert ledger.fragile_note("full", "no-such-chapter", "H") == ""


def test_fragile_needs_a_spread():
    assert main(["record", "--profile", "smoke", "decomposition", "--fragile"]) == 2


def _count(k, of, limits=None):
    e = {"value": k, "rtol": 0.0, "atol": 0.0, "note": "recovered", "kind": "count", "of": of}
    return {"n": {**e, "limits": limits}} if limits else {"n": e}


def test_a_count_out_of_another_number_of_events_is_checked_as_the_share_it_is():
    # 9 of 9 recovered here, 6 of 6 under avx2 (three fewer drivers settled): the same share, not 3 apart
    rec = records.record_with_spread(
        _doc(values=_count(9, 9, [4.5])), {"avx2": _doc(values=_count(6, 6, [3.5]))}
    )
    e = rec["values"]["n"]
    assert e["proportion"] == pytest.approx(1 / 9) and e["own_limits"] == [4.5] and "limits" not in e
    assert not e["fragile"] and records.kind_violations(rec) == []
    assert _ok(rec, _doc(values=_count(6, 6, [3.5]))) and _ok(rec, _doc(values=_count(7, 7, [3.5])))
    assert _ok(rec, _doc(values=_count(8, 9, [4.5])))  # one trial of this run
    assert not _ok(rec, _doc(values=_count(4, 6, [3.5])))  # a third fewer: more than the share moved
    assert not _ok(rec, _doc(values=_count(3, 7, [3.5])))  # and on the other side of its own line
    # a count that one variant puts on the other side of its own line is fragile: no side is asked
    crossed = records.record_with_spread(
        _doc(values=_count(16, 21, [14.5])), {"avx2": _doc(values=_count(6, 8, [6.5]))}
    )
    c = crossed["values"]["n"]
    assert c["fragile"] and c["sides"] is None and "FRAGILE" in c["note"]
    assert _ok(crossed, _doc(values=_count(6, 8, [6.5]))) and not _ok(
        crossed, _doc(values=_count(2, 8, [6.5]))
    )
    # the same number of trials everywhere: a count as before, in events
    same = records.record_with_spread(_doc(values=_count(9, 10)), {"avx2": _doc(values=_count(6, 10))})
    assert same["values"]["n"].get("proportion") is None and same["values"]["n"]["atol"] == 3


def test_a_record_names_the_variants_its_spread_never_saw():
    from rankcollapse.book import kernels

    rec = records.record_with_spread(_doc(), {"avx2": _doc()})
    assert rec["spread_missing"] == [v for v in kernels.SPREAD if v != "avx2"]
    full = records.record_with_spread(_doc(), {v: _doc() for v in kernels.SPREAD})
    assert full["spread_missing"] == []


def test_a_value_that_only_some_kernel_variants_give_is_refused_unless_recorded_fragile():
    with_x = _doc(
        values={
            "x": {"value": 1.0, "rtol": 0.0, "atol": 0.0, "note": "a ratio"},
            "dips": {"value": 3.0, "rtol": 0.0, "atol": 0.0, "note": "read where there are dips"},
        }
    )
    with pytest.raises(records.RecordError, match="missing under variant"):
        records.record_with_spread(with_x, {"avx2": _doc()})
    # given here, absent under avx2
    rec = records.record_with_spread(with_x, {"avx2": _doc()}, fragile=True)
    assert rec["values"]["dips"]["absent_seen"] == ["avx2"] and "measured:" in rec["values"]["dips"]["note"]
    assert _ok(rec, with_x) and _ok(rec, _doc())
    # absent here, given under avx2: recorded from avx2's run, accepted either way
    rec2 = records.record_with_spread(_doc(), {"avx2": with_x}, fragile=True)
    assert rec2["values"]["dips"]["absent_seen"] == [records.THIS_RUN]
    assert _ok(rec2, with_x) and _ok(rec2, _doc())
    # a value every variant gives is still checked
    assert not _ok(rec, _doc(values={"x": {"value": 9.0, "rtol": 0.0, "atol": 0.0, "note": "a ratio"}}))


def test_a_number_one_variant_cannot_form_is_absent_there():
    """A ratio that is NaN under one variant (measured: repair-path's lowest held alpha over the collapse's
    at smoke, 0 natively, NaN under scalar, where no held switch recovered) is a value that variant did not
    give: refused without --fragile, kept for reading with it; NaN under every variant is recorded as
    usual."""

    def ratio(v):
        return _doc(values={"r": {"value": v, "rtol": 0.0, "atol": 0.0, "note": "a ratio"}})

    with pytest.raises(records.RecordError, match="missing under variant 'scalar'"):
        records.record_with_spread(ratio(0.0), {"scalar": ratio(float("nan"))})
    rec = records.record_with_spread(ratio(0.0), {"scalar": ratio(float("nan"))}, fragile=True)
    assert rec["values"]["r"]["absent_seen"] == ["scalar"] and rec["values"]["r"]["value"] == 0.0
    assert _ok(rec, ratio(0.0)) and _ok(rec, ratio(float("nan")))
    both = records.record_with_spread(ratio(float("nan")), {"scalar": ratio(float("nan"))})
    assert "absent_seen" not in both["values"]["r"]


def test_a_count_absent_under_some_kernels_is_kept_for_reading_and_breaks_no_kind_rule():
    dips = {"value": 0, "rtol": 0.0, "atol": 0.0, "kind": "count", "of": 1, "limits": [0.5], "note": "dips"}
    here = _doc(values={"x": {"value": 1.0, "rtol": 0.0, "atol": 0.0, "note": "a ratio"}, "dips": dips})
    rec = records.record_with_spread(here, {"avx2": _doc()}, fragile=True)
    assert rec["values"]["dips"]["unchecked"] and rec["values"]["dips"]["kind"] == "count"
    assert records.kind_violations(rec) == []


def test_a_reading_per_term_that_moves_with_the_kernels_is_recorded_fragile_as_a_whole():
    def reading(cos):
        return {
            "value": {"penalty": {"line": "falls"}, "cosine": {"line": cos}},
            "rtol": 0.0,
            "atol": 0.0,
            "note": "the reading per term",
        }

    here = _doc(values={"r": reading("falls")})
    there = _doc(values={"r": reading("stays within a factor 2")})
    with pytest.raises(records.RecordError, match="non-numeric"):
        records.record_with_spread(here, {"avx2": there})
    rec = records.record_with_spread(here, {"avx2": there}, fragile=True)
    assert set(rec["values"]["r"]["seen"]) == {records.THIS_RUN, "avx2"}
    assert _ok(rec, here) and _ok(rec, there)
    assert not _ok(rec, _doc(values={"r": reading("rises")}))
