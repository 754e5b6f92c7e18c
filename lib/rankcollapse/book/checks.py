"""Recording a value as what it is, so that another machine checks it by the right rule.

Four kinds of value cannot be held to a relative tolerance taken from one host's spread
(:data:`rankcollapse.book.records.KINDS` states each kind's rule):

* a **count** of events or outcomes, out of ``of`` trials: it moves by whole events when a network on a
  knife-edge falls the other way. The page states it as a proportion with its exact binomial interval
  (:func:`count_text`), and a sentence or verdict built on it should hold across that interval;
* a value **at the float floor**, one the chapter itself calls numerically zero (a gradient below
  eps32 x |W|): its size is round-off, so it is recorded with its floor and checked as below it;
* a **ratio read in decades** (a floor-level value against a healthy one): checked on a log scale with a
  stated number of decades;
* an **exact** integer, one no rounding can move: a size the parameters set (runs, cells, files) or a
  number a theorem fixes. It is held exactly, and ``rcbook record`` refuses it when it moved between kernel
  variants (then it is a count). Every other integer is a count: none is held exactly just because no
  spread was measured for it.

Each function records through the chapter's :meth:`~rankcollapse.book.notebook.Chapter.value` and marks
the entry's kind; :func:`rankcollapse.book.records.record_with_spread` and
:func:`~rankcollapse.book.records.compare` apply the kind's rule.
"""

from __future__ import annotations

import math
from typing import Any


def _mark(ch, name: str, **fields: Any) -> None:
    ch.results.values[name].update(fields)


def _one_count(name: str, k: Any, of: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, float)) or int(k) != k or k < 0:
        raise ValueError(f"count '{name}' = {k!r} is not a count (an integer >= 0)")
    if of is not None and not 0 <= k <= of:
        raise ValueError(f"count '{name}' = {k} is not out of {of}")
    return int(k)


def _limits(name: str, limits: Any) -> list[float]:
    lims = [float(x) for x in (limits or ())]
    if any(not math.isfinite(x) for x in lims):
        raise ValueError(f"value '{name}': limits must be finite numbers, not {limits!r}")
    return lims


def against(
    ch,
    name: str,
    v: Any,
    *,
    limits: Any,
    rtol: float = 0.0,
    atol: float = 0.0,
    note: str = "",
    glue: bool = True,
) -> Any:
    """Record ``v`` (a number, or numbers) that a verdict's rule, a caption or a sentence reads against the
    lines ``limits`` (its thresholds). Its tolerance on another machine is then never wider than its recorded
    distance to the nearest line (it is marked ``fragile`` where the spread measured between kernel variants
    reaches that distance), and ``rcbook check`` also requires it on the same side of every line. ``rtol``,
    ``atol``: the chapter's own tolerance, a floor under the measured one (capped at the lines too)."""
    lims = _limits(name, limits)
    if not lims:
        raise ValueError(f"value '{name}': against() needs the lines a rule reads it against")
    v = ch.value(name, v, rtol=rtol, atol=atol, note=note, glue=glue)
    _mark(ch, name, limits=lims)
    return v


def count(ch, name: str, k: Any, *, of: Any, limits: Any = (), note: str = "", glue: bool = True) -> Any:
    """Record ``k`` events out of ``of`` (None: no fixed number of trials) as a count. ``k`` may also be a
    mapping of counts (per treatment, per alpha), ``of`` then one number for all or a mapping of the same
    keys. ``limits``: the lines a rule reads the count against (a rule "at least 4 of 7" reads it against
    3.5): the check then requires it on the same side of each, and its tolerance never reaches past them
    without the record saying it is fragile."""
    if isinstance(k, dict):
        per = of if isinstance(of, dict) else {key: of for key in k}
        k = {key: _one_count(f"{name}[{key}]", x, per.get(key)) for key, x in k.items()}
        of = (
            {key: None if per.get(key) is None else int(per[key]) for key in k}
            if isinstance(of, dict)
            else of
        )
    else:
        k = _one_count(name, k, of)
    lims = _limits(name, limits)
    v = ch.value(name, k, note=note, glue=glue and not isinstance(k, dict))
    _mark(ch, name, kind="count", of=of if isinstance(of, dict) or of is None else int(of))
    if lims:
        _mark(ch, name, limits=lims)
    return v


def fragile_text(ch, name: str, *, glue: bool = True) -> str:
    """A sentence for the page beside one that reads the value ``name`` against its lines, from the
    chapter's record at this profile (``data/expected``): whether the spread measured between kernel
    variants reaches the value's margin to its nearest line (the record marks the entry ``fragile``,
    :func:`rankcollapse.book.records.cap_at_lines`), stays inside it, or was not measured against a line
    (no record, or one made before the value had lines). Glued as ``<name>_fragile`` unless ``glue`` is
    false."""
    from .results import expected_path, load

    try:
        e = load(expected_path(ch.params["profile"], ch.name))["values"].get(name) or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # no record, or no chapter's run
        e = {}
    if "fragile" not in e:
        text = "Its spread between kernel variants is not yet recorded against this line."
    elif e["fragile"]:
        text = (
            "Fragile: the spread measured between kernel variants reaches its margin to the line "
            f"({e.get('margin', float('nan')):.2g}), so another machine may put it on the other side."
        )
    else:
        text = "The spread measured between kernel variants stays inside its margin to the line."
    if glue:
        ch.glue(f"{name}_fragile", text)
    return text


