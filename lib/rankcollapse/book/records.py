"""Comparing, checking and recording results files (the runner's side of :mod:`rankcollapse.book.results`).

* :func:`compare` -- a fresh results file against the recorded one, value by value, each within its recorded
  tolerance; verdicts exactly.
* :func:`load_checked` -- a results file with every field the comparison reads (:class:`MalformedRecord`,
  naming the file and the key, otherwise).
* :func:`derive_tolerance` / :func:`record_with_spread` -- the rule that turns the spread measured between
  floating-point kernel variants (:mod:`rankcollapse.book.kernels`) into every recorded tolerance.
* :func:`largest_deviation` -- the value that moved most between two files.

Nothing here runs inside a chapter, so editing it re-executes no chapter.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import kernels
from .params import HOW_NOT_WHAT
from .results import expected_path, load  # noqa: F401  (re-exported: the runner reads results files through this module)


class MalformedRecord(ValueError):
    """A results file that cannot be read or lacks a field; the message names the file and the key."""


def load_checked(path: Path) -> dict:
    """A results file, with every field :func:`compare` reads present (:class:`MalformedRecord`
    otherwise)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MalformedRecord(f"{path}: not a readable results file ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict):
        raise MalformedRecord(f"{path}: not a results file (a JSON object is expected)")
    for field_ in ("values", "verdicts"):
        if not isinstance(doc.get(field_), dict):
            raise MalformedRecord(f"{path}: key '{field_}' is missing or not an object")
    for name, e in doc["values"].items():
        for k in ("value", "rtol", "atol"):
            if not isinstance(e, dict) or k not in e:
                raise MalformedRecord(f"{path}: value '{name}' lacks '{k}'")
        for k in ("rtol", "atol"):
            if not _is_num(e[k]) or e[k] < 0:
                raise MalformedRecord(
                    f"{path}: value '{name}' has {k} = {e[k]!r} (a number >= 0 is expected)"
                )
        kind = e.get("kind")
        if kind is not None and kind not in KINDS:
            raise MalformedRecord(f"{path}: value '{name}' has kind {kind!r}; known: {', '.join(KINDS)}")
        if kind is not None and KINDS[kind] not in e:
            raise MalformedRecord(f"{path}: value '{name}' of kind '{kind}' lacks '{KINDS[kind]}'")
    for cid, v in doc["verdicts"].items():
        if not isinstance(v, dict) or "verdict" not in v:
            raise MalformedRecord(f"{path}: verdict '{cid}' lacks 'verdict'")
    return doc


# -- comparison ------------------------------------------------------------------------
@dataclass
class Row:
    name: str
    recorded: Any
    now: Any
    tolerance: str
    ok: bool


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(_close(a[k], b[k], rtol, atol) for k in a)
        )
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(_close(x, y, rtol, atol) for x, y in zip(a, b))
        )
    if isinstance(a, (bool, str)) or a is None or isinstance(b, (bool, str)) or b is None:
        return a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * abs(a)


HOW_RUN = (*HOW_NOT_WHAT, "device")  # never compared with the record (params.HOW_NOT_WHAT)


def compare(recorded: dict, now: dict) -> list[Row]:
    """Rows of (name, recorded, now, tolerance, ok) for every recorded value and verdict.

    Tolerances are the recorded ones. A value missing from either side fails, and so
    does a run whose parameters differ from the recorded run's.
    """
    rows: list[Row] = []
    rp, np_ = recorded.get("params", {}), now.get("params", {})
    if {k: v for k, v in rp.items() if k not in HOW_RUN} != {
        k: v for k, v in np_.items() if k not in HOW_RUN
    }:
        diff = sorted(k for k in set(rp) | set(np_) if k not in HOW_RUN and rp.get(k) != np_.get(k))
        rows.append(
            Row("params", {k: rp.get(k) for k in diff}, {k: np_.get(k) for k in diff}, "equal", False)
        )
    rv, nv = recorded.get("values", {}), now.get("values", {})
    for name in list(rv) + [n for n in nv if n not in rv]:
        if name not in rv:
            rows.append(Row(name, "(not recorded)", nv[name]["value"], "-", False))
            continue
        rec = rv[name]
        if rec.get("absent_seen") is not None:  # a value some kernel variants did not give: kernel-fragile
            got = nv[name]["value"] if name in nv else "(absent)"
            why = f"absent under {', '.join(rec['absent_seen'])}: not checked"
            rows.append(Row(name, rec["value"], got, why, True))
            continue
        tol = f"rtol={rec['rtol']:g} atol={rec['atol']:g}"
        if rec.get("kind") == "count":
            tol = f"+-{rec['atol']:g} (a count)"
        elif rec.get("kind") == "exact":
            tol = "exact"
        if name not in nv:
            rows.append(Row(name, rec["value"], "(missing)", tol, False))
            continue
        if rec.get("unchecked"):
            rows.append(Row(name, rec["value"], nv[name]["value"], "not checked", True))
            if rec.get("summary") is not None:
                sm = rec["summary"]
                now_s = event_summary(nv[name]["value"])
                ok = now_s is not None and _close(sm["value"], now_s, sm["rtol"], sm["atol"])
                st = f"rtol={sm['rtol']:g} atol={sm['atol']:g}"
                rows.append(Row(f"{name} (summary over events)", sm["value"], now_s, st, ok))
            continue
        if rec.get("seen") is not None:  # kernel-fragile: any outcome a kernel variant gave, no other
            rows.append(_seen_row(name, rec["value"], nv[name]["value"], rec["seen"]))
            continue
        if rec.get("kind") in ("floor", "log"):
            rows.append(_compare_kind(name, rec, nv[name]))
            continue
        if rec.get("kind") == "count" and rec.get("proportion") is not None:
            rows.append(_compare_proportion(name, rec, nv[name]))
            continue
        lims = rec.get("limits") or ()
        ok = _close(rec["value"], nv[name]["value"], rec["rtol"], rec["atol"])
        if lims:  # a value a rule reads against lines: also on the same side of every one
            ok = ok and same_side(rec["value"], nv[name]["value"], lims)
            tol += f", same side of {', '.join(f'{x:g}' for x in lims)}"
            ok, said = held_away(
                ok,
                rec["value"],
                nv[name]["value"],
                lims,
                rec.get("away"),
                lambda aw: _close(rec["value"], nv[name]["value"], aw["rtol"], aw["atol"]),
                lambda aw: f"rtol={aw['rtol']:g} atol={aw['atol']:g}",
            )
            tol += said
        rows.append(Row(name, rec["value"], nv[name]["value"], tol, ok))
    rd, nd = recorded.get("verdicts", {}), now.get("verdicts", {})
    for cid in list(rd) + [c for c in nd if c not in rd]:
        r = rd.get(cid, {}).get("verdict", "(not recorded)")
        n = nd.get(cid, {}).get("verdict", "(missing)")
        rows.append(_seen_row(f"verdict {cid}", r, n, rd.get(cid, {}).get("seen")))
        rc, nc = rd.get(cid, {}).get("control"), nd.get(cid, {}).get("control")
        if rc or nc:  # the same rule on the claim's control: its outcome is part of the evidence
            a = rc["verdict"] if rc else "(not recorded)"
            b = nc["verdict"] if nc else "(missing)"
            rows.append(_seen_row(f"verdict {cid} on its control", a, b, (rc or {}).get("seen")))
    return rows


def seen_text(seen: dict) -> str:
    """The outcomes a kernel-fragile entry saw, each once: ``'supported' (this run, avx2) or ...``."""
    by: dict[str, list[str]] = {}
    for variant, x in seen.items():
        by.setdefault(json.dumps(x), []).append(variant)
    return " or ".join(f"{json.loads(k)!r} ({', '.join(vs)})" for k, vs in by.items())


