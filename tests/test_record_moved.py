"""``rcbook record --moved``: a record is carried to moved code only when runs of the old and the new code
on one host under the same kernels are bit-identical (records.moved), and refused on the smallest
difference."""

import copy

import pytest

from rankcollapse.book.records import RecordError, moved


def _doc(code="a" * 64, x=0.1 + 0.2):
    return {
        "chapter": "mlp",
        "profile": "smoke",
        "params": {"profile": "smoke", "seed": 0, "n": 3, "workers": 2, "stack": False},
        "code_hash": code,
        "library_hash": code,
        "library_version": "0.1.0",
        "kernels": {"variant": "native", "cpu_capability": "AVX2"},
        "values": {"x": {"value": x, "rtol": 1e-3, "atol": 0.0, "note": "measured: ...", "spread": {}}},
        "verdicts": {"C3": {"verdict": "supported", "reason": "x = 0.3", "evidence": {"x": x}}},
    }


def _three():
    rec = _doc(x=0.3)  # written on another host: its value need not be this host's
    return rec, _doc(), _doc(code="b" * 64)


def test_identical_runs_carry_the_record_with_its_tolerances():
    rec, before, now = _three()
    now["values"]["x"]["rtol"] = 1e-9  # the run's own tolerance: the record's measured one is kept
    now["params"]["workers"] = 1  # how a run is made is not compared
    out = moved(rec, before, now)
    assert out["code_hash"] == "b" * 64 and out["library_hash"] == "b" * 64
    assert out["values"]["x"] == rec["values"]["x"]
    assert "bit-identically" in out["moved"]


def test_last_bit_of_a_value_refuses():
    rec, before, now = _three()
    now["values"]["x"]["value"] = 0.30000000000000004 + 1e-16
    with pytest.raises(RecordError, match="other numbers: x"):
        moved(rec, before, now)


def test_a_verdict_reason_that_moved_refuses():
    rec, before, now = _three()
    now["verdicts"]["C3"]["reason"] = "x = 0.30"
    with pytest.raises(RecordError, match="other verdicts: C3"):
        moved(rec, before, now)


def test_an_earlier_run_of_other_code_refuses():
    rec, before, now = _three()
    before["code_hash"] = "c" * 64
    with pytest.raises(RecordError, match="other code than its record"):
        moved(rec, before, now)


def test_other_kernels_refuse():
    rec, before, now = _three()
    now["kernels"] = {"variant": "scalar", "cpu_capability": "DEFAULT"}
    with pytest.raises(RecordError, match="other kernels"):
        moved(rec, before, now)


def test_a_removed_parameter_only_when_named():
    rec, before, now = _three()
    del now["params"]["stack"]
    with pytest.raises(RecordError, match="other parameters"):
        moved(rec, before, now)
    out = moved(rec, before, now, removed_params=("stack",))
    assert "stack" not in out["params"] and "removed: stack" in out["moved"]
    now2 = copy.deepcopy(now)
    now2["params"]["n"] = 4
    with pytest.raises(RecordError, match="other parameters"):
        moved(rec, before, now2, removed_params=("stack",))


def test_a_stated_smoke_note_is_not_a_result_and_follows_the_new_code():
    """A chapter that drops (or adds) its stated reason for a smoke verdict computes nothing else: the move
    is accepted, and the record carries the new code's note, not the old one."""
    rec, before, now = _three()
    for d in (rec, before):
        d["verdicts"]["C3"]["smoke_note"] = "the miniature cannot judge C3"
    out = moved(rec, before, now)
    assert "smoke_note" not in out["verdicts"]["C3"] and "smoke note changed for C3" in out["moved"]
    assert out["verdicts"]["C3"]["verdict"] == rec["verdicts"]["C3"]["verdict"]
    now["verdicts"]["C3"]["smoke_note"] = "another reason"
    assert moved(rec, before, now)["verdicts"]["C3"]["smoke_note"] == "another reason"
    now["verdicts"]["C3"]["verdict"] = "refuted"  # a computed key still refuses
    with pytest.raises(RecordError, match="other verdicts: C3"):
        moved(rec, before, now)
