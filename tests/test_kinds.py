"""Values of a kind (counts, values at the float floor, ratios in decades): each checked by its own rule.

The rules are fixed in rankcollapse.book.records (KINDS); a chapter marks a value's kind with
rankcollapse.book.checks. Each test gives a rule evidence for both of its outcomes."""

import json

import pytest

from rankcollapse.book import checks, records
from rankcollapse.book.results import Results
from rankcollapse.store import REPO


class _Ch:  # what checks needs of a Chapter: value() and results
    def __init__(self):
        self.results = Results("t", {})

    def value(self, name, v, *, rtol=0.0, atol=0.0, note="", glue=True):
        return self.results.value(name, v, rtol=rtol, atol=atol, note=note)


def _doc(values, verdicts=None):
    return {"chapter": "t", "params": {}, "values": values, "verdicts": verdicts or {}}


def _recorded(e, variant, value):
    """``e`` recorded with one other variant whose value is ``value``."""
    doc = records.record_with_spread(_doc({"x": e}), {variant: _doc({"x": {**e, "value": value}})})
    return doc["values"]["x"]


def _entry(**kw):
    ch = _Ch()
    fn = {"count": checks.count, "floor": checks.at_floor, "log": checks.in_decades, "exact": checks.exact}[
        kw.pop("kind")
    ]
    fn(ch, "x", kw.pop("v"), **kw)
    return ch.results.values["x"]


def test_count_rule_is_one_event_at_least_and_the_measured_move_beyond():
    e = _entry(kind="count", v=7, of=10)
    assert e["kind"] == "count" and e["of"] == 10
    same = _recorded(e, "avx2", 7)
    assert same["atol"] == 1 and same["rtol"] == 0  # never exact because nothing moved
    moved = _recorded(e, "avx2", 9)
    assert moved["atol"] == 2  # the move itself, not a multiple of it
    row = records.compare(_doc({"x": moved}), _doc({"x": {**e, "value": 5}}))[0]
    assert row.ok
    assert not records.compare(_doc({"x": moved}), _doc({"x": {**e, "value": 4}}))[0].ok


def test_exact_integers_are_held_exactly_and_refused_when_they_move():
    e = _entry(kind="exact", v=24, why="the parameters set it")
    assert e["kind"] == "exact" and e["why"] == "the parameters set it"
    same = _recorded(e, "avx2", 24)
    assert same["atol"] == 0 and same["rtol"] == 0 and "held exactly" in same["note"]
    assert records.compare(_doc({"x": same}), _doc({"x": {**e, "value": 24}}))[0].ok
    assert not records.compare(_doc({"x": same}), _doc({"x": {**e, "value": 25}}))[0].ok
    with pytest.raises(records.RecordError, match="record it as a count"):
        _recorded(e, "zen4", 23)
    with pytest.raises(ValueError, match="reason"):
        _entry(kind="exact", v=3, why="")
    with pytest.raises(ValueError, match="not an integer"):
        _entry(kind="exact", v=0.5, why="x")


def test_an_integer_with_no_kind_is_not_held_exactly():
    plain = {"n": {"value": 3, "rtol": 0.0, "atol": 0.0}, "m": {"value": [1, 2], "rtol": 0.0, "atol": 0.0}}
    assert [v.split(":")[0] for v in records.kind_violations(_doc(plain))] == ["n", "m"]
    ok = {
        "n": {"value": 3, "rtol": 0.0, "atol": 1.0},  # a count by another name, held to one event
        "e": {"value": 3, "rtol": 0.0, "atol": 0.0, "kind": "exact", "why": "the parameters set it"},
        "f": {"value": 3.0, "rtol": 0.0, "atol": 0.0},  # a float, held by the spread rule
    }
    assert records.kind_violations(_doc(ok)) == []