def exact(ch, name: str, v: Any, *, why: str, note: str = "", glue: bool = True) -> Any:
    """Record ``v``, an integer (or a structure of integers) that no rounding can move, held exactly;
    ``why`` says what fixes it (the parameters, a theorem), and is kept in the record."""
    if not why:
        raise ValueError(f"value '{name}': an exact value needs the reason it is exact")
    leaves = list(v.values()) if isinstance(v, dict) else list(v) if isinstance(v, list) else [v]
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in leaves):
        raise ValueError(f"value '{name}' = {v!r} is not an integer (or integers): record it as measured")
    v = ch.value(name, v, note=note, glue=glue)
    _mark(ch, name, kind="exact", why=why)
    return v


def at_floor(ch, name: str, v: Any, *, floor: Any, note: str = "", glue: bool = True) -> Any:
    """Record ``v``, a value the chapter calls numerically zero, with the ``floor`` it is compared with (one
    number, or one per leaf of ``v``). Nothing is raised here when ``v`` is above its floor: ``rcbook
    record`` refuses to record it so (it is a measurement) and ``rcbook check`` fails on it (the science
    changed)."""
    v = ch.value(name, v, note=note, glue=glue)
    _mark(ch, name, kind="floor", floor=floor)
    return v


def in_decades(
    ch,
    name: str,
    v: Any,
    *,
    decades: float,
    limits: tuple = (),
    floor: Any = None,
    note: str = "",
    glue: bool = True,
) -> Any:
    """Record ``v`` (positive numbers) as a ratio read on a log scale, held to ``decades`` on another
    machine (widened by the measured spread when that is larger). ``limits``: the lines a verdict's rule
    reads the value against; the tolerance then never reaches past the nearest one, and the check also
    requires the value on the same side of each. ``floor``: the float floor the page compares the value
    with (eps32 x |W|, one number or one per leaf), recorded beside it; a value below it under every kernel
    variant is better recorded with :func:`at_floor`."""
    if not decades > 0:
        raise ValueError(f"value '{name}': decades must be > 0, not {decades!r}")
    if any(not float(x) > 0 for x in limits):
        raise ValueError(f"value '{name}': limits must be positive, not {limits!r}")
    v = ch.value(name, v, note=note, glue=glue)
    _mark(ch, name, kind="log", decades=float(decades))
    if limits:
        _mark(ch, name, limits=[float(x) for x in limits])
    if floor is not None:
        _mark(ch, name, floor=floor)
    return v


def binomial_interval(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a proportion seen as ``k`` of ``n``."""
    from scipy.stats import beta

    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"{k} of {n} is not a proportion")
    a = (1.0 - conf) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return lo, hi


def count_range(k: int, n: int, conf: float = 0.95) -> tuple[int, int]:
    """The counts out of ``n`` inside :func:`binomial_interval`: what another draw of the same trials could
    give, at ``conf``."""
    lo, hi = binomial_interval(k, n, conf)
    return math.ceil(lo * n - 1e-9), math.floor(hi * n + 1e-9)


def count_text(k: int, n: int, conf: float = 0.95) -> str:
    """``"7 of 10 (95% interval 35%–93%)"``: a count with its exact binomial interval, for the page."""
    lo, hi = binomial_interval(k, n, conf)
    return f"{k} of {n} ({conf:.0%} interval {lo:.0%}–{hi:.0%})"


# -- verdicts built on counts: do they hold across the counts' intervals? -------------------------------
def at_key(*path: Any):
    """A setter for :func:`across_interval`: ``ev[path[0]][path[1]]... = j``."""

    def put(ev: dict, j: int) -> None:
        d = ev
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = j

    return put


def across_interval(rule, evidence: dict, counts: dict, conf: float = 0.95) -> dict:
    """Whether the verdict ``rule(evidence)[0]`` holds when a count it reads takes any value inside its exact
    binomial interval (:func:`count_range`): what another draw of the same trials (other seeds, another
    machine's round-off) could have given.

    ``counts``: ``{label: (k, n, setter)}``, ``setter(ev, j)`` putting ``j`` in place of ``k`` in a copy of
    the evidence (:func:`at_key` for a plain key). Each count is moved alone, the others held at what was
    seen. Returns ``{"verdict", "holds", "conf", "counts": {label: [k, n, lo, hi]}, "flips": {label: [[j,
    verdict], ...]}}`` (``flips``: per count, the values inside its interval at which the verdict differs,
    nearest first)."""
    import copy

    base = rule(evidence)[0]
    out: dict = {"verdict": base, "holds": True, "conf": conf, "counts": {}, "flips": {}}
    for label, (k, n, setter) in counts.items():
        if not n:
            continue
        lo, hi = count_range(int(k), int(n), conf)
        out["counts"][label] = [int(k), int(n), lo, hi]
        flips = []
        for j in sorted(range(lo, hi + 1), key=lambda j: (abs(j - k), j)):
            if j == k:
                continue
            ev = copy.deepcopy(evidence)
            setter(ev, j)
            v = rule(ev)[0]
            if v != base:
                flips.append([j, v])
        if flips:
            out["flips"][label] = flips
            out["holds"] = False
    return out


def interval_text(res: dict) -> str:
    """One sentence on :func:`across_interval`'s result, for the page and the verdict's reason."""
    c = res["counts"]
    if not c:
        return "it reads no count with trials to vary"
    pct = f"{res['conf']:.0%}"
    if res["holds"]:
        spans = ", ".join(f"{lab} {lo}–{hi} of {n}" for lab, (k, n, lo, hi) in c.items())
        return f"it holds across the {pct} interval of every count it reads, each moved alone ({spans})"
    parts = []
    for lab, fl in res["flips"].items():
        k, n, lo, hi = c[lab]
        j, v = fl[0]
        parts.append(f"{lab} at {j} of {n} instead of {k} (its interval {lo}–{hi}) gives '{v}'")
    return (
        f"it does not hold across the {pct} intervals of the counts it reads, each moved alone: "
        + "; ".join(parts)
    )
