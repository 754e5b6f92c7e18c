"""The sentence a Part III page prints beside each verdict: kernel-fragile (with what each variant gave),
held under the variants its record was made with, or not yet recorded; read from the chapter's own record."""

import json
from types import SimpleNamespace

from rankcollapse.book.verdict_kernels import verdict_kernels_text


def _ch(tmp_path, monkeypatch, record):
    monkeypatch.setenv("RCBOOK_EXPECTED", str(tmp_path))
    if record is not None:
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "repair-path.json").write_text(json.dumps(record))
    glued = {}
    ch = SimpleNamespace(params={"profile": "full"}, name="repair-path", glue=glued.__setitem__)
    return ch, glued


def _record(verdict):
    return {
        "kernels": {"variant": "native"},
        "values": {"x": {"value": 1.0, "spread": {"variants": ["avx2", "recorded"]}}},
        "verdicts": {"H5": verdict},
    }


def test_a_kernel_fragile_verdict_and_control_name_what_each_variant_gave(tmp_path, monkeypatch):
    rec = _record(
        {
            "verdict": "supported",
            "seen": {"this run": "supported", "avx2": "inconclusive"},
            "control": {"verdict": "refuted", "seen": {"this run": "refuted", "avx2": "inconclusive"}},
        }
    )
    ch, glued = _ch(tmp_path, monkeypatch, rec)
    t = verdict_kernels_text(ch, "H5")
    assert glued["verdict-H5-kernels"] == t and t.startswith("Kernel-fragile, so it does not count")
    assert "the verdict gave 'supported' (this run) or 'inconclusive' (avx2)" in t
    assert "the control gave 'refuted' (this run) or 'inconclusive' (avx2)" in t


def test_a_verdict_that_held_names_the_variants_and_none_recorded_says_so(tmp_path, monkeypatch):
    ch, _ = _ch(tmp_path, monkeypatch, _record({"verdict": "supported", "control": {"verdict": "refuted"}}))
    t = verdict_kernels_text(ch, "H5", glue=False)
    assert "came out the same" in t and "(native) and under avx2." in t and "recorded." not in t
    # a claim the record does not hold, or no record at all: not yet recorded, never "held"
    assert "not yet recorded" in verdict_kernels_text(ch, "H9", glue=False)
    ch2, _ = _ch(tmp_path / "none", monkeypatch, None)
    assert "not yet recorded" in verdict_kernels_text(ch2, "H5", glue=False)
