"""Execute chapters: jupytext source -> papermill -> executed notebook, figures and results.json.

Layout of a build (``build/<profile>/``)::

    build/<profile>/<chapter>/<chapter>.ipynb   executed notebook
    build/<profile>/<chapter>/results.json      named values and verdicts
    build/<profile>/<chapter>/figures/*.png     every figure of the chapter
    build/<profile>/<chapter>/.cache_key        what the outputs were made from
    build/<profile>/<chapter>/.states.json      the stored states it consumed, with their content hashes
    build/<profile>/jobs.log, steps.log         every training job's cost, every training step (last run)

That folder is the book's: only a run with the profile's own parameters writes it. Any other run (rcbook run
with -p, another device, --out) writes a folder of its own (:func:`rerun_dir`, ``build/reruns/...``).

A chapter is executed again only when its cache key changes: the chapter
source, the source of the library modules it imports (their import closure,
:func:`rankcollapse.store.chapter_code_hash`), the resolved parameters or the
profile/device. Editing a module no chapter imports (``cli.py``) re-executes nothing.
A cached output is served only while every stored state it consumed (trained
networks, read or written by the chapter's kernel and its workers; see
:func:`rankcollapse.store.note_consumed`) is still stored with the content hash it
had, so an output is never served beside states it was not made from.
Two runs of one chapter into one build folder take turns (a file lock); the
second finds the first one's output cached, unless forced.
Execution happens in a temporary folder that replaces the old outputs only on
success, so a failed or interrupted run leaves no partial results behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import cores, store
from ..chapters import CHAPTERS
from ..chapters import module as chapter_module
from ..chapters import schema as chapter_schema
from ..jobs import CHAPTER_ENV, JOB_LOG_ENV, append_line
from .device import resolve_device
from .params import HOW_NOT_WHAT, ParameterError

REPO = Path(os.environ.get("RCBOOK_ROOT", Path(__file__).resolve().parents[3]))


def chapter_source(name: str) -> Path:
    return REPO / "chapters" / f"{name}.md"


def build_dir(profile: str, root: Path | None = None) -> Path:
    """``build/<profile>`` (or ``$RCBOOK_BUILD/<profile>``, or ``root/<profile>``)."""
    return Path(root or os.environ.get("RCBOOK_BUILD") or REPO / "build") / profile


@dataclass
class RunOutcome:
    chapter: str
    status: str  # "ran", "cached", "failed"
    seconds: float
    out: Path
    message: str = ""
    cpu_seconds: float = 0.0  # CPU time of the kernel and every process it waited for (its workers)


class _CellTracker:
    """Whether a cell of the chapter is executing now (set by nbclient's cell hooks, one per process: a
    process of the runner executes one chapter at a time)."""

    running = False

    @classmethod
    def started(cls, **_):
        cls.running = True

    @classmethod
    def finished(cls, **_):
        cls.running = False


def _local_kernel_manager():
    from jupyter_client.manager import AsyncKernelManager

    class LocalKernelManager(AsyncKernelManager):
        """Kernels talk over local IPC sockets in the run's own folder, not TCP ports, and start through
        :mod:`rankcollapse.book.kernel_launcher`, so a kernel dies with the runner that started it.

        Shutting down a kernel that runs no cell (the chapter ended, or failed in a cell) sends it no
        SIGINT: jupyter_client always interrupts first, and an interrupt that lands while the kernel is
        still finishing its last reply was logged as "ERROR | KeyboardInterrupt caught in kernel" after
        chapters that ran and matched. A kernel interrupted mid-cell (Ctrl-C, SIGTERM) still gets it, so
        the cell stops at once and the run resumes from its last checkpoint."""

        def __init__(self, **kw):
            kw.setdefault("transport", "ipc")
            super().__init__(**kw)

        async def _async_interrupt_kernel(self):
            if self.shutting_down and not _CellTracker.running:
                return
            await super()._async_interrupt_kernel()

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if cmd[1:3] == ["-m", "ipykernel_launcher"]:
                cmd[1:3] = ["-m", "rankcollapse.book.kernel_launcher"]
            return cmd

    return LocalKernelManager


def __getattr__(name):  # LocalKernelManager is built lazily so importing the runner stays light
    if name == "LocalKernelManager":
        return _local_kernel_manager()
    raise AttributeError(name)


def kernel_env() -> None:
    """Environment every chapter kernel inherits: one thread, offline, no display, the runner's PID."""
    os.environ["RCBOOK_RUNNER_PID"] = str(os.getpid())
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["MPLBACKEND"] = "Agg"
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")


