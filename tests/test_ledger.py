"""The ledger is generated from results files, and says 'not run' for chapters that did not run."""

import json

from rankcollapse.book import ledger


def test_ledger_reads_verdicts(tmp_path):
    (tmp_path / "decomposition").mkdir()
    (tmp_path / "decomposition" / "results.json").write_text(
        json.dumps(
            {
                "verdicts": {
                    "D1": {"verdict": "supported", "evidence": {"err_f64": 1.234567e-16}},
                    "C5": {"verdict": "refuted", "evidence": {"k90": 7}},
                }
            }
        )
    )
    t = ledger.table(tmp_path, "smoke", ["decomposition"])
    d1 = next(l for l in t.splitlines() if l.startswith("| **D1** "))
    assert "**supported** ([decomposition](decomposition.ipynb))" in d1 and "err_f64=1.23e-16" in d1
    c5 = next(l for l in t.splitlines() if l.startswith("| **C5** "))
    assert "**refuted**" in c5 and "not run (`toy-tasks`)" in c5
    c1 = next(l for l in t.splitlines() if l.startswith("| **C1** "))
    assert "not run" in c1 and "supported" not in c1
    ids = [row[0] for row in ledger.CLAIMS]
    assert len(ids) == len(set(ids)) == 18


def test_the_ledger_shows_a_rules_reason_in_place_of_its_evidence(tmp_path):
    (tmp_path / "skip").mkdir()
    reason = "every construction kept the residual; 0 of 16 skip networks collapsed"
    (tmp_path / "skip" / "results.json").write_text(
        json.dumps({"verdicts": {"C2": {"verdict": "supported", "evidence": {"reason": reason, "n": 16}}}})
    )
    c2 = next(l for l in ledger.table(tmp_path, "smoke", ["skip"]).splitlines() if l.startswith("| **C2** "))
    assert reason in c2 and "n=16" not in c2
    # one short sentence in the row, the whole reason folded beside it; a link to the deciding section
    labelled = ledger.table(tmp_path, "smoke", ["skip"], labels={("skip", "C2"): "claim-skip-c2"})
    c2 = next(l for l in labelled.splitlines() if l.startswith("| **C2** "))
    assert "{ref}`→ section <claim-skip-c2>`" in c2 and "<details><summary>rule's reason</summary>" in c2
    long = {"evidence": {"reason": "x" * 1000}}
    assert len(ledger.evidence_text(long)) == 400 and ledger.evidence_text(long).endswith("…")


def test_the_ledger_says_whether_a_count_verdict_holds_across_its_intervals():
    from rankcollapse.book import checks

    def rule(ev):
        return ("supported" if ev["skip"] == 0 else "inconclusive", "")

    fragile = checks.across_interval(rule, {"skip": 0}, {"skip collapsed": (0, 7, checks.at_key("skip"))})
    note = ledger.interval_note({"evidence": {"across_interval": fragile}})
    assert note.startswith("Fragile in its counts: skip collapsed at 1 of 7 instead of 0") and "0–2" in note
    firm = checks.across_interval(lambda ev: ("supported", ""), {"s": 5}, {"s": (5, 9, checks.at_key("s"))})
    assert ledger.interval_note({"evidence": {"across_interval": firm}}).startswith("Holds across")
    assert ledger.interval_note({"evidence": {"reason": "no counts"}}) == ""


def test_a_verdict_is_shown_and_checked_beside_its_control(tmp_path):
    from rankcollapse.book import records
    from rankcollapse.book.notebook import control_text
    from rankcollapse.book.results import Results

    r = Results("skip", {})
    ctl = {"on": "the pure SAN, no skip", "verdict": "refuted", "reason": "16 of 16 collapsed"}
    r.verdict("C2", "supported", claim="c", rule="r", evidence={"reason": "kept", "control": ctl})
    r.verdict("Q1", "supported", claim="c", rule="r", evidence={"control": {**ctl, "verdict": "supported"}})
    r.verdict("C1", "refuted", claim="c", rule="r", evidence={})
    assert r.verdicts["C2"]["control"]["counts"] and not r.verdicts["Q1"]["control"]["counts"]
    assert "control" not in r.verdicts["C1"]
    assert "so the verdict counts" in control_text(r.verdicts["C2"]["control"])
    assert "does not count" in control_text(
        r.verdicts["Q1"]["control"]
    ) and "does not count" in control_text(None)
    (tmp_path / "skip").mkdir()
    (tmp_path / "skip" / "results.json").write_text(json.dumps({"verdicts": r.verdicts}))
    t = ledger.table(tmp_path, "smoke", ["skip"])
    c2 = next(l for l in t.splitlines() if l.startswith("| **C2** "))
    q1 = next(l for l in t.splitlines() if l.startswith("| **Q1** "))
    assert "refuted <small>(the pure SAN, no skip)</small>; counts" in c2
    assert "same outcome: does not count" in q1
    # the check compares the control's outcome too
    doc = {"chapter": "skip", "params": {}, "values": {}, "verdicts": r.verdicts}
    moved = json.loads(json.dumps(doc))
    moved["verdicts"]["C2"]["control"]["verdict"] = "supported"
    rows = {row.name: row.ok for row in records.compare(doc, moved)}
    assert rows["verdict C2"] and not rows["verdict C2 on its control"]
    # and recording refuses a control whose outcome moves between kernel variants
    import pytest

    with pytest.raises(records.RecordError, match="its control"):
        records.record_with_spread(doc, {"avx2": moved})
    with pytest.raises(ValueError, match="control"):
        r.verdict("C3", "supported", claim="c", rule="r", evidence={"control": {"verdict": "maybe"}})
