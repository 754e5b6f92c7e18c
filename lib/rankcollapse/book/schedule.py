"""What the book would cost on more cores: the recorded work of each chapter, replayed on ``cores`` cores.

``data/costs/<profile>.json`` (``rcbook costs``, :func:`rankcollapse.book.runner.record_costs`) holds, per
chapter, its CPU seconds from an empty store and, when the run kept a job log
(``$RCBOOK_JOB_LOG``, :mod:`rankcollapse.jobs`), its *segments* in time order::

    "segments": [{"serial": 12.5}, {"stage": [40.1, 39.8, 41.0], "workers": 2}, {"serial": 3.2}, ...]

A ``serial`` segment is CPU time of the chapter's own process (its kernel: loading, measuring, plotting); a
``stage`` is one :func:`~rankcollapse.jobs.run_parallel` call, the CPU seconds of each of its jobs, and the
workers it was given. :func:`fold_job_log` makes them from a job log.

:func:`simulate` replays them as a discrete-event simulation: chapters start in the runner's order (the
largest recorded ``cpu_s`` first, :func:`rankcollapse.book.runner.schedule`); a serial segment occupies one
core for its CPU seconds, each job of a stage one core for its CPU seconds, and the stage (so the chapter's
next segment) ends when its last job ends. Policies:

* ``shared`` (default): one budget of ``cores`` for the whole book, work-conserving: a free core goes to a
  runnable unit of a running chapter (the chapter that started first has priority), else starts the next
  chapter. A stage may use any number of cores.
* ``reserved``: today's runner (``rcbook run all -j cores``): a chapter starts when the cores it reserves
  are free (its widest stage's workers, at most ``cores``; one when it has no stage), the longest waiting
  chapter that fits first, and its units use only those.

A chapter without segments is one serial unit of its ``cpu_s``: then the simulated wall is a pessimistic
bound (no job of it runs beside another). The model knows no contention, memory bandwidth nor start-up
costs: :func:`versus_record` puts its prediction beside the recorded wall of the run it was recorded from.
"""

from __future__ import annotations

import heapq
import json
from collections import deque
from pathlib import Path

POLICIES = ("shared", "reserved")


def _chapters(costs: dict) -> dict:
    """The chapters mapping of a costs document (or of the mapping itself)."""
    return costs["chapters"] if "chapters" in costs and isinstance(costs["chapters"], dict) else costs


def has_segments(costs: dict) -> bool:
    """Whether any chapter of ``costs`` has recorded segments."""
    return any(c.get("segments") for c in _chapters(costs).values())


def order(costs: dict) -> list[str]:
    """The runner's starting order: the largest recorded ``cpu_s`` first, ties in the order given."""
    ch = _chapters(costs)
    return sorted(ch, key=lambda n: -float(ch[n].get("cpu_s") or 0.0))


def phases(c: dict) -> list[tuple[list[float], int]]:
    """A chapter's segments as ``[(unit CPU seconds, workers), ...]``: a serial segment is one unit of width
    one; empty ones are dropped. No segments: one serial unit of its ``cpu_s``."""
    segs = c.get("segments")
    if not segs:
        cpu = float(c.get("cpu_s") or 0.0)
        return [([cpu], 1)] if cpu > 0 else []
    out = []
    for s in segs:
        if "serial" in s:
            if float(s["serial"]) > 0:
                out.append(([float(s["serial"])], 1))
        elif s.get("stage"):
            out.append(([float(x) for x in s["stage"]], max(1, int(s.get("workers") or 1))))
    return out


class _Chapter:
    def __init__(self, name: str, c: dict, cores: int):
        self.name, self.phases = name, phases(c)
        self.reserve = min(cores, max([w for _, w in self.phases if w > 1] or [1]))
        self.i, self.pending, self.width, self.running = 0, deque(), 1, 0
        self.start = self.end = None