def _seen_row(name: str, recorded: Any, now: Any, seen: dict | None) -> Row:
    """The row of a verdict, a control's verdict or a non-numeric value: equal to the recorded one, or,
    where the record is kernel-fragile (``seen``), one of the outcomes its kernel variants gave; both
    compared as recorded (:func:`_same`)."""
    if seen:
        ok = any(_same(now, x) for x in seen.values())
        return Row(name, recorded, now, f"one of {seen_text(seen)} (kernel-fragile)", ok)
    return Row(name, recorded, now, "equal", _same(recorded, now))


def kernel_fragile(verdict: dict | None) -> dict | None:
    """``{"verdict": seen or None, "control": seen or None}`` of a recorded verdict that differs between
    kernel variants (:func:`record_with_spread` with ``fragile``), None when it and its control held."""
    if not verdict:
        return None
    a, b = verdict.get("seen"), (verdict.get("control") or {}).get("seen")
    return {"verdict": a, "control": b} if a or b else None


# -- values of a kind: counts, values at the float floor, ratios read in decades ---------------------------
# A chapter marks a value's kind when it records it (rankcollapse.book.checks); each kind has one rule, fixed
# here, for its tolerance and its check:
#
# * ``count`` (field ``of``: out of how many, or None): an integer that moves when a network on a knife-edge
#   falls the other way. Its tolerance is max(1, the largest deviation measured between kernel variants), the
#   same rule for every count: never exact because no spread was measured, never widened by a factor.
# * ``floor`` (field ``floor``: the float floor the chapter compares it with, such as eps32 x |W|, a number
#   or one per leaf): a value the chapter itself calls numerically zero. Its size is round-off, so it is
#   checked as what it is: below its floor, on the recorded run, under every variant of the spread, and now.
# * ``log`` (field ``decades``): a ratio read on a log scale (a floor against a healthy value), checked as
#   |log10 now - log10 recorded| <= decades; the tolerance is max(the chapter's stated decades, SAFETY x the
#   largest deviation in decades measured between kernel variants). Where a rule reads the value against
#   lines (field ``limits``: the thresholds), the tolerance is never wider than the value's margin to the
#   nearest line in decades (field ``margin``), the check also requires it on the same side of every line,
#   and the entry is ``fragile`` when the measured deviation itself reaches the margin.
# * ``exact`` (field ``why``: what fixes it, the parameters or a theorem): an integer no rounding can move,
#   held exactly; recording refuses it when it moved between kernel variants (it is then a count).
# Every other integer-only value is a count in all but name: :func:`kind_violations` refuses one held to
# less than one event, so that no count is exact just because no spread was measured for it.
KINDS = {"count": "of", "floor": "floor", "log": "decades", "exact": "why"}


def _pairs(v: Any, bound: Any):
    """(leaf of ``v``, its bound): ``bound`` is one number for every leaf, or a value of ``v``'s shape."""
    leaves = [x for _, x in _leaves(v)]
    if _is_num(bound) or bound is None:
        return [(x, bound) for x in leaves]
    bl = [x for _, x in _leaves(bound)]
    if len(bl) != len(leaves):
        return [(x, None) for x in leaves]
    return list(zip(leaves, bl))


def below_floor(v: Any, floor: Any) -> bool:
    """Whether every numeric leaf of ``v`` is finite and at most its floor in size."""
    pairs = _pairs(v, floor)
    return bool(pairs) and all(
        _is_num(x) and _is_num(f) and math.isfinite(float(x)) and abs(float(x)) <= float(f) for x, f in pairs
    )


def decades_apart(a: Any, b: Any) -> float:
    """The largest |log10 b - log10 a| over the leaves of two values of one shape (0 where both are 0; inf
    where the shapes differ, a leaf is not a positive finite number, or one is 0 and the other not)."""
    la, lb = [x for _, x in _leaves(a)], [x for _, x in _leaves(b)]
    if len(la) != len(lb) or not la:
        return math.inf
    worst = 0.0
    for x, y in zip(la, lb):
        if not (_is_num(x) and _is_num(y)):
            return math.inf
        x, y = float(x), float(y)
        if x == 0.0 and y == 0.0:
            continue
        if not (x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)):
            return math.inf
        worst = max(worst, abs(math.log10(y) - math.log10(x)))
    return worst


def margin_decades(v: Any, limits) -> float:
    """The smallest |log10 leaf - log10 line| over the numeric leaves of ``v`` and the ``limits`` (inf when
    there is no line; 0 when a leaf is not a positive number)."""
    worst = math.inf
    for _, x in _leaves(v):
        for lim in limits or ():
            if not (_is_num(x) and float(x) > 0 and math.isfinite(float(x))):
                return 0.0
            worst = min(worst, abs(math.log10(float(x)) - math.log10(float(lim))))
    return worst


def same_side(a: Any, b: Any, limits) -> bool:
    """Whether every leaf of ``b`` is on the same side of every line in ``limits`` as that leaf of ``a``."""
    la, lb = [x for _, x in _leaves(a)], [x for _, x in _leaves(b)]
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if not (_is_num(x) and _is_num(y)):
            return False
        if any((float(x) < lim) != (float(y) < lim) for lim in limits or ()):
            return False
    return True


def margin_abs(v: Any, limits) -> list[float]:
    """Per numeric leaf of ``v``, its distance to the nearest line in ``limits`` (inf without lines)."""
    out = []
    for _, x in _leaves(v):
        if _is_num(x) and math.isfinite(float(x)):
            out.append(min((abs(float(x) - float(lim)) for lim in limits or ()), default=math.inf))
    return out


def moved_away(a: Any, b: Any, limits) -> bool:
    """Whether ``b`` lies on the same side of every line in ``limits`` as ``a``, and each numeric leaf of
    ``b`` at least as far from its nearest line as that leaf of ``a``."""
    if not same_side(a, b, limits):
        return False
    ma, mb = margin_abs(a, limits), margin_abs(b, limits)
    return len(ma) == len(mb) and all(y >= x for x, y in zip(ma, mb))


def held_away(ok: bool, was: Any, now: Any, limits, measured: Any, holds, said) -> tuple[bool, str]:
    """The check of a value whose tolerance was capped at its rule's lines (:func:`cap_at_lines`), once it
    failed the capped one (``ok`` false): if it moved away from every line (:func:`moved_away`), the
    tolerance ``measured`` between the kernel variants before the cap (the record's ``away`` or
    ``away_decades``) holds it instead, since a move away changes no reading of the rule. ``holds(measured)``
    applies that tolerance, ``said(measured)`` words it. Returns the outcome and the words for the row."""
    if ok or not measured or not moved_away(was, now, limits):
        return ok, ""
    return bool(holds(measured)), f" (moved away from them: {said(measured)})"


def _int_leaves(v: Any) -> bool:
    leaves = [x for _, x in _leaves(v)]
    return bool(leaves) and all(isinstance(x, int) and not isinstance(x, bool) for x in leaves)


