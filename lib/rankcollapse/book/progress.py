"""What a person watching ``rcbook run``/``rcbook book`` sees while chapters run.

On a terminal, a live panel (rich): chapters done of total, each running chapter's latest stage line (the
last line of its ``progress.log``), elapsed time and an ETA. On anything else (a CI log, a pipe) one plain
line per stage as it appears, and one per chapter as it ends, so a log shows where a long build is.

The ETA counts what the chapters not yet ended are expected to cost, from ``data/costs/<profile>.json``
(what each chapter cost from an empty store, in CPU seconds, on the cores it had): the longest of the running
chapters' remaining times and the remaining CPU time spread over the cores, whichever is larger. A store
that already holds trained states makes the build faster than that; the panel says the ETA assumes an
empty store. A running chapter's current stage of training jobs (its ``N jobs, W at a time`` and
``done: <label> (k of N)`` lines, :func:`rankcollapse.jobs.run_parallel`) also says what that stage has
left, at the pace of its most recent jobs (a resumed stage serves its finished jobs from the store at once,
so its pace since the stage began would say nothing of the jobs still to train); the chapter's remaining
time is never less than that. A chapter that
has run past its recorded cost (a slower machine, a chapter run alone that trains what the book's order
had another chapter train, or code that grew since the costs were recorded) has no estimate beyond its
current stage: the ETA is then a lower bound and says so, naming the chapter, rather than a guess.
Runner-side: nothing here changes what a chapter computes.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

from ..jobs import DONE_RE, STAGE_RE
from .notebook import PROGRESS_LOG

_LINE = re.compile(r"^\[\S+\s+([0-9.]+)s\] (.*)$")  # "[<chapter> <seconds>s] <message>" (notebook.progress)
_STAGE, _DONE = re.compile(STAGE_RE), re.compile(DONE_RE)
PACE_WINDOW = 4  # the stage's pace is read over its last max(PACE_WINDOW, 2 x workers) finished jobs


def _fmt(s: float) -> str:
    s = max(0, int(round(s)))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Progress:
    """Progress of a multi-chapter (or one-chapter) run. ``outs``: chapter -> the folder its outputs go to
    (a running chapter writes into a temporary ``.<chapter>-<pid>-*`` folder beside it). ``expected``:
    chapter -> expected seconds (from an empty store), ``inf`` when unknown."""

    def __init__(
        self,
        outs: dict[str, Path],
        expected: dict[str, float],
        cores: int,
        profile: str,
        stream=None,
        live: bool | None = None,
        interval: float | None = None,
    ):
        self.outs, self.expected, self.cores, self.profile = outs, expected, max(1, cores), profile
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.interval = interval if interval is not None else (1.0 if self.live else 2.0)
        self.t0 = time.perf_counter()
        self.started: dict[str, float] = {}
        self.ended: dict[str, str] = {}
        self.last_line: dict[str, str] = {}
        # chapter -> its current stage: {"t0", "n", "k", "tk"} in the chapter's own seconds, and "at": the
        # chapter's seconds of its latest line with the runner's clock when that line was read
        self.stage: dict[str, dict] = {}
        self._seen: dict[Path, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._live = None

    # -- events from the runner ---------------------------------------------------------------------------
    def start(self, name: str) -> None:
        with self._lock:
            self.started.setdefault(name, time.perf_counter())

    def end(self, name: str, status: str, line: str) -> None:
        with self._lock:
            self._poll_one(name)
            self.ended[name] = status
        self.say(line)

    def say(self, line: str) -> None:
        if self._live is not None:
            self._live.console.print(line, highlight=False, markup=False)
        else:
            print(line, file=self.stream, flush=True)

    # -- the stage lines ----------------------------------------------------------------------------------
    def _logs(self, name: str) -> list[Path]:
        out = self.outs[name]
        return sorted(out.parent.glob(f".{name}-*/{PROGRESS_LOG}"), key=lambda p: p.stat().st_mtime)

    def _poll_one(self, name: str) -> None:
        try:
            logs = self._logs(name)
        except OSError:
            return
        for log in logs:
            try:
                lines = log.read_text().splitlines()
            except OSError:
                continue
            new = lines[self._seen.get(log, 0) :]
            self._seen[log] = len(lines)
            for ln in new:
                self._read_stage(name, ln)
            if new:
                self.last_line[name] = new[-1]
                if not self.live:
                    for ln in new:
                        print(f"  {ln}", file=self.stream, flush=True)

    def poll(self) -> None:
        with self._lock:
            for name in list(self.started):
                if name not in self.ended:
                    self._poll_one(name)

    def _read_stage(self, name: str, line: str) -> None:
        m = _LINE.match(line)
        if not m:
            return
        t, msg = float(m.group(1)), m.group(2)
        st = self.stage.get(name)
        if (o := _STAGE.search(msg)) is not None:
            self.stage[name] = st = {"t0": t, "n": int(o.group(1)), "w": int(o.group(2)), "k": 0, "done": []}
        elif (d := _DONE.match(msg)) is not None and st is not None and int(d.group(2)) == st["n"]:
            st["k"] = int(d.group(1))
            st["done"].append(t)
        if st is not None:
            st["at"] = (t, time.perf_counter())

    def stage_left(self, name: str, now: float | None = None) -> float | None:
        """Seconds the running chapter's current stage still needs at the pace of its most recent finished
        jobs (None: no stage under way, or none of its jobs finished yet). The pace is the time its last
        ``max(PACE_WINDOW, 2 x workers)`` jobs took to finish (from the stage's start while fewer have), so
        jobs served from the store when a run resumes stop counting once that many have trained."""
        st = self.stage.get(name)
        if not st or not st["k"] or st["k"] >= st["n"]:
            return None
        t_line, seen = st["at"]
        t_now = t_line + ((time.perf_counter() if now is None else now) - seen)  # the chapter's seconds now
        times = [st["t0"], *st["done"]]
        w = min(len(times) - 1, max(PACE_WINDOW, 2 * st["w"]))
        per_job = (times[-1] - times[-1 - w]) / w
        return max(0.0, times[-1] + (st["n"] - st["k"]) * per_job - t_now)

    # -- the estimate -------------------------------------------------------------------------------------
    def _estimate(self) -> tuple[float | None, list[str]]:
        """(seconds still expected, the running chapters past their recorded cost). With such chapters the
        seconds are a lower bound: those chapters count only what their current stage has left."""
        now = time.perf_counter()
        left_work, longest, past = 0.0, 0.0, []
        for name in self.outs:
            if name in self.ended:
                continue
            e = self.expected.get(name, float("inf"))
            if e == float("inf"):
                return None, past
            if name in self.started:
                ran = now - self.started[name]
                stage = self.stage_left(name, now) or 0.0
                if ran < e:
                    left = max(e - ran, stage)
                else:  # past its recorded cost: nothing known beyond its current stage
                    left = stage
                    past.append(name)
            else:
                left = e
            left_work += left
            longest = max(longest, left)
        return max(longest, left_work / self.cores), past

    def eta(self) -> float | None:
        """Seconds still expected (None when a chapter left has no recorded cost); a lower bound when a
        running chapter has passed its recorded cost (:meth:`summary` says so)."""
        return self._estimate()[0]

    def summary(self) -> str:
        done, total = len(self.ended), len(self.outs)
        eta, past = self._estimate()
        if eta is None:
            eta_s = "unknown (no recorded cost)"
        elif past:
            one = len(past) == 1
            eta_s = (
                f"at least ~{_fmt(eta)} ({', '.join(past)} ran past {'its' if one else 'their'} recorded "
                f"cost{'' if one else 's'} from an empty store, so only {'its' if one else 'their'} current "
                f"stage{'' if one else 's'} {'is' if one else 'are'} counted)"
            )
        else:
            eta_s = f"~{_fmt(eta)} (from an empty store)"
        return f"{done}/{total} chapters done, {_fmt(time.perf_counter() - self.t0)} elapsed, ETA {eta_s}"

    def _panel(self):
        from rich.table import Table

        t = Table.grid(padding=(0, 1))
        t.add_row(f"[bold]rcbook[/] {self.profile}: {self.summary()}")
        now = time.perf_counter()
        for name, t_start in self.started.items():
            if name in self.ended:
                continue
            line = self.last_line.get(name, "(starting)")
            t.add_row(f"  {name:<18} {_fmt(now - t_start):>7}  {line[-100:]}")
        return t

    # -- the loop -----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        last_plain = time.perf_counter()
        while not self._stop.wait(self.interval):
            self.poll()
            if self._live is not None:
                self._live.update(self._panel())
            elif time.perf_counter() - last_plain >= 60:  # a heartbeat in logs, once a minute
                last_plain = time.perf_counter()
                print(f"  [{self.summary()}]", file=self.stream, flush=True)

    def __enter__(self):
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._panel(), console=Console(file=self.stream), refresh_per_second=2, transient=True
            )
            self._live.__enter__()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
        return False