def test_counts_per_key_move_by_their_largest_key():
    e = _entry(kind="count", v={"a": 3, "b": 0}, of={"a": 7, "b": 7})
    assert e["of"] == {"a": 7, "b": 7}
    rec = records.record_with_spread(_doc({"x": e}), {"avx2": _doc({"x": {**e, "value": {"a": 5, "b": 1}}})})
    x = rec["values"]["x"]
    assert x["atol"] == 2.0 and x["rtol"] == 0.0
    assert records.compare(_doc({"x": x}), _doc({"x": {**e, "value": {"a": 1, "b": 2}}}))[0].ok
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": {"a": 0, "b": 0}}}))[0].ok
    with pytest.raises(ValueError, match=r"x\[a\]"):
        _entry(kind="count", v={"a": 8}, of=7)
    with pytest.raises(records.RecordError, match="not an integer"):
        records.record_with_spread(_doc({"x": e}), {"avx2": _doc({"x": {**e, "value": {"a": 5}}})})


def test_floor_values_are_checked_as_below_their_floor():
    e = _entry(kind="floor", v=7e-10, floor=1e-6)
    rec = _recorded(e, "zen4", 1e-7)
    assert rec["rtol"] == 0 and rec["kind"] == "floor"
    # 140x larger, still round-off: a match (a relative tolerance of 3.5 failed on this)
    assert records.compare(_doc({"x": rec}), _doc({"x": {**e, "value": 1e-7}}))[0].ok
    # above the floor: the gradient is no longer zero, the science changed
    assert not records.compare(_doc({"x": rec}), _doc({"x": {**e, "value": 2e-6}}))[0].ok
    # the run's own floor is the one it is checked against
    assert records.compare(_doc({"x": rec}), _doc({"x": {**e, "value": 2e-6, "floor": 1e-5}}))[0].ok
    with pytest.raises(records.RecordError, match="above its floor under zen4"):
        records.record_with_spread(_doc({"x": e}), {"zen4": _doc({"x": {**e, "value": 3e-6}})})
    above = _entry(kind="floor", v=3e-6, floor=1e-6)  # recorded by the chapter, refused by the record
    with pytest.raises(records.RecordError, match="above its floor under this run"):
        _recorded(above, "zen4", 1e-9)


def test_floor_per_leaf():
    assert records.below_floor([1e-9, 1e-3], [1e-8, 1e-2])
    assert not records.below_floor([1e-9, 1e-3], [1e-8, 1e-4])
    assert not records.below_floor([float("nan")], 1.0)


def test_ratios_in_decades():
    e = _entry(kind="log", v=[1e-7, 2e-8], decades=1.0)
    rec = records.record_with_spread(_doc({"x": e}), {"avx2": _doc({"x": {**e, "value": [3e-7, 2e-8]}})})
    x = rec["values"]["x"]
    assert x["decades"] == pytest.approx(max(1.0, 4 * 0.4771), rel=1e-3)  # SAFETY x log10(3)
    assert records.compare(_doc({"x": x}), _doc({"x": {**e, "value": [1e-8, 2e-9]}}))[0].ok  # one decade
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": [1e-10, 2e-8]}}))[0].ok
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": [0.0, 2e-8]}}))[0].ok


def test_a_ratio_a_rule_reads_is_held_no_wider_than_its_margin_to_the_line():
    # H3-like: a collapsed/healthy ratio read against 1e-4 (closed) and 1/3 (open)
    e = _entry(kind="log", v=1e-6, decades=1.0, limits=(1e-4, 1 / 3))
    assert e["limits"] == [1e-4, 1 / 3]
    wide = {"avx2": _doc({"x": {**e, "value": 1e-5}})}  # 1 decade measured: SAFETY x 1 = 4 > margin 2
    x = records.record_with_spread(_doc({"x": e}), wide)["values"]["x"]
    assert x["margin"] == pytest.approx(2.0) and x["decades"] == pytest.approx(2.0) and not x["fragile"]
    assert "capped at its margin" in x["note"] and records.kind_violations(_doc({"x": x})) == []
    assert records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 5e-5}}))[0].ok  # inside, same side
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 2e-4}}))[0].ok  # crossed 1e-4
    # a measured deviation that reaches the line: the entry says so
    far = {"avx2": _doc({"x": {**e, "value": 2e-4}})}
    y = records.record_with_spread(_doc({"x": e}), far)["values"]["x"]
    assert y["fragile"] and "FRAGILE" in y["note"]
    # a hand-widened tolerance past the margin is a violation
    assert records.kind_violations(_doc({"x": {**x, "decades": 5.0}}))