def cap_at_lines(entry: dict, measured_abs: float) -> tuple[dict, str]:
    """``entry``'s tolerance (rtol, atol) capped so that no leaf's tolerance reaches past its recorded
    distance to the nearest of its rule's lines (field ``limits``); with ``margin`` (the smallest distance)
    and ``fragile`` (the largest deviation measured between kernel variants, ``measured_abs``, reaches it).
    An integer-only value moves by whole steps: it keeps +-1 (the same-side check then holds it to its side
    of a half-integer line) and is capped at the whole steps its margin allows beyond that. Returns the
    entry and a sentence for its note."""
    lims = entry.get("limits") or ()
    if not lims:
        return entry, ""
    out = dict(entry)
    leaves = [float(x) for _, x in _leaves(entry["value"]) if _is_num(x) and math.isfinite(float(x))]
    margins = margin_abs(entry["value"], lims)
    m = min(margins, default=math.inf)
    out["margin"] = m
    out["fragile"] = bool(measured_abs >= m)
    rtol, atol = float(out.get("rtol", 0.0)), float(out.get("atol", 0.0))
    # the cap bounds a move toward a line; a move away from every line keeps the measured tolerance (field
    # ``away``): a value that moved away changes no reading of the rule, and is still held to its spread
    away = {"rtol": rtol, "atol": atol}
    capped = False
    if _int_leaves(entry["value"]):  # integers move by whole steps: the same-side check holds the line
        if rtol > 0 or atol > max(1.0, math.floor(m)):
            capped, rtol, atol = True, 0.0, min(max(atol, 1.0), max(1.0, math.floor(m)))
    elif leaves and any(atol + rtol * abs(x) > mi for x, mi in zip(leaves, margins)):
        capped = True
        atol = min(atol, m)
        room = [(mi - atol) / abs(x) for x, mi in zip(leaves, margins) if x != 0]
        rtol = max(0.0, min([rtol, *room]))
    out["rtol"], out["atol"] = rtol, atol
    if capped:
        out["away"] = away
    text = f"margin {m:.3g} to the rule's line(s) {', '.join(f'{x:g}' for x in lims)}"
    if capped:
        text = f"capped at its {text}"
    if out["fragile"]:
        text += "; FRAGILE: the measured deviation reaches its margin"
    return out, text


def _compare_kind(name: str, rec: dict, now: dict) -> Row:
    """The check of a value of kind ``floor`` or ``log`` (:data:`KINDS`)."""
    if rec["kind"] == "floor":
        floor = now.get("floor", rec["floor"])  # the floor of this run's own weights, else the recorded one
        return Row(
            name,
            rec["value"],
            now["value"],
            f"below its floor {format_value(floor)}",
            below_floor(now["value"], floor),
        )
    d = decades_apart(rec["value"], now["value"])
    lims = rec.get("limits") or ()
    ok = d <= rec["decades"] and same_side(rec["value"], now["value"], lims)
    how = f"within {rec['decades']:.3g} decades" + (
        f", same side of {', '.join(f'{x:g}' for x in lims)}" if lims else ""
    )
    ok, said = held_away(
        ok,
        rec["value"],
        now["value"],
        lims,
        rec.get("away_decades"),
        lambda aw: d <= aw,
        lambda aw: f"within {aw:.3g} decades",
    )
    how += said
    return Row(name, rec["value"], now["value"], how, ok)


def kind_mode(entry: dict, other_entries: dict[str, dict]) -> str:
    """How a value of a kind is recorded against the same value under the other variants: "events" (one
    entry per settled event, and another set of events settled under some variant: kept for reading,
    unchecked), "share" (a count out of a number of trials that moves between variants: checked as a share,
    :func:`_as_proportion`) or "plain" (by its kind's rule)."""
    if entry["kind"] != "exact" and spread(entry["value"], [e["value"] for e in other_entries.values()]).get(
        "events"
    ):
        return "events"
    if entry["kind"] == "count" and _trials_move(entry, other_entries):
        return "share"
    return "plain"


def derive_kind(
    name: str,
    entry: dict,
    other_entries: dict[str, dict],
    carried: dict | None = None,
    mode: str | None = None,
) -> dict:
    """The recorded entry of a value of a kind (:data:`KINDS`), its tolerance from the entries of the same
    value under the other variants (``{variant: entry}``) by that kind's rule. ``carried``: the replaced
    record's entry of the same value measured the same way (:func:`same_measure`), whose tolerance is kept as
    a floor (it was measured over another host's variants), never past a rule's line. ``mode``:
    :func:`kind_mode`'s, when the caller has decided it already."""
    kind, variants = entry["kind"], list(other_entries)
    mode = mode or kind_mode(entry, other_entries)
    base = entry.get("note", "").split(" || measured:")[0]
    out = {k: v for k, v in entry.items() if k not in ("spread",)}
    if mode == "events":
        # one entry per event, and another set of events settled under some variant: no entry of one run
        # has a counterpart in the other, so nothing per event can be compared; what is built on it is
        return _unchecked(
            entry,
            [],
            variants,
            f"its events (one entry per settled event) differ between kernel variants ({_names(variants)}): "
            f"recorded for reading, not checked on another machine; the values and verdicts built on it "
            f"(its medians, the count of events) are checked as their own kinds",
            summary=False,
            keep=("kind", KINDS[kind]),
        )
    if kind == "exact":
        moved = [vn for vn, e in other_entries.items() if e["value"] != entry["value"]]
        if moved:
            raise RecordError(
                f"value '{name}' is marked exact ({entry['why']}) but moved under {_names(moved)} "
                f"({format_value(entry['value'])} here): record it as a count"
            )
        out.update(rtol=0.0, atol=0.0)
        meas = f"identical under every kernel variant ({_names(variants)}); held exactly: {entry['why']}"
    elif kind == "floor":
        for vn, e in {"this run": entry, **other_entries}.items():
            if not below_floor(e["value"], e.get("floor", entry["floor"])):
                raise RecordError(
                    f"value '{name}' is marked as at the float floor but is above its floor under {vn} "
                    f"({format_value(e['value'])} against {format_value(e.get('floor', entry['floor']))}): "
                    "record it as a measured value"
                )
        out.update(rtol=0.0, atol=0.0)
        meas = f"below its floor under every kernel variant ({_names(variants)}); checked as below the floor"
    elif kind == "log":
        d = max((decades_apart(entry["value"], e["value"]) for e in other_entries.values()), default=0.0)
        if not math.isfinite(d):
            raise RecordError(
                f"value '{name}' (read in decades) is not a positive number under every variant"
            )
        tol = max(float(entry["decades"]), SAFETY * d, float(carried.get("decades", 0)) if carried else 0.0)
        out.update(rtol=0.0, atol=0.0)
        meas = (
            f"max deviation over {len(variants)} kernel variant(s) ({_names(variants)}): {d:.2g} decades; "
            f"tolerance {tol:.2g} decades (rule: max(stated, {SAFETY:g} x measured))"
        )
        lims = entry.get("limits") or ()
        if lims:
            m = margin_decades(entry["value"], lims)
            out["margin"] = m
            out["fragile"] = bool(d >= m)
            if tol > m:
                # the cap bounds a move toward a line; a move away from every line keeps the measured
                # tolerance (field ``away_decades``), as :func:`cap_at_lines` keeps ``away``
                out["away_decades"] = tol
                tol = m
                meas += f", capped at its margin to the rule's line(s) {', '.join(f'{x:g}' for x in lims)}"
            if out["fragile"]:
                meas += f"; FRAGILE: the measured deviation reaches its margin ({m:.2g} decades)"
            else:
                meas += f"; margin {m:.2g} decades"
        out["decades"] = tol
    elif mode == "share":
        out, meas = _as_proportion(out, entry, other_entries, variants, carried)
    else:  # count: an integer, or a mapping of integers (the largest move over its keys)
        base_l = dict(_leaves(entry["value"]))
        moved = 0
        for e in [entry, *other_entries.values()]:
            vl = dict(_leaves(e["value"]))
            if set(vl) != set(base_l) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in [*vl.values(), *base_l.values()]
            ):
                raise RecordError(
                    f"value '{name}' is marked as a count but is not an integer under every variant"
                )
            moved = max([moved, *(abs(vl[p] - base_l[p]) for p in base_l)])
        tol = max(1, moved, int(carried.get("atol", 0)) if carried else 0)
        meas = (
            f"moved by {moved} over {len(variants)} kernel variant(s) ({_names(variants)}); tolerance "
            f"+-{tol} (rule for every count: max(1, measured"
            + (", the replaced record's)" if carried and tol > max(1, moved) else ")")
            + ")"
        )
        lims = entry.get("limits") or ()
        if lims:
            m = min(margin_abs(entry["value"], lims), default=math.inf)
            out["margin"] = m
            out["fragile"] = bool(moved >= m)
            if tol > max(1, m):  # never past the rule's line by more than the +-1 every count has
                tol = max(1, math.floor(m))
                meas += (
                    f", capped at its margin {m:g} to the rule's line(s) {', '.join(f'{x:g}' for x in lims)}"
                )
            else:
                meas += f"; margin {m:g} to the rule's line(s) {', '.join(f'{x:g}' for x in lims)}"
            if out["fragile"]:
                meas += "; FRAGILE: it moved as far as its margin between kernel variants"
        out.update(rtol=0.0, atol=float(tol))
    out["note"] = (base + " || measured: " + meas).lstrip(" |")
    out["spread"] = {"variants": variants}
    return out