# parameters the runner sets itself, from its own flags: given with -p they would be ignored or overwritten
RUNNER_SET = {
    "profile": "--profile",
    "device": "--device",
    "output_dir": "--out DIR",
    "workers": "-j/--jobs N (the cores of the whole run; each chapter's training pool takes what is free)",
}


def prepare(name: str, overrides: dict, profile: str, device: str) -> tuple[dict, dict]:
    """Validate everything before any work. Returns (resolved params, papermill parameters)."""
    if name not in CHAPTERS:
        raise ParameterError(f"unknown chapter '{name}'; chapters: {', '.join(CHAPTERS)}")
    if not chapter_source(name).exists():
        raise ParameterError(f"chapter source {chapter_source(name)} is missing")
    for k in overrides:
        if k in RUNNER_SET and k != "workers":  # workers: refused by rcbook run (cli.py), kept for the API
            raise ParameterError(f"parameter '{k}' is set by the runner, not with -p: use {RUNNER_SET[k]}")
    given = dict(overrides, profile=profile, device=device)
    resolved = chapter_schema(name).resolve(given)
    resolve_device(resolved["device"], resolved["profile"])  # cuda asked for but absent -> error now
    check = getattr(chapter_module(name), "validate", None)
    if check is not None:  # checks across parameters (and of files they name), before a kernel starts
        from types import SimpleNamespace

        try:
            check(SimpleNamespace(**resolved))
        except ParameterError:
            raise
        except ValueError as e:  # the science's own errors (a checkpoint that cannot be loaded, ...)
            raise ParameterError(str(e)) from e
    # papermill gets what the user set (validated), not the filled-in defaults
    pm = {k: resolved[k] for k in given if given[k] is not None}
    return resolved, pm


def cache_key(name: str, resolved: dict) -> str:
    """The chapter source, the source of the library modules its code imports
    (:func:`store.chapter_code_hash`: the modules its cells and its chapter module reach by static imports,
    not the runner or the CLI) and the resolved parameters with the device."""
    h = hashlib.sha256()
    h.update(chapter_source(name).read_bytes())
    h.update(store.chapter_code_hash(name).encode())
    p = {k: v for k, v in resolved.items() if k not in HOW_NOT_WHAT}
    p["device"] = str(resolve_device(p["device"], p.get("profile")))
    h.update(json.dumps(p, sort_keys=True).encode())
    return h.hexdigest()


