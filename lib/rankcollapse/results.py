"""Results are data: one JSON file per executed chapter, and the check against recorded ones.

A results file holds named values (each with the tolerance it should be
compared with on another machine, and why), claim verdicts with the numbers
that decided them, and the run's provenance (profile, parameters, seed,
library version, wall time). Recorded copies live in
``data/expected/<profile>/<chapter>.json``; :func:`compare` checks a fresh run
against them value by value.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERDICTS = ("supported", "refuted", "inconclusive", "not run")
# keys that legitimately differ between two identical runs
VOLATILE_KEYS = ("wall_time_s", "started", "host")


def _plain(v: Any) -> Any:
    """Convert tensors / numpy scalars to plain Python numbers and lists."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


class Results:
    """Collects values and verdicts during a chapter run and writes ``results.json``."""

    def __init__(self, chapter: str, meta: dict):
        self.chapter = chapter
        self.meta = dict(meta)
        self.values: dict[str, dict] = {}
        self.verdicts: dict[str, dict] = {}

    def value(self, name: str, v: Any, *, rtol: float = 0.0, atol: float = 0.0, note: str = "") -> Any:
        """Record a named value. ``rtol``/``atol``: tolerance for other machines; ``note``: why that tolerance."""
        if name in self.values:
            raise KeyError(f"value '{name}' recorded twice")
        v = _plain(v)
        self.values[name] = {"value": v, "rtol": rtol, "atol": atol, "note": note}
        return v

    def verdict(self, claim_id: str, verdict: str, *, claim: str, rule: str, evidence: dict) -> str:
        """Record the verdict on a claim, the rule that decided it and the deciding numbers."""
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {verdict!r}")
        self.verdicts[claim_id] = {"verdict": verdict, "claim": claim, "rule": rule, "evidence": _plain(evidence)}
        return verdict

    def document(self, wall_time_s: float) -> dict:
        return {"chapter": self.chapter, **self.meta, "wall_time_s": round(wall_time_s, 3),
                "values": self.values, "verdicts": self.verdicts}

    def save(self, path: Path, wall_time_s: float) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.document(wall_time_s), indent=1, sort_keys=False) + "\n")
        os.replace(tmp, path)
        return path


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def strip_volatile(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in VOLATILE_KEYS}


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
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(
            _close(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _close(x, y, rtol, atol) for x, y in zip(a, b))
    if isinstance(a, (bool, str)) or a is None or isinstance(b, (bool, str)) or b is None:
        return a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * abs(a)


def compare(recorded: dict, now: dict) -> list[Row]:
    """Rows of (name, recorded, now, tolerance, ok) for every recorded value and verdict.

    Tolerances are the recorded ones. A value missing from either side fails, and so
    does a run whose parameters differ from the recorded run's.
    """
    rows: list[Row] = []
    rp, np_ = recorded.get("params", {}), now.get("params", {})
    if {k: v for k, v in rp.items() if k not in ("output_dir", "device")} != \
            {k: v for k, v in np_.items() if k not in ("output_dir", "device")}:
        diff = sorted(k for k in set(rp) | set(np_) if k not in ("output_dir", "device") and rp.get(k) != np_.get(k))
        rows.append(Row("params", {k: rp.get(k) for k in diff}, {k: np_.get(k) for k in diff}, "equal", False))
    rv, nv = recorded.get("values", {}), now.get("values", {})
    for name in list(rv) + [n for n in nv if n not in rv]:
        if name not in rv:
            rows.append(Row(name, "(not recorded)", nv[name]["value"], "-", False))
            continue
        rec = rv[name]
        tol = f"rtol={rec['rtol']:g} atol={rec['atol']:g}"
        if name not in nv:
            rows.append(Row(name, rec["value"], "(missing)", tol, False))
            continue
        rows.append(Row(name, rec["value"], nv[name]["value"], tol,
                        _close(rec["value"], nv[name]["value"], rec["rtol"], rec["atol"])))
    rd, nd = recorded.get("verdicts", {}), now.get("verdicts", {})
    for cid in list(rd) + [c for c in nd if c not in rd]:
        r = rd.get(cid, {}).get("verdict", "(not recorded)")
        n = nd.get(cid, {}).get("verdict", "(missing)")
        rows.append(Row(f"verdict {cid}", r, n, "equal", r == n))
    return rows


def format_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        s = "[" + ", ".join(format_value(x) for x in v[:4]) + (", ..." if len(v) > 4 else "") + "]"
        return s
    if isinstance(v, dict):
        return json.dumps(v)[:60]
    return str(v)