def _of_leaves(e: dict) -> dict | None:
    """A count entry's number of trials per leaf of its value (``of``: one number, or one per leaf); None
    where it does not say (no ``of``, or one of another shape)."""
    of, vl = e.get("of"), dict(_leaves(e["value"]))
    if isinstance(of, (int, float)) and not isinstance(of, bool):
        return {p: of for p in vl}
    ol = dict(_leaves(of)) if isinstance(of, (dict, list)) else {}
    return ol if set(ol) == set(vl) and all(_is_num(x) for x in ol.values()) else None


def _trials_move(entry: dict, other_entries: dict[str, dict]) -> bool:
    """Whether a count's number of trials (``of``) differs between kernel variants: another set of events
    settled, so each variant counts out of its own number."""
    mine = _of_leaves(entry)
    theirs = [_of_leaves(e) for e in other_entries.values()]
    return mine is not None and all(t is not None for t in theirs) and any(t != mine for t in theirs)


def _shares(e: dict) -> dict:
    """A count entry's share per leaf (count / trials; 0 where there were no trials)."""
    of = _of_leaves(e) or {}
    return {p: (k / of[p] if of.get(p) else 0.0) for p, k in _leaves(e["value"])}


def _sides(e: dict) -> list | None:
    """Per leaf and line, on which side of its own rule's lines a count lies (None without lines)."""
    lims = e.get("limits") or ()
    if not lims:
        return None
    return [[k > lim for lim in lims] for _, k in _leaves(e["value"])]


def _as_proportion(
    out: dict, entry: dict, other_entries: dict, variants: list, carried: dict | None
) -> tuple[dict, str]:
    """A count whose number of trials moves between kernel variants, recorded as the share it is
    (``proportion``: its tolerance in shares): max(one trial of this run, the largest share moved between
    variants, the replaced record's). Its lines are each run's own (they are set from its number of
    trials, such as "more than half of the events"), so they are kept as ``own_limits``, and the check asks
    of a rebuild that it lie on the same side of its own lines as this run of its; where a variant already
    lies on the other side, the entry is ``fragile`` and no side is asked (the verdict built on it is then
    kernel-fragile, :func:`record_with_spread`). Returns the entry and what was measured, for its note."""
    mine = _shares(entry)
    moved = max(
        (abs(_shares(e)[p] - x) for e in other_entries.values() for p, x in mine.items()), default=0.0
    )
    least = min((n for n in (_of_leaves(entry) or {}).values() if n), default=1)
    tol = max(1.0 / least, moved, float((carried or {}).get("proportion", 0.0)))
    out = {k: v for k, v in out.items() if k != "limits"}
    out.update(rtol=0.0, atol=0.0, proportion=tol)
    meas = (
        f"counted out of another number of trials under some kernel variant(s) ({_names(variants)}): "
        f"checked as a share; moved by {moved:.3g} in share; tolerance {tol:.3g} (max(one trial of this "
        "run, measured))"
    )
    sides = _sides(entry)
    if sides is not None:
        out["own_limits"] = list(entry["limits"])
        crossed = [vn for vn, e in other_entries.items() if _sides(e) is not None and _sides(e) != sides]
        out["fragile"] = bool(crossed)
        out["sides"] = None if crossed else sides
        meas += (
            f"; FRAGILE: under {_names(crossed)} it lies on the other side of its own rule's line(s)"
            if crossed
            else "; on the same side of its own rule's lines under every variant, and checked so"
        )
    return out, meas


def _compare_proportion(name: str, rec: dict, now: dict) -> Row:
    """A count recorded as a share (:func:`_as_proportion`) against a rebuild's count out of its trials."""
    a, b = _shares(rec), _shares(now) if _of_leaves(now) is not None else None
    ok = (
        b is not None
        and a.keys() == b.keys()
        and all(abs(b[p] - a[p]) <= rec["proportion"] + 1e-12 for p in a)
    )
    how = f"share within {rec['proportion']:.3g}"
    if rec.get("sides") is not None:
        ok = ok and _sides(now) == rec["sides"]
        how += ", on the same side of its own rule's lines"
    return Row(name, rec["value"], now["value"], how, ok)


def kind_violations(doc: dict) -> list[str]:
    """What in a record breaks its kinds' rules (:data:`KINDS`): a value below its own floor held to a
    relative tolerance (not marked as a floor value, nor read in decades), a count held tighter than one
    event, an integer held exactly without being marked exact, a ratio in decades with no decades or wider
    than its margin to its rule's lines."""
    bad = []
    for name, e in doc.get("values", {}).items():
        if "floor" in e and (e.get("kind") not in ("floor", "log") or e.get("rtol", 0) > 0):
            if below_floor(e["value"], e["floor"]):
                bad.append(
                    f"{name}: below its floor {format_value(e['floor'])} but held to rtol {e['rtol']:g}"
                )
        if e.get("kind") == "count" and e.get("proportion") is not None:
            least = min((n for n in (_of_leaves(e) or {}).values() if n), default=1)
            if e["proportion"] < 1.0 / least - 1e-12:
                bad.append(
                    f"{name}: a count held as a share to {e['proportion']:g} (< one trial, 1/{least:g})"
                )
        elif (
            e.get("kind") == "count"
            and not e.get("unchecked")  # kept for reading only (absent under some kernels): held to nothing
            and (e.get("atol", 0) < 1 or e.get("rtol", 0) > 0)
        ):
            bad.append(
                f"{name}: a count held to atol {e.get('atol', 0):g} rtol {e.get('rtol', 0):g} (< +-1)"
            )
        leaves = [x for _, x in _leaves(e["value"])]
        if (
            e.get("kind") not in ("count", "exact")
            and leaves
            and all(isinstance(x, int) and not isinstance(x, bool) for x in leaves)
            and e.get("atol", 0) < 1
            and not e.get("unchecked")
        ):
            bad.append(
                f"{name}: an integer held to atol {e.get('atol', 0):g} with no kind: a count "
                "(checks.count, +-max(1, measured)) or exact for a stated reason (checks.exact)"
            )
        if e.get("limits") and e.get("kind") not in ("log", "floor"):
            margins = margin_abs(e["value"], e["limits"])
            leaves = [float(x) for _, x in _leaves(e["value"]) if _is_num(x) and math.isfinite(float(x))]
            if e.get("kind") == "count" or _int_leaves(e["value"]):  # whole steps, held to their side
                if e.get("atol", 0) > 1 and e["atol"] > min(margins, default=math.inf):
                    bad.append(
                        f"{name}: a count held to +-{e['atol']:g}, wider than its margin "
                        f"{min(margins):g} to its rule's line(s)"
                    )
            elif any(
                e.get("atol", 0) + e.get("rtol", 0) * abs(x) > mi * (1 + 1e-9)
                for x, mi in zip(leaves, margins)
            ):
                bad.append(
                    f"{name}: its tolerance reaches past its margin {min(margins):.3g} to its rule's lines"
                )
        if e.get("kind") == "log" and not e.get("decades", 0) > 0:
            bad.append(f"{name}: read in decades, with decades {e.get('decades')!r}")
        if e.get("kind") == "log" and e.get("limits"):
            m = margin_decades(e["value"], e["limits"])
            if e.get("decades", 0) > m * (1 + 1e-9):
                bad.append(f"{name}: {e['decades']:.3g} decades, wider than its margin {m:.3g} to its rule")
    return bad


