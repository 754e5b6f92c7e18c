"""Recording a value as what it is, so that another machine checks it by the right rule.

Three kinds of value cannot be held to a relative tolerance taken from one host's spread
(:data:`rankcollapse.book.records.KINDS` states each kind's rule):

* a **count** of events or outcomes, out of ``of`` trials: it moves by whole events when a network on a
  knife-edge falls the other way. The page states it as a proportion with its exact binomial interval
  (:func:`count_text`), and a sentence or verdict built on it should hold across that interval;
* a value **at the float floor**, one the chapter itself calls numerically zero (a gradient below
  eps32 x |W|): its size is round-off, so it is recorded with its floor and checked as below it;
* a **ratio read in decades** (a floor-level value against a healthy one): checked on a log scale with a
  stated number of decades.

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


def count(ch, name: str, k: Any, *, of: Any, note: str = "", glue: bool = True) -> Any:
    """Record ``k`` events out of ``of`` (None: no fixed number of trials) as a count. ``k`` may also be a
    mapping of counts (per treatment, per alpha), ``of`` then one number for all or a mapping of the same
    keys."""
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
    v = ch.value(name, k, note=note, glue=glue and not isinstance(k, dict))
    _mark(ch, name, kind="count", of=of if isinstance(of, dict) or of is None else int(of))
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