def test_kind_violations_walks_a_record():
    ok = {"f": {"value": 1e-9, "rtol": 0.0, "atol": 0.0, "kind": "floor", "floor": 1e-6}}
    assert records.kind_violations(_doc(ok)) == []
    bad = {
        "f": {"value": 1e-9, "rtol": 3.5, "atol": 0.0, "floor": 1e-6},
        "c": {"value": 3, "rtol": 0.0, "atol": 0.0, "kind": "count", "of": 8},
        "d": {"value": 2.0, "rtol": 0.0, "atol": 0.0, "kind": "log", "decades": 0},
    }
    assert [v.split(":")[0] for v in records.kind_violations(_doc(bad))] == ["f", "c", "d"]


def test_malformed_kinds_are_named(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_doc({"c": {"value": 3, "rtol": 0, "atol": 1, "kind": "count"}})))
    with pytest.raises(records.MalformedRecord, match="'c' of kind 'count' lacks 'of'"):
        records.load_checked(p)
    p.write_text(json.dumps(_doc({"c": {"value": 3, "rtol": 0, "atol": 1, "kind": "tally"}})))
    with pytest.raises(records.MalformedRecord, match="kind 'tally'"):
        records.load_checked(p)


def test_exact_binomial_interval():
    lo, hi = checks.binomial_interval(7, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.3475, 0.9333)  # Clopper-Pearson, 95%
    assert checks.binomial_interval(0, 8)[0] == 0.0 and checks.binomial_interval(8, 8)[1] == 1.0
    assert checks.count_range(7, 10) == (4, 9)
    assert checks.count_text(7, 10) == "7 of 10 (95% interval 35%–93%)"
    with pytest.raises(ValueError):
        checks.binomial_interval(3, 2)


def test_counts_refuse_what_is_not_a_count():
    with pytest.raises(ValueError, match="not out of 8"):
        _entry(kind="count", v=9, of=8)
    with pytest.raises(ValueError, match="not a count"):
        _entry(kind="count", v=1.5, of=8)


RECORD_FILES = sorted((REPO / "data" / "expected").glob("*/*.json"))


@pytest.mark.parametrize("path", RECORD_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_record_keeps_its_kinds_rules(path):
    """No value below its own floor held to a relative tolerance, no count held tighter than one event, no
    integer held exactly without a stated reason."""
    from rankcollapse.store import chapter_code_hash

    rec = records.load_checked(path)
    if path.parent.name != "smoke" and rec.get("code_hash") != chapter_code_hash(path.stem):
        # a record written by other code, before these rules: re-recorded with `bash make.sh record`; shown
        pytest.xfail(f"{path.parent.name}/{path.name} is stale (recorded by another version of the code)")
    assert records.kind_violations(rec) == []


def test_a_value_a_rule_reads_against_a_line_is_held_no_wider_than_its_margin():
    ch = _Ch()
    checks.against(ch, "x", 0.6, limits=(0.5,))  # a rule reads x > 0.5
    e = {**ch.results.values["x"], "rtol": 0.0}
    x = records.record_with_spread(_doc({"x": e}), {"avx2": _doc({"x": {**e, "value": 0.58}})})["values"][
        "x"
    ]
    # measured 0.02 (rel 0.033) -> SAFETY x 0.033 = 0.13 rel = 0.08 abs: within the margin 0.1, not capped
    assert x["margin"] == pytest.approx(0.1) and not x["fragile"]
    assert records.kind_violations(_doc({"x": x})) == []
    assert records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 0.55}}))[0].ok
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 0.49}}))[0].ok  # crossed the line
    # a spread wider than the margin: the tolerance is capped there, and the entry is fragile
    y = records.record_with_spread(_doc({"x": e}), {"avx2": _doc({"x": {**e, "value": 0.45}})})["values"][
        "x"
    ]
    assert y["fragile"] and "FRAGILE" in y["note"] and "capped" in y["note"]
    assert y["atol"] + y["rtol"] * 0.6 <= 0.1 + 1e-12 and records.kind_violations(_doc({"x": y})) == []
    # a tolerance widened by hand past the margin is a violation
    assert records.kind_violations(_doc({"x": {**x, "rtol": 0.5}}))
    with pytest.raises(ValueError, match="needs the lines"):
        checks.against(_Ch(), "z", 1.0, limits=())