def format_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        s = "[" + ", ".join(format_value(x) for x in v[:4]) + (", ..." if len(v) > 4 else "") + "]"
        return s
    if isinstance(v, dict):
        return json.dumps(v)[:60]
    return str(v)


# -- tolerances from measured spread ----------------------------------------------------------------
# The rule that turns the spread measured between kernel variants into the tolerance a recorded value is
# checked with on another machine. It is fixed here, before any result, and written into every note.
SAFETY = 4.0  # tolerance = SAFETY x the largest deviation seen (a few variants underestimate the spread)
MIN_RTOL = 1e-6  # a float with no measured deviation still may differ in its last float32 digits elsewhere
EPS64 = 2.220446049250313e-16
FLOOR = 1e-13  # |value| below this (about 450 float64 epsilons) is a round-off floor, not signal
FLOOR_ATOL = 1e-12  # ... and is checked against the floor: |now| <= about 4500 epsilons


class RecordError(ValueError):
    """A chapter's results cannot be recorded: a verdict or a non-numeric value differs between kernel
    variants."""


def _leaves(v: Any, path: str = ""):
    """(path, leaf) for every scalar in a nested value."""
    if isinstance(v, dict):
        for k in v:
            yield from _leaves(v[k], f"{path}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _leaves(x, f"{path}[{i}]")
    else:
        yield path, v


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _same_but_lengths(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` differ only in the lengths of lists (one entry per event, where another
    variant's run had another number of events) or in a number standing where the other has None: dicts
    with the same keys, lists whose common entries agree so, non-numeric leaves equal."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and all(_event_key(k) for k in a.keys() ^ b.keys())
            and all(_same_but_lengths(a[k], b[k]) for k in a if k in b)
        )
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and all(_same_but_lengths(x, y) for x, y in zip(a, b))
        )
    if _is_num(a) or _is_num(b):
        return a is None or b is None or (_is_num(a) and _is_num(b))
    return a == b


def _event_key(k: Any) -> bool:
    """Whether a dict key names an event (a seed: ``"3"``, ``"seed 3 alpha 0.3 delay 100"``), so that
    another set of events gives another set of keys."""
    k = str(k)
    return k.isdigit() or k.startswith("seed ")


def event_summary(v: Any) -> dict | None:
    """What a per-event value says over its events, whichever events they are: the leaves grouped by their
    path with every list index and every event key (:func:`_event_key`) replaced by ``*``, and per group the
    median of its numbers (``"<path> median"``), the share of true among its flags (``"<path> share"``) and,
    for numbers, the share of None among them (no outcome within the run; ``"<path> none"``).
    None when the value has no numeric or flag leaf, or a string leaf (nothing a number could summarise)."""
    groups: dict[str, list] = {}

    def walk(x: Any, path: str) -> bool:
        if isinstance(x, dict):
            return all(walk(x[k], f"{path}.{'*' if _event_key(k) else k}") for k in x)
        if isinstance(x, list):
            return all(walk(y, f"{path}[*]") for y in x)
        if isinstance(x, str):
            return False
        groups.setdefault(path or "(value)", []).append(x)
        return True

    if not walk(v, "") or not groups:
        return None
    out: dict[str, Any] = {}
    for path, xs in sorted(groups.items()):
        flags = [x for x in xs if isinstance(x, bool)]
        nums = sorted(float(x) for x in xs if _is_num(x) and math.isfinite(float(x)))
        if flags:
            out[f"{path} share"] = sum(flags) / len(flags)
        if nums:
            m = len(nums) // 2
            out[f"{path} median"] = nums[m] if len(nums) % 2 else (nums[m - 1] + nums[m]) / 2
        if len(flags) < len(xs):  # numbers or None: the share of no outcome, 0.0 where every entry has one
            out[f"{path} none"] = sum(x is None for x in xs) / len(xs)
    return out or None


def spread(ref: Any, others: list) -> dict:
    """Deviation of ``others`` (the same value from other kernel variants) from ``ref``.

    Returns ``{"abs": largest |other - ref| over all numeric leaves, "rel": largest relative deviation over
    the leaves above the round-off floor, "floor": whether any leaf sits at the floor, "int_only": every leaf
    an integer, "mismatch": path of the first non-numeric leaf (or structure) that differs, else None}``."""
    ref_leaves = list(_leaves(ref))
    out = {
        "abs": 0.0,
        "rel": 0.0,
        "floor_abs": 0.0,
        "floor": False,
        "int_only": all(isinstance(x, int) and not isinstance(x, bool) for _, x in ref_leaves),
        "mismatch": None,
    }
    for _, x in ref_leaves:
        if _is_num(x) and not isinstance(x, int) and math.isfinite(x) and abs(x) < FLOOR:
            out["floor"] = True
    for o in others:
        ol = list(_leaves(o))
        if [p for p, _ in ol] != [p for p, _ in ref_leaves]:
            if _same_but_lengths(ref, o):  # a list per event, and another number of events
                out["events"] = True
            else:
                out["mismatch"] = out["mismatch"] or "(structure)"
            continue
        for (p, a), (_, b) in zip(ref_leaves, ol):
            if _is_num(a) and _is_num(b):
                a, b = float(a), float(b)
                if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
                    if not (a == b or (math.isnan(a) and math.isnan(b))):
                        out["mismatch"] = out["mismatch"] or (p or "(value)")
                    continue
                d = abs(a - b)
                out["abs"] = max(out["abs"], d)
                if abs(a) >= FLOOR:
                    out["rel"] = max(out["rel"], d / abs(a))
                else:  # the reference sits at the round-off floor: only an absolute tolerance can hold it
                    out["floor_abs"] = max(out["floor_abs"], d)
            elif (a is None) != (b is None) and (_is_num(a) or _is_num(b)):
                out["kind"] = out.get("kind") or (p or "(value)")  # a number in one variant, None in another
            elif a != b:
                out["mismatch"] = out["mismatch"] or (p or "(value)")
    return out


def _unchecked(
    entry: dict, others: list, variants: list[str], why: str, summary: bool = True, keep: tuple = ()
) -> dict:
    """The recorded entry kept for reading and not checked, its note saying ``why``, with ``entry``'s fields
    named in ``keep`` (a kind and its field); with, where ``summary`` and every variant's value has one of
    the same shape, its :func:`event_summary` recorded as ``summary`` and checked instead, with a tolerance
    from the summaries' own spread (:func:`derive_tolerance`)."""
    base = entry.get("note", "").split(" || measured:")[0]
    out = {
        "value": entry["value"],
        "rtol": float(entry.get("rtol", 0.0)),
        "atol": float(entry.get("atol", 0.0)),
        "unchecked": True,
        "spread": {"rel": None, "abs": None, "variants": variants},
        "note": (base + " || measured: " + why).lstrip(" |"),
    } | {k: entry[k] for k in keep if k in entry}
    summ = event_summary(entry["value"]) if summary else None
    osum = [event_summary(o) for o in others]
    if summ is not None and all(o is not None and o.keys() == summ.keys() for o in osum):
        try:
            t = derive_tolerance({**entry, "value": summ, "note": ""}, osum, variants)
        except RecordError:
            t = None
        if t is not None and not t.get("unchecked"):
            out["summary"] = {"value": summ, "rtol": t["rtol"], "atol": t["atol"]}
            out["note"] += (
                "; its summary over events (medians, shares, share of no outcome; event_summary) is checked "
                f"instead, rtol {t['rtol']:.2g} atol {t['atol']:.2g} from the summaries' spread"
            )
    return out


def _names(variants: list[str]) -> str:
    """The variants of a spread for a note; the record being replaced is said to be what it is."""
    return ", ".join("the record replaced (another host or run)" if v == RECORDED else v for v in variants)


def same_measure(a: dict, b: dict) -> bool:
    """Whether two recorded entries of one name measure the same thing the same way: the same kind, note
    (before its measured part), lines and ``of``, and the same shape (the same leaf paths). Only such an
    entry of the record being replaced (:data:`RECORDED`) widens a new one."""

    def words(e: dict) -> str:
        return str(e.get("note", "")).split(" || measured:")[0]

    return (
        a.get("kind") == b.get("kind")
        and words(a) == words(b)
        and a.get("limits") == b.get("limits")
        and a.get("of") == b.get("of")
        and [p for p, _ in _leaves(a.get("value"))] == [p for p, _ in _leaves(b.get("value"))]
    )


def derive_tolerance(
    entry: dict, others: list, variants: list[str], carried: dict | None = None, fragile: bool = False
) -> dict:
    """The recorded entry (value, rtol, atol, note) with its tolerance chosen from the measured spread.

    Rule: rtol = max(the chapter's own rtol, SAFETY x the largest relative deviation, MIN_RTOL for a
    non-integer value); atol = max(the chapter's own atol, FLOOR_ATOL when a leaf sits at the round-off
    floor); an integer-only value with no measured deviation stays exact. A non-numeric leaf (a string, a
    flag) that differs between variants cannot be given a tolerance: :class:`RecordError`, unless
    ``fragile`` and the value holds only such leaves (a previous rule's verdict, say, or a reading per term):
    then it is recorded kernel-fragile, with every outcome seen (``seen``), and checked to be one of them."""
    v = entry["value"]
    s = spread(v, others)
    plain = [v, *others]
    outcomes = all(isinstance(x, (str, bool)) or x is None for y in plain for _, x in _leaves(y))
    if s["mismatch"] is not None and fragile and outcomes:  # readings only (one, or one per term), no number
        seen = {THIS_RUN: v, **dict(zip(variants, others))}
        base = entry.get("note", "").split(" || measured:")[0]
        return {
            "value": v,
            "rtol": 0.0,
            "atol": 0.0,
            "seen": seen,
            "spread": {"rel": None, "abs": None, "variants": variants},
            "note": (
                base + " || measured: KERNEL-FRAGILE, it differs between kernel variants "
                f"({', '.join(f'{k}: {format_value(x)}' for k, x in seen.items())}); any outcome seen is "
                "accepted, no other"
            ).lstrip(" |"),
        }
    if s["mismatch"] is not None:
        raise RecordError(
            f"'{s['mismatch']}' differs between kernel variants ({', '.join(variants)}): "
            "a non-numeric result that changes with the floating-point kernels cannot be recorded"
        )
    if s.get("events"):
        # e.g. one entry per settled collapse event at full, where which seeds settle is decided by round-off
        # (measured: native 7 of 10, avx2 8 of 10, different seeds). The count of events and the verdicts
        # are recorded as values of their own and checked; the per-event list is kept for reading.
        return _unchecked(
            entry,
            others,
            variants,
            f"its length (one entry per event) differs between kernel variants ({', '.join(variants)}): "
            "another set of events settled (another length, or other event keys); recorded for reading, not "
            "checked on another machine (the count of events and the verdicts are checked)",
        )
    if s.get("kind"):
        # e.g. steps to recovery: a number where a branch recovered within its length, None where it did not.
        # The verdict built on it is compared exactly; the value itself cannot carry a numeric tolerance.
        return _unchecked(
            entry,
            others,
            variants,
            f"'{s['kind']}' is a number under some kernel variants ({', '.join(variants)}) and None "
            "under others (an outcome within the run's length); recorded for reading, not checked on "
            "another machine",
        )
    own_r, own_a = float(entry.get("rtol", 0.0)), float(entry.get("atol", 0.0))
    numeric = any(_is_num(x) for _, x in _leaves(v))
    exact_int = s["int_only"] and s["abs"] == 0
    rtol = own_r if (exact_int or not numeric) else max(own_r, SAFETY * s["rel"], MIN_RTOL)
    if s["int_only"] and s["abs"] > 0:  # a count that moved between variants: widen by the count it moved
        own_a = max(own_a, SAFETY * s["abs"])
        rtol = own_r  # by that count only: a relative widening on top let 7 events (avx2: 8) pass as 0 or 15
    atol = max(own_a, FLOOR_ATOL, SAFETY * s["floor_abs"]) if s["floor"] else own_a
    if carried and not carried.get(
        "unchecked"
    ):  # the replaced record's tolerance, from another host's spread
        rtol, atol = max(rtol, float(carried.get("rtol", 0.0))), max(atol, float(carried.get("atol", 0.0)))
    base = entry.get("note", "").split(" || measured:")[0]
    meas = (
        f"max deviation over {len(others)} kernel variant(s) ({_names(variants)}): "
        f"rel {s['rel']:.2g}, abs {s['abs']:.2g}"
    )
    if s["floor"]:
        meas += f"; leaves below {FLOOR:g} are a round-off floor, checked with atol {FLOOR_ATOL:g}"
    meas += f"; tolerance rtol {rtol:.2g} atol {atol:.2g} (rule: max(own, {SAFETY:g} x measured"
    meas += f", {MIN_RTOL:g}))" if not exact_int and numeric else ", exact when nothing moved)"
    if carried and not carried.get("unchecked"):
        meas += ", at least the replaced record's"
    out = {
        "value": v,
        "rtol": rtol,
        "atol": atol,
        "spread": {"rel": s["rel"], "abs": s["abs"], "variants": variants},
    }
    if entry.get("limits"):
        out["limits"] = entry["limits"]
        out, text = cap_at_lines(out, s["abs"])
        meas += f"; {text}"
    out["note"] = (base + " || measured: " + meas).lstrip(" |")
    return out


RECORDED = "recorded"  # the variant name of the record being replaced (rcbook record --with-recorded)
THIS_RUN = "this run"  # in a kernel-fragile entry's ``seen``: the run being recorded


def _unless_straddled(entry: dict, others: list, fragile: bool) -> tuple[dict, tuple]:
    """(``entry`` without its rule's lines, those lines) when ``fragile`` and some kernel variant put the
    value on the other side of a line than this run; else (``entry``, ()). Such a value cannot be held to
    its side of the line: its verdict is recorded kernel-fragile, and the value to its measured spread."""
    lims = tuple(entry.get("limits") or ())
    if not (fragile and lims) or all(same_side(entry["value"], o, lims) for o in others):
        return entry, ()
    return {k: v for k, v in entry.items() if k != "limits"}, lims


def _straddling(rec: dict, lims: tuple, variants: list[str]) -> dict:
    """``rec`` (derived without its lines) marked as a value the kernel variants put on both sides of the
    rule's lines ``lims``: kept as ``straddled_limits`` (``rcbook check`` does not require a side) and
    ``fragile``, with its ``margin`` to the nearest line for the page's sentence
    (:func:`rankcollapse.book.checks.fragile_text`)."""
    if not lims:
        return rec
    if rec.get("kind") == "log":
        m = margin_decades(rec["value"], lims)
    else:
        m = min(margin_abs(rec["value"], lims), default=math.inf)
    rec = {**rec, "straddled_limits": list(lims), "fragile": True, "margin": m}
    lines = ", ".join(f"{x:g}" for x in lims)
    rec["note"] = (
        f"{rec.get('note', '')}; KERNEL-FRAGILE: the kernel variants ({_names(variants)}) put it on both "
        f"sides of its rule's line(s) {lines}, so it is held to its measured spread and not to a side; the "
        "verdict it decides is recorded kernel-fragile"
    )
    return rec


def _presence_moves(doc: dict, variant_docs: dict[str, dict], fragile: bool) -> dict[str, tuple[dict, list]]:
    """The values that this run or some kernel variant (the replaced record aside) gives and another does not
    (a line a rule reads only when what it reads exists, such as a control's median over the bursts that
    dipped, where one burst dips under some kernels and settles under others; or a ratio that is NaN under
    some, where nothing it divides by was measured): ``{name: (an entry that gave it, [the runs without it,
    this run as THIS_RUN])}``. Refused (RecordError) unless ``fragile``."""
    runs = {THIS_RUN: doc} | {n: d for n, d in variant_docs.items() if n != RECORDED}
    out: dict[str, tuple[dict, list]] = {}

    def gives(d: dict, name: str) -> bool:  # NaN throughout: a number the run could not form (0 / 0, say)
        e = d.get("values", {}).get(name)
        leaves = [x for _, x in _leaves(e["value"])] if e is not None else []
        return e is not None and not (leaves and all(isinstance(x, float) and math.isnan(x) for x in leaves))

    for name in dict.fromkeys(k for d in runs.values() for k in d.get("values", {})):
        gone = [n for n, d in runs.items() if not gives(d, name)]
        if len(gone) in (0, len(runs)):
            continue  # given by every run, or undefined under every one: the same everywhere, as it is
        if not fragile:
            raise RecordError(
                f"value '{name}' of chapter '{doc['chapter']}' is missing under variant "
                f"{', '.join(repr(g) for g in gone)}"
                " (record it as kernel-fragile with --fragile)"
            )
        given = next(d["values"][name] for d in runs.values() if gives(d, name))
        out[name] = (given, gone)
    return out


def record_with_spread(doc: dict, variant_docs: dict[str, dict], fragile: bool = False) -> dict:
    """``doc`` (a results file) with every value's tolerance derived from ``variant_docs`` ({variant: results
    of the same chapter and parameters under other floating-point kernels}); verdicts must agree exactly.

    With ``fragile`` (``rcbook record --fragile``), a verdict, a control's verdict or a non-numeric value
    that differs between the variants is recorded as **kernel-fragile** instead of refused: its entry keeps
    what each variant gave (``seen``: ``{variant: outcome}``, this run as :data:`THIS_RUN`), ``rcbook check``
    accepts any outcome seen and no other, and the ledger shows the claim as decided on no machine
    (:func:`kernel_fragile`). A verdict that changes with the kernels changes on someone's machine; this
    records that finding instead of hiding it or blocking the record.

    A variant named :data:`RECORDED` is the record being replaced, written on another host or by an earlier
    run: a value it lacks (new since) takes its spread from the other variants alone."""
    names = list(variant_docs)
    for n, d in variant_docs.items():
        theirs = {k: v for k, v in d.get("params", {}).items() if k not in HOW_RUN}
        ours = {k: v for k, v in doc.get("params", {}).items() if k not in HOW_RUN}
        if n == RECORDED and all(ours.get(k) == v for k, v in theirs.items()):
            continue  # the replaced record lacks only parameters added since (they add runs, change none)
        if theirs != ours:
            raise RecordError(f"variant '{n}' of chapter '{doc['chapter']}' ran with other parameters")
        if n != RECORDED and d.get("code_hash") != doc.get("code_hash"):
            # a variant left in its build root by an earlier version of the code: not the spread of this code
            raise RecordError(
                f"variant '{n}' of chapter '{doc['chapter']}' ran other code (code "
                f"{str(d.get('code_hash'))[:12]}, this run {str(doc.get('code_hash'))[:12]}): run it again"
            )
    verdicts: dict[str, dict] = {}
    for cid, v in doc.get("verdicts", {}).items():
        seen, cseen = {THIS_RUN: v["verdict"]}, {}
        if v.get("control"):
            cseen[THIS_RUN] = v["control"]["verdict"]
        for n, d in variant_docs.items():
            ov = d.get("verdicts", {}).get(cid, {})
            if n == RECORDED and ov.get("rule") != v.get("rule"):
                continue  # the replaced record was decided by another rule: no spread of this one
            other = ov.get("verdict")
            if other != v["verdict"] and not fragile:
                raise RecordError(
                    f"verdict {cid} of chapter '{doc['chapter']}' is '{v['verdict']}' here but "
                    f"'{other}' under kernel variant '{n}': the rule does not survive a change of "
                    "floating-point kernels (record it as kernel-fragile with --fragile)"
                )
            seen[n] = other
            if n != RECORDED and v.get("control"):
                oc = (ov.get("control") or {}).get("verdict")
                if oc != v["control"]["verdict"] and not fragile:
                    raise RecordError(
                        f"verdict {cid} of chapter '{doc['chapter']}': its control gives "
                        f"'{v['control']['verdict']}' here but '{oc}' under kernel variant '{n}': the "
                        "control does not survive a change of floating-point kernels (record it as "
                        "kernel-fragile with --fragile)"
                    )
                cseen[n] = oc
        v = dict(v)
        if len(set(seen.values())) > 1:
            v["seen"] = seen
        if len(set(cseen.values())) > 1:
            v["control"] = {**v["control"], "seen": cseen}
        verdicts[cid] = v
    out = dict(doc)
    out["verdicts"] = verdicts
    out["values"] = {}
    absent = _presence_moves(doc, variant_docs, fragile)
    for name, (entry, gone) in absent.items():
        given = [n for n in [THIS_RUN, *names] if n != RECORDED and n not in gone]
        out["values"][name] = _unchecked(
            entry,
            [],
            list(names),
            f"given by {', '.join(given)}, absent "
            f"under {', '.join(gone)} (kernel-fragile: whether the chapter records it at all depends on the "
            "kernels); kept for reading, and accepted present or absent",
            summary=False,
            keep=("kind", "of", "limits", "decades", "floor"),
        ) | {"absent_seen": gone}
    for name, entry in doc["values"].items():
        if name in absent:
            continue
        rec = variant_docs.get(RECORDED, {}).get("values", {}).get(name)
        carried = rec if rec is not None and same_measure(entry, rec) else None
        if entry.get("kind") in KINDS:
            oth = {}
            for n, d in variant_docs.items():
                if n == RECORDED:
                    if carried is not None:
                        oth[n] = d["values"][name]
                elif name in d.get("values", {}):
                    oth[n] = d["values"][name]
                else:
                    raise RecordError(
                        f"value '{name}' of chapter '{doc['chapter']}' is missing under variant '{n}'"
                    )
            mode = kind_mode(entry, oth)
            if mode == "plain":
                bare, lims = _unless_straddled(entry, [e["value"] for e in oth.values()], fragile)
            else:  # read for itself, unchecked, or a share against each run's own lines (_as_proportion)
                bare, lims = entry, ()
            try:
                out["values"][name] = _straddling(
                    derive_kind(name, bare, oth, carried, mode=mode), lims, list(oth)
                )
            except RecordError as e:
                raise RecordError(f"chapter '{doc['chapter']}': {e}") from None
            continue
        others, used = [], []
        for n, d in variant_docs.items():
            if n == RECORDED:
                if carried is None:
                    continue  # new since, or measured another way: its spread comes from the variants alone
            elif name not in d.get("values", {}):
                raise RecordError(
                    f"value '{name}' of chapter '{doc['chapter']}' is missing under variant '{n}'"
                )
            others.append(d["values"][name]["value"])
            used.append(n)
        bare, lims = _unless_straddled(entry, others, fragile)
        try:
            rec_ = derive_tolerance(bare, others, used, carried, fragile=fragile)
            out["values"][name] = _straddling(rec_, lims, used)
        except RecordError as e:
            raise RecordError(f"chapter '{doc['chapter']}', value '{name}': {e}") from None
    # the variants of kernels.SPREAD this record's spread never saw, named so that a check under one of them,
    # the tests and the closing sentence of each verdict (book.verdict_kernels) can say so
    this = (doc.get("kernels") or {}).get("variant", "native")
    out["spread_missing"] = [v for v in kernels.SPREAD if v not in names and v != this]
    out["tolerance_rule"] = (
        f"per value: rtol = max(chapter's own, {SAFETY:g} x largest relative deviation between "
        f"kernel variants {names}, {MIN_RTOL:g}); round-off floor (|v| < {FLOOR:g}) checked "
        f"with atol {FLOOR_ATOL:g}; integers with no deviation and verdicts exact; values of a kind "
        "(count, floor, log) by that kind's rule (records.KINDS)"
    )
    return out


def largest_deviation(recorded: dict, now: dict) -> tuple[str, float, float] | None:
    """(value name, relative, absolute deviation) of the value that moved most, relative to the recorded one
    (leaves at the round-off floor excluded from the relative figure); None when nothing numeric moved."""
    best = None
    for name, e in recorded.get("values", {}).items():
        if name not in now.get("values", {}):
            continue
        s = spread(e["value"], [now["values"][name]["value"]])
        if (s["rel"] > 0 or s["abs"] > 0) and (best is None or (s["rel"], s["abs"]) > (best[1], best[2])):
            best = (name, s["rel"], s["abs"])
    return best


def _same(a: Any, b: Any) -> bool:
    """Bit-identical as recorded: JSON equality of the two values (floats compared by their exact repr)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def moved(recorded: dict, before: dict, now: dict, removed_params: tuple = ()) -> dict:
    """The record ``recorded`` carried to the code that produced ``now``, when the code moved without
    changing any computation (``rcbook record --moved``).

    ``before`` is a run of the code that wrote the record (its code key equals the record's) and ``now`` a
    run of the new code, both on this host under the same kernels. Every value, every verdict (rule text,
    evidence and reason included) and every parameter of the two runs must be bit-identical; then the new
    code computes what the old one did, the record's tolerances, measured over its kernel variants, still
    describe it, and only the record's code keys change. (The two runs are compared with each other, not
    with the record's values, which another host's kernels may have computed.) A parameter in
    ``removed_params`` (one the chapter no longer has) may be missing from ``now``. Anything else that
    differs is a :class:`RecordError` naming it: the change was not a move, and the chapter is re-recorded
    with ``--spread``."""
    ch = now.get("chapter")
    for name, d in (("record", recorded), ("earlier run", before)):
        if d.get("chapter") != ch or d.get("profile") != now.get("profile"):
            raise RecordError(f"--moved: the {name} is of {d.get('chapter')}/{d.get('profile')}")
    if before.get("code_hash") != recorded.get("code_hash"):
        raise RecordError(
            f"--moved: the earlier run of '{ch}' was made by other code than its record (code "
            f"{str(before.get('code_hash'))[:12]}, recorded {str(recorded.get('code_hash'))[:12]})"
        )
    if (before.get("kernels") or {}) != (now.get("kernels") or {}):
        raise RecordError(f"--moved: the two runs of '{ch}' used other kernels")
    gone = {k for k in removed_params if k in before.get("params", {}) and k not in now.get("params", {})}

    def params(d):
        return {k: v for k, v in d.get("params", {}).items() if k not in HOW_RUN and k not in gone}

    for name, d in (("record", recorded), ("earlier run", before)):
        if params(d) != params(now):
            diff = sorted(
                k for k in set(params(d)) | set(params(now)) if params(d).get(k) != params(now).get(k)
            )
            raise RecordError(
                f"--moved: chapter '{ch}' ran with other parameters than its {name} ({', '.join(diff)})"
            )
    bv, nv = before.get("values", {}), now.get("values", {})
    if set(bv) != set(nv) or set(bv) != set(recorded.get("values", {})):
        raise RecordError(f"--moved: chapter '{ch}' records other values")
    differ = [n for n in bv if not _same(bv[n].get("value"), nv[n].get("value"))]
    if differ:
        raise RecordError(f"--moved: chapter '{ch}' computes other numbers: {', '.join(differ[:8])}")
    bver, nver = before.get("verdicts", {}), now.get("verdicts", {})
    vdiff = [c for c in set(bver) | set(nver) if not _same(_computed(bver.get(c)), _computed(nver.get(c)))]
    if vdiff:
        raise RecordError(f"--moved: chapter '{ch}' decides other verdicts: {', '.join(sorted(vdiff))}")
    out = dict(recorded)
    # a stated note (the chapter's SMOKE_VERDICT_NOTES) is text of the code, not a result: the record takes
    # the new code's, added or removed
    notes = [c for c in nver if not _same(_stated(bver.get(c)), _stated(nver.get(c)))]
    out["verdicts"] = {
        c: _computed(v) | _stated(nver.get(c)) if isinstance(v, dict) else v
        for c, v in recorded.get("verdicts", {}).items()
    }
    out["params"] = {k: v for k, v in recorded.get("params", {}).items() if k not in gone}
    for k in ("code_hash", "library_hash", "library_version"):
        out[k] = now.get(k)
    out["moved"] = (
        f"carried from code {str(recorded.get('code_hash'))[:12]} to {str(now.get('code_hash'))[:12]}: "
        "runs of the old and the new code on one host under the same kernels "
        f"({(now.get('kernels') or {}).get('cpu_capability', '?')}) computed every value and verdict "
        "bit-identically, so the tolerances measured over the old code's kernel variants stand"
        + (f"; parameter(s) removed: {', '.join(sorted(gone))}" if gone else "")
        + (f"; the chapter's stated smoke note changed for {', '.join(sorted(notes))}" if notes else "")
    )
    return out


STATED = ("smoke_note",)  # in a verdict: written by the chapter's author, not computed by the run


def _computed(v: Any) -> Any:
    """A verdict without its :data:`STATED` keys (what ``--moved`` requires bit-identical)."""
    return {k: x for k, x in v.items() if k not in STATED} if isinstance(v, dict) else v


def _stated(v: Any) -> dict:
    """A verdict's :data:`STATED` keys alone."""
    return {k: x for k, x in v.items() if k in STATED} if isinstance(v, dict) else {}
