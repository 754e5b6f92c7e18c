"""The recorded results in the repository: current, recorded with measured tolerances, and the smoke profile
a faithful miniature of the full one (the same verdicts, or a stated reason next to the verdict)."""

import pytest

from rankcollapse.book import kernels
from rankcollapse.book.records import expected_path, load_checked
from rankcollapse.chapters import CHAPTERS, module
from rankcollapse.store import chapter_code_hash


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_smoke_record_is_current(chapter):
    rec = load_checked(expected_path("smoke", chapter))
    assert rec.get("code_hash") == chapter_code_hash(chapter), (
        f"data/expected/smoke/{chapter}.json was recorded by another version of the code "
        f"this chapter depends on: "
        f"re-run and re-record it (bash make.sh record smoke)"
    )


@pytest.mark.parametrize("profile", ["smoke", "full"])
@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_tolerances_come_from_measured_spread(chapter, profile):
    rec = load_checked(expected_path(profile, chapter))
    if profile != "smoke" and rec.get("code_hash") != chapter_code_hash(chapter):
        pytest.xfail(
            f"data/expected/{profile}/{chapter}.json is stale (recorded by another version of the code)"
        )
    assert "tolerance_rule" in rec
    for name, e in rec["values"].items():
        assert "measured:" in e["note"], (
            f"{chapter}: value '{name}' has a tolerance not derived from measured spread"
        )
        # every pure variant and every mix a real machine has (kernels.SPREAD), the mixes included; at full,
        # a variant not run for the record is named in it (spread_missing: rcbook check and the page say so)
        short = set(rec.get("spread_missing") or []) if profile == "full" else set()
        assert set(e["spread"]["variants"]) | short >= set(kernels.SPREAD), (
            f"{chapter}: value '{name}' was recorded over {e['spread']['variants']}, not {kernels.SPREAD}"
            + (f" (named as not run: {sorted(short)})" if short else "")
        )


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_smoke_verdicts_equal_full_or_say_why(chapter):
    smoke = load_checked(expected_path("smoke", chapter))["verdicts"]
    full_rec = load_checked(expected_path("full", chapter))
    if full_rec.get("code_hash") != chapter_code_hash(chapter):
        # a full record written by other code (other rules, other runs) says nothing about this code's full
        # verdicts: the comparison waits for `bash make.sh record full CHAPTER`; shown, not hidden
        pytest.xfail(f"data/expected/full/{chapter}.json is stale (recorded by another version of the code)")
    full = full_rec["verdicts"]
    notes = getattr(module(chapter), "SMOKE_VERDICT_NOTES", {})
    assert set(smoke) == set(full), f"{chapter}: smoke and full record different claims"
    for cid, v in smoke.items():
        differs = v["verdict"] != full[cid]["verdict"]
        if differs:
            assert cid in notes and v.get("smoke_note") == notes[cid], (
                f"{chapter}: {cid} is '{v['verdict']}' at smoke but '{full[cid]['verdict']}' at full, "
                f"and the chapter "
                f"states no reason (SMOKE_VERDICT_NOTES)"
            )
        else:
            assert cid not in notes, f"{chapter}: a stated smoke reason for {cid}, whose verdicts agree"