def simulate(costs: dict, cores: int, policy: str = "shared") -> dict:
    """Expected wall time of the chapters of ``costs`` (a ``data/costs/<profile>.json`` document, or its
    ``chapters``) run together on ``cores`` cores under ``policy`` (:data:`POLICIES`).

    Returns ``{"cores", "policy", "wall_s", "cpu_s", "busy", "segments", "chapters": {name: {"start_s",
    "end_s", "wall_s"}}}``: ``busy`` is cpu / (cores x wall); ``segments`` whether any chapter had recorded
    segments (else every chapter was one serial unit: a pessimistic bound)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not known; allowed: {', '.join(POLICIES)}")
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    chs = _chapters(costs)
    waiting = [_Chapter(n, chs[n], cores) for n in order(costs)]
    running: list[_Chapter] = []
    done: list[_Chapter] = []
    events: list = []  # (end time, sequence, chapter)
    seq = 0
    t = 0.0
    free = cores
    reserve_free = cores

    def advance(ch: _Chapter) -> None:
        nonlocal reserve_free
        while ch.running == 0 and not ch.pending:
            if ch.i < len(ch.phases):
                units, width = ch.phases[ch.i]
                ch.i += 1
                ch.pending.extend(units)
                ch.width = min(width, ch.reserve) if policy == "reserved" else len(units)
            else:
                ch.end = t
                running.remove(ch)
                done.append(ch)
                if policy == "reserved":
                    reserve_free += ch.reserve
                return

    def start(ch: _Chapter) -> None:
        nonlocal reserve_free
        waiting.remove(ch)
        ch.start = t
        running.append(ch)
        if policy == "reserved":
            reserve_free -= ch.reserve
        advance(ch)

    def dispatch() -> None:
        nonlocal free, seq
        while True:
            for ch in list(running):  # the chapter that started first first
                while free > 0 and ch.pending and ch.running < ch.width:
                    seq += 1
                    heapq.heappush(events, (t + ch.pending.popleft(), seq, ch))
                    ch.running += 1
                    free -= 1
            if policy == "shared":
                if not (free > 0 and waiting):
                    return
                start(waiting[0])
            else:
                fits = next((ch for ch in waiting if ch.reserve <= reserve_free), None)
                if fits is None:
                    return
                start(fits)

    dispatch()
    while events:
        t, _, ch = heapq.heappop(events)
        ch.running -= 1
        free += 1
        advance(ch)
        dispatch()
    assert not waiting and not running, "the simulation left chapters unfinished"
    cpu = sum(sum(u) for ch in done for u, _ in ch.phases)
    return {
        "cores": cores,
        "policy": policy,
        "wall_s": t,
        "cpu_s": cpu,
        "busy": cpu / (cores * t) if t > 0 else 0.0,
        "segments": has_segments(costs),
        "chapters": {
            ch.name: {"start_s": ch.start, "end_s": ch.end, "wall_s": ch.end - ch.start}
            for ch in sorted(done, key=lambda c: order(costs).index(c.name))
        },
    }


def versus_record(costs: dict, policy: str = "reserved") -> dict | None:
    """The simulation on the recorded run's cores beside that run's wall: ``{"cores", "policy",
    "recorded_wall_s", "predicted_wall_s", "error" (predicted / recorded - 1), "chapters": {name:
    {"recorded_wall_s", "predicted_wall_s"}}}``, or None when ``costs`` records no wall or cores. The
    ``reserved`` policy is what the recorded run did (today's runner)."""
    if not costs.get("wall_s") or not costs.get("cores"):
        return None
    sim = simulate(costs, int(costs["cores"]), policy)
    rec = float(costs["wall_s"])
    return {
        "cores": int(costs["cores"]),
        "policy": policy,
        "recorded_wall_s": rec,
        "predicted_wall_s": sim["wall_s"],
        "error": sim["wall_s"] / rec - 1,
        "chapters": {
            n: {"recorded_wall_s": c.get("wall_s"), "predicted_wall_s": sim["chapters"][n]["wall_s"]}
            for n, c in _chapters(costs).items()
        },
    }


# -- from a job log to segments -----------------------------------------------------------------------------
class JobLogMismatch(ValueError):
    """A job log that cannot belong to the run log it is folded with."""


def read_job_log(path: str | Path) -> list[dict]:
    """The records of a job log (:mod:`rankcollapse.jobs`); unreadable lines are skipped, no file is []."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and ("stage" in d or d.get("kind") == "chapter"):
            out.append(d)
    return out


def _top_stages(recs: list[dict]) -> list[dict]:
    """A chapter's stages with their jobs, in time order; a stage run inside another's interval (a job that
    runs a stage of its own) is left out: its CPU time is in that job's."""
    stages: dict[str, dict] = {}
    for r in recs:
        if r.get("kind") == "chapter":
            continue
        s = stages.setdefault(r["stage"], {"jobs": [], "rec": None})
        if r.get("kind") == "stage":
            s["rec"] = r
        else:
            s["jobs"].append(r)
    out = []
    for sid, s in stages.items():
        rec = s["rec"]
        if rec is None:  # no stage line (an interrupted stage): its jobs' extent
            if not s["jobs"]:
                continue
            rec = {
                "t0": min(j["t0"] for j in s["jobs"]),
                "t1": max(j["t1"] for j in s["jobs"]),
                "workers": len(s["jobs"]),
                "mode": "pool",
            }
        out.append(
            {
                "id": sid,
                "t0": float(rec["t0"]),
                "t1": float(rec["t1"]),
                "workers": int(rec.get("workers") or 1),
                "remote": rec.get("mode") == "dask-remote",
                "jobs": [float(j["cpu_s"]) for j in sorted(s["jobs"], key=lambda j: j["t0"])],
            }
        )
    out.sort(key=lambda s: (s["t0"], -s["t1"]))
    top: list[dict] = []
    for s in out:
        if top and s["t0"] < top[-1]["t1"]:
            continue  # nested in (or overlapping) the stage before it
        top.append(s)
    return top


def fold_chapter(recs: list[dict], cpu_s: float, wall_s: float) -> list[dict]:
    """One chapter's segments from its job-log records and its CPU and wall seconds (the run log).

    Each stage becomes ``{"stage": [job cpu_s in start order], "workers": n}``. The chapter's CPU time not in
    any job (``cpu_s`` minus its jobs' CPU seconds; a ``dask-remote`` stage's jobs ran in no process of the
    chapter's, so none is subtracted for them) is its serial time. It is spread over the gaps around its
    stages in proportion to their wall time: between two stages the gap is known from their timestamps;
    before the first and after the last it is known from a ``{"kind": "chapter", "t0", "t1"}`` record when
    the log has one, else those two share ``wall_s`` minus the span of the stages equally. With no wall in
    any gap, all of it comes first. Serial segments under a millisecond are left out.
    Raises :class:`JobLogMismatch` when the jobs used more CPU than the chapter (a log of another run)."""
    stages = _top_stages(recs)
    local = sum(sum(s["jobs"]) for s in stages if not s["remote"])
    serial = cpu_s - local
    if serial < -(0.02 * cpu_s + 1.0):
        raise JobLogMismatch(
            f"its jobs used {local:.1f} CPU seconds but the chapter {cpu_s:.1f}: "
            "the job log is not of this run"
        )
    serial = max(0.0, serial)
    if not stages:
        return [{"serial": round(serial, 3)}] if serial >= 1e-3 else []
    chap = next((r for r in recs if r.get("kind") == "chapter"), None)
    mids = [max(0.0, b["t0"] - a["t1"]) for a, b in zip(stages, stages[1:])]
    if chap is not None:
        pre = max(0.0, stages[0]["t0"] - float(chap["t0"]))
        post = max(0.0, float(chap["t1"]) - stages[-1]["t1"])
    else:
        rest = max(0.0, wall_s - (stages[-1]["t1"] - stages[0]["t0"]))
        pre = post = rest / 2
    gaps = [pre, *mids, post]
    total = sum(gaps)
    shares = [g / total for g in gaps] if total > 0 else [1.0] + [0.0] * (len(gaps) - 1)
    out: list[dict] = []
    for i, share in enumerate(shares):
        if serial * share >= 1e-3:
            out.append({"serial": round(serial * share, 3)})
        if i < len(stages):
            s = stages[i]
            out.append({"stage": [round(x, 3) for x in s["jobs"]], "workers": s["workers"]})
    return out


def fold_job_log(records: list[dict], chapters: dict) -> dict[str, list[dict]]:
    """``{chapter: segments}`` (:func:`fold_chapter`) for the chapters of a run log (``{name: {"cpu_s",
    "wall_s", ...}}``) from a job log's records; {} when no record names any of them (a log written without
    ``$RCBOOK_CHAPTER``, or none). A chapter with no record ran no stage: one serial segment."""
    by: dict[str, list[dict]] = {n: [] for n in chapters}
    for r in records:
        if r.get("chapter") in by:
            by[r["chapter"]].append(r)
    if not any(by.values()):
        return {}
    out = {}
    for n, c in chapters.items():
        try:
            out[n] = fold_chapter(by[n], float(c["cpu_s"]), float(c["wall_s"]))
        except JobLogMismatch as e:
            raise JobLogMismatch(f"chapter '{n}': {e}") from None
    return out


SIM_CORES = (2, 4, 8, 16)


def cost_table(repo: str | Path | None = None, profiles: tuple = ("smoke", "full")) -> str:
    """The Markdown table of what each profile costs, read from ``data/costs/<profile>.json`` alone: the
    recorded run (its cores, wall and CPU time, from an empty store) and :func:`simulate` on
    :data:`SIM_CORES` cores. ``rcbook costs --table`` prints it; README.md and the book's page on how it is
    built carry it, and a test fails when the README's copy differs."""
    root = Path(repo) if repo else Path(__file__).resolve().parents[3]
    head = "| profile | recorded here (cores: wall, CPU) | " + " | ".join(f"{n} cores" for n in SIM_CORES)
    lines = [head + " |", "|---|---|" + "---|" * len(SIM_CORES)]
    bound, off = False, []
    for prof in profiles:
        try:
            doc = json.loads((root / "data" / "costs" / f"{prof}.json").read_text())
        except (OSError, ValueError):
            continue
        cpu = sum(float(c.get("cpu_s") or 0) for c in _chapters(doc).values())
        seg = has_segments(doc)
        bound |= not seg
        sims = [simulate(doc, n)["wall_s"] for n in SIM_CORES]
        cells = [_dur(s) + ("" if seg else "*") for s in sims]
        wall = float(doc.get("wall_s") or 0)
        rec = f"{doc.get('cores')}: {_dur(wall)}, {_dur(cpu)} CPU"
        same = doc.get("cores") in SIM_CORES and seg and wall > 0
        gap = sims[SIM_CORES.index(doc["cores"])] / wall - 1 if same else 0.0
        if abs(gap) > 0.15:  # the recorded wall and the model of that run disagree: say so, and why
            rec += "†"
            off.append(
                f"`{prof}`: the simulation of the recorded run is {gap:+.0%} off its wall (how that run was "
                f"made, and why: `data/costs/{prof}.json`)"
            )
        lines.append(f"| `{prof}` | {rec} | " + " | ".join(cells) + " |")
    if bound:
        lines.append("")
        lines.append(
            "\\* no per-job costs recorded for this profile yet: each chapter counts as one serial unit, so "
            "the time is an upper bound (`rcbook costs` after a build records them)."
        )
    for o in off:
        lines += ["", f"† {o}."]
    return "\n".join(lines)


def _dur(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 600 else f"{s / 60:.1f} min"


README_BEGIN, README_END = "<!-- rcbook:costs -->", "<!-- rcbook:costs-end -->"


def readme_with_costs(text: str, table: str) -> str:
    """``text`` (README.md) with the block between :data:`README_BEGIN` and :data:`README_END` replaced by
    ``table``."""
    a, b = text.index(README_BEGIN) + len(README_BEGIN), text.index(README_END)
    return text[:a] + "\n" + table + "\n" + text[b:]
