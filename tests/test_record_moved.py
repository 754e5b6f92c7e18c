"""``rcbook record --moved``: a record is carried to moved code only when a native run of that code is
bit-identical to it (records.moved), and refused on the smallest difference."""

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
        "kernels": {"variant": "native"},
        "values": {"x": {"value": x, "rtol": 1e-3, "atol": 0.0, "note": "measured: ...", "spread": {}}},
        "verdicts": {"C3": {"verdict": "supported", "reason": "x = 0.3", "evidence": {"x": x}}},
    }


def test_identical_run_takes_the_new_keys_and_keeps_the_tolerances():
    rec, now = _doc(), _doc(code="b" * 64)
    now["values"]["x"]["rtol"] = 1e-9  # the run's own tolerance: the record's measured one is kept
    out = moved(rec, now)
    assert out["code_hash"] == "b" * 64 and out["library_hash"] == "b" * 64
    assert out["values"]["x"]["rtol"] == 1e-3
    assert "bit-identically" in out["moved"]


def test_last_bit_of_a_value_refuses():
    rec, now = _doc(), _doc(code="b" * 64, x=0.30000000000000004 + 1e-16)
    with pytest.raises(RecordError, match="other numbers: x"):
        moved(rec, now)


def test_a_verdict_reason_that_moved_refuses():
    rec, now = _doc(), _doc(code="b" * 64)
    now["verdicts"]["C3"]["reason"] = "x = 0.30"
    with pytest.raises(RecordError, match="other verdicts: C3"):
        moved(rec, now)


def test_a_removed_parameter_only_when_named():
    rec, now = _doc(), _doc(code="b" * 64)
    del now["params"]["stack"]
    with pytest.raises(RecordError, match="other parameters"):
        moved(rec, now)
    out = moved(rec, now, removed_params=("stack",))
    assert "stack" not in out["params"] and "removed: stack" in out["moved"]
    now2 = copy.deepcopy(now)
    now2["params"]["n"] = 4
    with pytest.raises(RecordError, match="other parameters"):
        moved(rec, now2, removed_params=("stack",))


def test_another_kernel_variant_refuses():
    rec, now = _doc(), _doc(code="b" * 64)
    now["kernels"] = {"variant": "zen4"}
    with pytest.raises(RecordError, match="zen4"):
        moved(rec, now)