def test_a_capped_value_that_moved_away_from_its_lines_is_held_to_its_measured_spread():
    """The cap bounds a move toward a line. A value that moved away from every line (same side, farther
    from the nearest one) changes no reading of the rule: it is held to the tolerance measured before the
    cap, and still fails beyond it or across a line."""
    ch = _Ch()
    checks.against(ch, "x", 4.0, limits=(1.5, 3.0))  # a rule reads x against 1.5 and 3: margin 1
    e = {**ch.results.values["x"], "rtol": 0.0}
    x = records.record_with_spread(_doc({"x": e}), {"scalar": _doc({"x": {**e, "value": 24.0}})})["values"][
        "x"
    ]
    assert x["fragile"] and x["rtol"] * 4.0 + x["atol"] <= 1.0 + 1e-12 and x["away"]["rtol"] >= 5.0
    assert records.kind_violations(_doc({"x": x})) == []
    assert records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 24.0}}))[0].ok  # away: the spread holds
    assert records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 3.5}}))[0].ok  # toward, inside the cap
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 2.9}}))[0].ok  # across the line
    too_far = 4.0 * (1 + 2 * x["away"]["rtol"])
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": too_far}}))[0].ok


def test_a_ratio_in_decades_capped_at_its_lines_that_moved_away_is_held_to_its_measured_spread():
    """The same for a ratio read in decades: lines 0.5 and 2, recorded at 0.05 (1 decade below 0.5), a
    variant at 0.5e-2: 4 x 1 decade measured, capped at the 1-decade margin; a move farther below is held to
    the 4 decades measured, a move toward the line to the cap, a move across it fails."""
    e = _entry(kind="log", v=0.05, decades=0.3, limits=(0.5, 2.0))
    x = records.record_with_spread(_doc({"x": e}), {"zen4": _doc({"x": {**e, "value": 0.005}})})["values"][
        "x"
    ]
    assert x["decades"] == pytest.approx(1.0) and x["fragile"] and x["away_decades"] == pytest.approx(4.0)
    assert records.kind_violations(_doc({"x": x})) == []

    def ok(v):
        return records.compare(_doc({"x": x}), _doc({"x": {**e, "value": v}}))[0].ok

    assert ok(0.005) and ok(1e-5)  # away from the lines: within the 4 measured decades
    assert not ok(1e-6)  # away, but beyond the measured spread
    assert ok(0.3) and not ok(0.6)  # toward the line: inside the cap; across it: fails


def test_a_count_a_rule_reads_against_a_line_is_held_to_its_side():
    e = _entry(kind="count", v=5, of=7, limits=(3.5,))  # a rule "at least 4 of 7"
    x = records.record_with_spread(_doc({"x": e}), {"avx2": _doc({"x": {**e, "value": 5}})})["values"]["x"]
    assert x["atol"] == 1 and x["margin"] == pytest.approx(1.5) and not x["fragile"]
    assert records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 4}}))[0].ok
    assert not records.compare(_doc({"x": x}), _doc({"x": {**e, "value": 3}}))[0].ok
    # moved by 3 between variants (8 -> 5 is impossible of 7; use no 'of'): capped at the margin, fragile
    f = _entry(kind="count", v=6, of=None, limits=(3.5,))
    y = records.record_with_spread(_doc({"x": f}), {"avx2": _doc({"x": {**f, "value": 9}})})["values"]["x"]
    assert y["atol"] == 2 and y["fragile"] and "FRAGILE" in y["note"]
    assert records.kind_violations(_doc({"x": y})) == []
    assert records.kind_violations(_doc({"x": {**y, "atol": 3.0}}))