def to_notebook(name: str):
    import jupytext

    nb = jupytext.read(chapter_source(name))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def run_chapter(
    name: str,
    overrides: dict | None = None,
    profile: str = "full",
    device: str = "auto",
    force: bool = False,
    root: Path | None = None,
    log_output: bool = False,
    out: Path | None = None,
) -> RunOutcome:
    """Run one chapter (or reuse its cached outputs) into ``out`` (default ``build/<profile>/<name>``).
    Raises ParameterError before any work on bad input."""
    resolved, pm = prepare(name, overrides or {}, profile, device)
    out = Path(out) if out is not None else build_dir(profile, root) / name
    writable(out)
    if (
        "workers" in resolved
    ):  # the training pool may be as wide as the run's core budget (rankcollapse.cores)
        b = cores.budget()
        if b is not None:
            resolved["workers"] = pm["workers"] = b[1]
    key = cache_key(name, resolved)
    why = "forced (--force)"
    if not force and (why := stale_reason(out, key)) is None:
        return RunOutcome(name, "cached", 0.0, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with store.lock(out.parent / ".locks" / f"{name}.lock"):  # one run of a chapter into a folder at a time
        if not force and (why := stale_reason(out, key)) is None:  # made by a concurrent run meanwhile
            return RunOutcome(name, "cached", 0.0, out)
        return _execute(name, resolved, pm, out, key, log_output, why)


def writable(out: Path) -> None:
    """A named error, before any work, when the outputs cannot be written under ``out``: the nearest folder
    that exists on its path must be a folder this user may write into."""
    p = Path(out).absolute()
    while not p.exists():
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise ParameterError(f"the output folder {out} cannot be made: {p} is a file, not a folder")
    if not os.access(p, os.W_OK | os.X_OK):
        raise ParameterError(
            f"the output folder {out} cannot be written: {p} is not writable by this user "
            "(choose another with --out DIR, or another build root with $RCBOOK_BUILD)"
        )


def is_book_run(name: str, overrides: dict, profile: str, device: str) -> bool:
    """Whether a run is the book's own: every parameter at the profile's value and the device the profile
    picks by itself. Only such a run may write ``build/<profile>/<name>/``, which ``rcbook book`` and
    ``rcbook check`` read."""
    resolved = prepare(name, overrides, profile, device)[0]
    default = prepare(name, {}, profile, "auto")[0]
    same = all(resolved[k] == default[k] for k in resolved if k not in HOW_NOT_WHAT + ("device",))
    return same and str(resolve_device(resolved["device"], profile)) == str(resolve_device("auto", profile))


def rerun_dir(name: str, overrides: dict, profile: str, device: str, root: Path | None = None) -> Path:
    """The folder of a run that is not the book's own (:func:`is_book_run`), named from the chapter, the
    profile and the parameters that differ: ``build/reruns/<chapter>-<profile>-<name=value>...-<hash>/``,
    beside (never inside) the book's ``build/<profile>/``."""
    import re

    resolved = prepare(name, overrides, profile, device)[0]
    default = prepare(name, {}, profile, "auto")[0]
    diff = {k: resolved[k] for k in sorted(resolved) if k not in HOW_NOT_WHAT and resolved[k] != default[k]}
    dev = str(resolve_device(resolved["device"], profile))
    if dev == str(resolve_device("auto", profile)):
        diff.pop("device", None)
    else:
        diff["device"] = dev
    text = "-".join(f"{k}={v}" for k, v in diff.items())
    slug = re.sub(r"[^A-Za-z0-9=.,_-]+", "", text.replace(" ", ""))[:80]
    h = hashlib.sha256(json.dumps(diff, sort_keys=True).encode()).hexdigest()[:8]
    base = Path(root or os.environ.get("RCBOOK_BUILD") or REPO / "build")
    return base / "reruns" / f"{name}-{profile}-{slug}-{h}"


def stale_reason(out: Path, key: str) -> str | None:
    """Why the outputs in ``out`` cannot be served for ``key`` (None when they can): missing, made from other
    inputs, or made from a stored state that has changed since (replaced, moved aside as corrupt,
    removed)."""
    key_file = out / ".cache_key"
    if not (key_file.exists() and (out / "results.json").exists()):
        return "not run yet"
    if key_file.read_text() != key:
        return "its inputs changed"
    try:
        states = json.loads((out / ".states.json").read_text())
    except FileNotFoundError:
        return "made before consumed states were recorded"
    except ValueError:
        return "its record of consumed states is unreadable"
    bad = store.changed_states(states)
    if bad:
        return f"{len(bad)} stored state(s) it was made from changed or are gone (e.g. {bad[0]})"
    return None


def _execute(
    name: str, resolved: dict, pm: dict, out: Path, key: str, log_output: bool, why: str
) -> RunOutcome:
    import nbformat
    import papermill as pm_

    kernel_env()
    if log_output:  # the kernel also streams its progress lines to this terminal (rcbook run -v)
        os.environ["RCBOOK_VERBOSE"] = "1"
    else:
        os.environ.pop("RCBOOK_VERBOSE", None)
    sweep_abandoned(out.parent, name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-{os.getpid()}-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(
        tmp, 0o777 & ~umask
    )  # mkdtemp makes it 0700; the output folder it becomes gets the user's usual mode
    t0, cpu0 = time.perf_counter(), _children_cpu()
    try:
        src = tmp / f"{name}.source.ipynb"
        nbformat.write(to_notebook(name), src)
        pm["output_dir"] = "."  # the kernel runs in the temporary folder, which becomes `out`
        states_log = tmp / ".states.log"  # every stored state the kernel and its workers read or write
        os.environ[store.STATES_LOG] = str(states_log)
        os.environ[CHAPTER_ENV] = name  # names the chapter in the job log (rankcollapse.jobs)
        t_wall0 = time.time()
        _CellTracker.running = False
        try:
            pm_.execute_notebook(
                str(src),
                str(tmp / f"{name}.ipynb"),
                parameters=pm,
                kernel_name="python3",
                cwd=str(tmp),
                progress_bar=False,
                log_output=log_output,
                report_mode=False,
                kernel_manager_class="rankcollapse.book.runner.LocalKernelManager",
                on_cell_execute=_CellTracker.started,
                on_cell_executed=_CellTracker.finished,
            )
        finally:
            os.environ.pop(store.STATES_LOG, None)
            os.environ.pop(CHAPTER_ENV, None)
        if os.environ.get(JOB_LOG_ENV):  # where the chapter's serial time lies around its stages
            append_line(
                os.environ[JOB_LOG_ENV],
                {"chapter": name, "kind": "chapter", "t0": t_wall0, "t1": time.time()},
            )
        src.unlink()
        if not (tmp / "results.json").exists():
            raise RuntimeError(
                f"chapter '{name}' finished without writing results.json (missing ch.finish()?)"
            )
        cpu = _children_cpu() - cpu0  # the kernel has exited and been waited for: its CPU time is in
        _add_cpu_time(tmp / "results.json", cpu)
        (tmp / ".states.json").write_text(json.dumps(store.consumed(states_log), indent=1) + "\n")
        states_log.unlink(missing_ok=True)
        (tmp / ".cache_key").write_text(key)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException as e:
        kept = None
        if not isinstance(e, KeyboardInterrupt) and (tmp / f"{name}.ipynb").exists():
            kept = out.parent / "failed" / f"{name}.ipynb"  # the executed notebook, with its traceback
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / f"{name}.ipynb", kept)
            if (tmp / "progress.log").exists():  # and how far it got
                shutil.copy(tmp / "progress.log", kept.with_suffix(".progress.log"))
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, KeyboardInterrupt):
            raise
        return RunOutcome(name, "failed", time.perf_counter() - t0, out, describe_failure(name, e, kept))
    return RunOutcome(
        name,
        "ran",
        time.perf_counter() - t0,
        out,
        "" if why == "not run yet" else f"re-run: {why}",
        cpu_seconds=cpu,
    )


