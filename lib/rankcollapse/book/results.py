"""Results are data: one JSON file per executed chapter, and the check against recorded ones.

A results file holds named values (each with the tolerance it should be
compared with on another machine, and why), claim verdicts with the numbers
that decided them, and the run's provenance (profile, parameters, seed,
library version, wall time). Recorded copies live in
``data/expected/<profile>/<chapter>.json``; :func:`compare` checks a fresh run
against them value by value (the comparison, the tolerance rule and the record live on the runner's
side, in :mod:`rankcollapse.book.records`, so changing them re-executes no chapter).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..store import REPO


def expected_path(profile: str, chapter: str) -> Path:
    """``data/expected/<profile>/<chapter>.json`` (or under ``$RCBOOK_EXPECTED``): where a chapter's record
    lies. Here, not in :mod:`rankcollapse.book.records`, because a chapter reads its own record (the fragile
    sentences of :mod:`rankcollapse.book.checks`), and the comparing and recording machinery must stay out
    of every chapter's code key."""
    root = Path(os.environ.get("RCBOOK_EXPECTED") or REPO / "data" / "expected")
    return root / profile / f"{chapter}.json"


VERDICTS = ("supported", "refuted", "inconclusive", "not run")
# keys that legitimately differ between two identical runs
VOLATILE_KEYS = ("wall_time_s", "cpu_time_s", "started", "host")


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
        """Record a named value. ``rtol``/``atol``: tolerance for other machines; ``note``: why that
        tolerance."""
        if name in self.values:
            raise KeyError(f"value '{name}' recorded twice")
        v = _plain(v)
        self.values[name] = {"value": v, "rtol": rtol, "atol": atol, "note": note}
        return v

    def verdict(self, claim_id: str, verdict: str, *, claim: str, rule: str, evidence: dict) -> str:
        """Record the verdict on a claim, the rule that decided it and the deciding numbers."""
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {verdict!r}")
        entry = {
            "verdict": verdict,
            "claim": claim,
            "rule": rule,
            "evidence": _plain(evidence),
        }
        ctl = control_entry(claim_id, verdict, entry["evidence"].get("control"))
        if ctl is not None:
            entry["control"] = ctl
        self.verdicts[claim_id] = entry
        return verdict

    def document(self, wall_time_s: float) -> dict:
        return {
            "chapter": self.chapter,
            **self.meta,
            "wall_time_s": round(wall_time_s, 3),
            "values": self.values,
            "verdicts": self.verdicts,
        }

    def save(self, path: Path, wall_time_s: float) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.document(wall_time_s), indent=1, sort_keys=False) + "\n")
        os.replace(tmp, path)
        return path


def control_entry(claim_id: str, verdict: str, ctl: Any) -> dict | None:
    """The control of a verdict, from its evidence's ``control`` (``{"on": which run, "verdict": the same
    rule's outcome on it, "reason": the rule's reason there}``), with ``counts``: whether the claim's verdict
    counts as evidence, that is, whether the same rule gave another outcome on the control. ``None`` when the
    judge named no control."""
    if not isinstance(ctl, dict) or not ({"on", "verdict"} & set(ctl)):
        return None  # no control named (a chapter's own 'control' data, such as a list of control runs)
    if not {"on", "verdict"} <= set(ctl):
        raise ValueError(f"verdict {claim_id}: a control needs 'on' and 'verdict', not {ctl!r}")
    if ctl["verdict"] not in VERDICTS:
        raise ValueError(f"verdict {claim_id}: the control's verdict must be one of {VERDICTS}")
    return {
        "on": str(ctl["on"]),
        "verdict": ctl["verdict"],
        "reason": str(ctl.get("reason", "")),
        "counts": ctl["verdict"] != verdict and "not run" not in (verdict, ctl["verdict"]),
    }


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def strip_volatile(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in VOLATILE_KEYS}