def test_the_replaced_record_widens_only_what_it_measured_the_same_way():
    e = {"value": 1.0, "rtol": 0.0, "atol": 0.0, "note": "a ratio"}
    old = {**e, "value": 1.1, "rtol": 0.5, "note": "a ratio || measured: on another host"}
    x = records.record_with_spread(
        _doc({"x": e}), {"avx2": _doc({"x": e}), records.RECORDED: _doc({"x": old})}
    )["values"]["x"]
    assert x["rtol"] == pytest.approx(0.5) and "replaced record" in x["note"]
    other = {**old, "note": "another quantity || measured: on another host"}
    y = records.record_with_spread(
        _doc({"x": e}), {"avx2": _doc({"x": e}), records.RECORDED: _doc({"x": other})}
    )["values"]["x"]
    assert y["rtol"] == pytest.approx(records.MIN_RTOL) and records.RECORDED not in y["spread"]["variants"]
    # a verdict the replaced record reached under another rule is no spread of the new rule
    v_new = {"C": {"verdict": "refuted", "rule": "new"}}
    v_old = {"C": {"verdict": "supported", "rule": "old"}}
    records.record_with_spread(_doc({"x": e}, v_new), {records.RECORDED: _doc({"x": e}, v_old)})
    with pytest.raises(records.RecordError, match="verdict C"):
        records.record_with_spread(_doc({"x": e}, v_new), {"avx2": _doc({"x": e}, v_old)})


def test_the_replaced_record_may_lack_parameters_added_since_but_no_other():
    e = {"value": 1.0, "rtol": 0.0, "atol": 0.0, "note": "a ratio"}
    now = {**_doc({"x": e}), "params": {"a": 1, "new": 3}}
    old = {**_doc({"x": {**e, "rtol": 0.5}}), "params": {"a": 1}}
    x = records.record_with_spread(now, {records.RECORDED: old})["values"]["x"]
    assert x["rtol"] == pytest.approx(0.5)
    with pytest.raises(records.RecordError, match="other parameters"):
        records.record_with_spread(now, {records.RECORDED: {**old, "params": {"a": 2}}})
    with pytest.raises(records.RecordError, match="other parameters"):
        records.record_with_spread(now, {"avx2": old})


def test_an_integer_read_against_a_line_keeps_one_step_and_its_side():
    ch = _Ch()
    checks.against(ch, "layer", -1, limits=(-0.5,), atol=1)  # "never collapsed" against "collapsed at l"
    e = ch.results.values["layer"]
    x = records.record_with_spread(_doc({"layer": e}), {"avx2": _doc({"layer": e})})["values"]["layer"]
    assert x["atol"] == 1 and records.kind_violations(_doc({"layer": x})) == []
    assert not records.compare(_doc({"layer": x}), _doc({"layer": {**e, "value": 0}}))[0].ok  # crossed
    far = {**e, "value": 5, "atol": 4.0}
    y = records.record_with_spread(_doc({"layer": far}), {"avx2": _doc({"layer": far})})["values"]["layer"]
    assert y["atol"] == 4 and records.kind_violations(_doc({"layer": {**y, "atol": 6.0}}))


def test_fragile_text_reads_the_record_entry(tmp_path, monkeypatch):
    class _Page:
        name, params, glued = "t", {"profile": "smoke"}, {}

        def glue(self, k, v):
            self.glued[k] = v

    monkeypatch.setenv("RCBOOK_EXPECTED", str(tmp_path))
    ch = _Page()
    assert "not yet recorded" in checks.fragile_text(ch, "x")  # no record at all
    (tmp_path / "smoke").mkdir()
    vals = {
        "a": {"value": 0.52, "rtol": 0.0, "atol": 0.02, "limits": [0.5], "margin": 0.02, "fragile": True},
        "b": {"value": 0.9, "rtol": 0.0, "atol": 0.01, "limits": [0.5], "margin": 0.4, "fragile": False},
        "c": {"value": 0.9, "rtol": 0.0, "atol": 0.01},
    }
    (tmp_path / "smoke" / "t.json").write_text(json.dumps(_doc(vals)))
    assert checks.fragile_text(ch, "a").startswith("Fragile:")
    assert ch.glued["a_fragile"].startswith("Fragile:")
    assert "stays inside" in checks.fragile_text(ch, "b")
    assert "not yet recorded" in checks.fragile_text(ch, "c")