def _children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children (and theirs, once waited for)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _add_cpu_time(path: Path, cpu: float) -> None:
    """Write the chapter's CPU time into its results file, right after its wall time (both volatile: never
    compared with the record). Wall time well above CPU time means the chapter waited for cores."""
    doc = json.loads(path.read_text())
    out = {}
    for k, v in doc.items():
        out[k] = v
        if k == "wall_time_s":
            out["cpu_time_s"] = round(cpu, 3)
    out.setdefault("cpu_time_s", round(cpu, 3))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def sweep_abandoned(folder: Path, name: str) -> list[Path]:
    """Remove the partial folders ``.<name>-<pid>-*`` of runs whose process is gone (killed, say), and those
    of runners too old to name their PID. A folder of a live run is left alone. Returns what was removed."""
    gone = []
    for d in folder.glob(f".{name}-*"):
        rest = d.name[len(name) + 2 :]
        pid = rest.split("-", 1)[0]
        if d.is_dir() and not (pid.isdigit() and _alive(int(pid))):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def chapter_cell(name: str, cell_index: int | None, source: str | None) -> str:
    """``code cell N of the chapter ('first line')``: N counts the chapter's own code cells (papermill's
    injected-parameters cell is not one of them)."""
    if cell_index is None:
        return ""
    nb = to_notebook(name)
    own = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    # the executed notebook has papermill's injected cell right after the parameters cell
    params_at = next(
        (i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])), None
    )
    idx = cell_index if params_at is None or cell_index <= params_at else cell_index - 1
    n = sum(1 for i in own if i <= idx)
    first = (source or (nb.cells[idx].source if idx < len(nb.cells) else "")).strip().splitlines()
    return f" in code cell {n} of the chapter ('{first[0][:80] if first else ''}')"


def describe_failure(name: str, e: BaseException, kept: Path | None = None) -> str:
    """Name the chapter, the cell that raised (by its number among the chapter's own code cells and its first
    line) and where the failed notebook was kept."""
    where = ""
    try:
        where = chapter_cell(name, getattr(e, "cell_index", None), getattr(e, "source", None))
    except Exception:  # naming the cell must never hide the failure itself
        pass
    ename, evalue = getattr(e, "ename", type(e).__name__), getattr(e, "evalue", str(e))
    msg = f"chapter '{name}' failed{where}: {ename}: {evalue}"
    if kept is not None:
        msg += f"\n  the executed notebook, with its traceback: {kept}"
    return msg


def _run_star(args):
    try:
        return run_chapter(*args)
    except KeyboardInterrupt:  # interrupted (SIGTERM from the runner): cleaned up; take no next chapter
        os._exit(130)


def run_many(
    names: list[str],
    overrides: dict,
    profile: str,
    device: str,
    force: bool = False,
    jobs: int = 1,
    root: Path | None = None,
    echo=print,
    log_output: bool = False,
    outs: dict[str, Path] | None = None,
    progress: bool = True,
) -> list[RunOutcome]:
    """Run several chapters (validated first, all of them), in parallel processes when ``jobs > 1``.

    ``jobs`` is a budget of cores (:mod:`rankcollapse.cores`): up to ``jobs`` chapters run at once, the
    longest first (by what they cost from an empty store, ``data/costs/<profile>.json``; a chapter never
    timed counts as longest), so the critical path begins at once; a chapter's kernel and each of its
    training jobs hold one core while they compute, and a chapter's training pool may be as wide as the
    budget, so cores left idle by one chapter serve another, and no more than ``jobs`` processes compute at
    once. ``outs``: chapter -> output folder (default ``build/<profile>/<chapter>``). ``progress``: show
    live progress (:class:`rankcollapse.book.progress.Progress`)."""
    from .progress import Progress

    for n in names:  # all checked before any runs
        prepare(n, overrides, profile, device)
    outs = {n: Path((outs or {}).get(n) or build_dir(profile, root) / n) for n in names}
    for n in names:
        writable(outs[n])
    total, outcomes = len(names), []
    jobs = max(1, jobs)
    t_start = time.perf_counter()
    book_run = all(outs[n] == build_dir(profile, root) / n for n in names)
    log_dir = build_dir(profile, root) if book_run else outs[names[0]].parent
    ledger = start_step_ledger(log_dir) if total > 1 else None
    if total > 1:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / JOB_LOG).write_text("")
        os.environ[JOB_LOG_ENV] = str(log_dir / JOB_LOG)
    slots = Path(tempfile.mkdtemp(prefix=".cores-", dir=_mkdir(log_dir)))
    cores.setup(slots, jobs)
    show = Progress(
        outs,
        {n: expected_seconds(n, profile) for n in names},
        jobs,
        profile,
        live=None if progress else False,
    )
    if not progress:
        show.poll = lambda: None  # no stage lines either

    def report(i, o):
        extra = f" -- {o.message}" if o.message else ""
        cpu = f" (cpu {o.cpu_seconds:7.1f} s)" if o.status == "ran" else ""
        show.end(
            o.chapter,
            o.status,
            f"[{i}/{total}] {o.chapter:<20} {profile:<6} {o.status:<7} {o.seconds:7.1f} s{cpu}{extra}",
        )

    echo(
        f"running {total} chapter(s) at profile '{profile}' on {jobs} core(s)"
        + (f", {min(jobs, total)} chapter(s) at once" if jobs > 1 and total > 1 else "")
    )
    try:
        with show:
            if jobs <= 1 or total == 1:
                for i, n in enumerate(names, 1):
                    show.start(n)
                    o = run_chapter(n, overrides, profile, device, force, root, log_output, outs[n])
                    outcomes.append(o)
                    report(i, o)
            else:
                _run_parallel_chapters(
                    names,
                    overrides,
                    profile,
                    device,
                    force,
                    root,
                    log_output,
                    outs,
                    jobs,
                    show,
                    outcomes,
                    report,
                )
    finally:
        shutil.rmtree(slots, ignore_errors=True)
    if total > 1 and any(o.status == "ran" for o in outcomes):  # an all-cached run says nothing of cores
        write_run_log(log_dir, outcomes, jobs, time.perf_counter() - t_start, ledger)
    return outcomes


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _run_parallel_chapters(
    names, overrides, profile, device, force, root, log_output, outs, jobs, show, outcomes, report
) -> None:
    """Up to ``jobs`` chapters at once in spawned processes, the longest first."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    seats = min(jobs, len(names))
    ex = ProcessPoolExecutor(
        max_workers=seats, mp_context=mp.get_context("spawn"), initializer=_init_pool_worker
    )
    queue = schedule(names, profile)
    running: dict = {}  # future -> chapter
    try:
        while queue or running:
            while queue and len(running) < seats:
                n = queue.pop(0)
                args = (n, overrides, profile, device, force, root, log_output, outs[n])
                running[ex.submit(_run_star, args)] = n
                show.start(n)
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                running.pop(f)
                o = f.result()
                outcomes.append(o)
                report(len(outcomes), o)
    except BaseException:
        # interrupted (Ctrl-C, SIGTERM) or failed: every chapter process cleans up now and ends (none
        # takes the next chapter); one still alive after a grace period is killed
        procs = list((getattr(ex, "_processes", None) or {}).values())
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        ex.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + 20
        for proc in procs:
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
        # a chapter process ended by the signal before its own clean-up ran (between making its partial
        # folder and entering the block that removes it, or killed after the grace period) leaves
        # `.<chapter>-<pid>-*`: every process is gone now, so its partial folder goes too
        for n in names:
            sweep_abandoned(outs[n].parent, n)
        raise
    ex.shutdown(wait=True)


RUN_LOG = "last-run.json"
JOB_LOG = "jobs.log"  # every training job's cost (rankcollapse.jobs), read by rcbook costs
STEP_LEDGER = "steps.log"


def start_step_ledger(folder: Path) -> Path:
    """A fresh step ledger ``<build>/<profile>/steps.log`` for this run, named to every training process
    through ``$RCBOOK_STEP_LEDGER`` (:func:`rankcollapse.lm.training.log_steps`)."""
    from ..lm.training import STEP_LEDGER_ENV

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STEP_LEDGER
    path.write_text("")
    os.environ[STEP_LEDGER_ENV] = str(path)
    return path


def write_run_log(
    folder: Path, outcomes: list[RunOutcome], cores: int, wall: float, ledger: Path | None = None
) -> Path:
    """``<build>/<profile>/last-run.json``: the last multi-chapter run's wall time, its core budget, each
    chapter's status, wall and CPU time, so that ``bench/all.py`` can say how busy the cores were (the CPU
    time of the chapters that ran over cores x wall time), and the training steps of the run: how many
    were trained and how many of them were unique (the step ledger)."""
    folder.mkdir(parents=True, exist_ok=True)
    unique, trained = (0, 0)
    if ledger is not None:
        from ..lm.training import ledger_counts

        unique, trained = ledger_counts(ledger)
    doc = {
        "cores": cores,
        "wall_s": round(wall, 3),
        "steps_trained": trained,
        "steps_unique": unique,
        "chapters": {
            o.chapter: {"status": o.status, "wall_s": round(o.seconds, 3), "cpu_s": round(o.cpu_seconds, 3)}
            for o in outcomes
        },
    }
    path = folder / RUN_LOG
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def costs_path(profile: str) -> Path:
    """``data/costs/<profile>.json``: what each chapter cost when it trained everything it needs from an
    empty store (:func:`record_costs`)."""
    return REPO / "data" / "costs" / f"{profile}.json"


def scratch_costs(profile: str) -> dict:
    """{chapter: {"wall_s", "cpu_s"[, "segments"]}} from :func:`costs_path`, or {} when none is recorded
    (``segments``: see :mod:`rankcollapse.book.schedule`)."""
    try:
        return dict(json.loads(costs_path(profile).read_text())["chapters"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def record_costs(profile: str, last_run: Path, how: str, job_log: Path | None = None) -> Path:
    """Write :func:`costs_path` from a multi-chapter run's ``last-run.json`` (:func:`write_run_log`), with
    ``how`` saying how it was made (commit, empty store, machine). Every chapter of that run must have run:
    a cached one says nothing about its cost. Raises :class:`ParameterError` before writing anything.

    The run's job log (``job_log``, default ``jobs.log`` beside the run log; :mod:`rankcollapse.jobs`), when
    it names the run's chapters, adds each chapter's ``segments`` (serial CPU time and stages of job CPU
    times, in time order: :func:`rankcollapse.book.schedule.fold_job_log`), which
    :func:`rankcollapse.book.schedule.simulate` replays on other numbers of cores. Without one no chapter
    gets segments."""
    if not how.strip():
        raise ParameterError("parameter 'how' is empty: say how the run was made (commit, store, machine)")
    try:
        doc = json.loads(Path(last_run).read_text())
        chapters = doc["chapters"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ParameterError(f"'{last_run}' is not a run log written by a multi-chapter run: {e}") from None
    cached = [n for n, c in chapters.items() if c.get("status") != "ran"]
    if cached:
        raise ParameterError(
            f"chapters {', '.join(cached)} did not run in '{last_run}' (cached or failed): a run log "
            "records costs only when every chapter ran, from an empty store"
        )
    from .schedule import JobLogMismatch, fold_job_log, read_job_log

    job_log = Path(job_log) if job_log is not None else Path(last_run).parent / JOB_LOG
    try:
        segments = fold_job_log(read_job_log(job_log), chapters)
    except JobLogMismatch as e:
        raise ParameterError(f"'{job_log}' does not belong to the run of '{last_run}': {e}") from None
    out = {
        "how": how,
        "cores": doc.get("cores"),
        "wall_s": doc.get("wall_s"),
        "steps_trained": doc.get("steps_trained"),
        "steps_unique": doc.get("steps_unique"),
        "chapters": {
            n: {"wall_s": c["wall_s"], "cpu_s": c["cpu_s"]} | ({"segments": segments[n]} if segments else {})
            for n, c in chapters.items()
        },
    }
    path = costs_path(profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    return path


def expected_seconds(name: str, profile: str) -> float:
    """What the chapter is expected to cost at ``profile``: its CPU seconds from an empty store
    (:func:`scratch_costs`) when recorded, else its recorded wall time (``data/expected``), inf when it was
    never timed. A record re-made from saved states times only their loading, so by itself it would start a
    chapter that trains for an hour after one that takes a minute."""
    from .records import expected_path

    c = scratch_costs(profile).get(name)
    if c and c.get("cpu_s"):
        return float(c["cpu_s"])
    try:
        return float(json.loads(expected_path(profile, name).read_text())["wall_time_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return float("inf")


def schedule(names: list[str], profile: str) -> list[str]:
    """Chapters in starting order: the longest expected first (ties in the order given)."""
    return sorted(names, key=lambda n: -expected_seconds(n, profile))


def _init_pool_worker() -> None:
    """A chapter process of ``run_many``: SIGTERM cleans up like Ctrl-C, and it gets SIGTERM when the runner
    dies (its kernel, in turn, dies with it)."""
    import signal

    from .kernel_launcher import die_with_parent, terminate_gracefully

    terminate_gracefully()
    die_with_parent(signal.SIGTERM)
