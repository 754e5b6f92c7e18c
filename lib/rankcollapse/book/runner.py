"""Execute chapters: jupytext source -> papermill -> executed notebook, figures and results.json.

Layout of a build (``build/<profile>/``)::

    build/<profile>/<chapter>/<chapter>.ipynb   executed notebook
    build/<profile>/<chapter>/results.json      named values and verdicts
    build/<profile>/<chapter>/figures/*.png     every figure of the chapter
    build/<profile>/<chapter>/.cache_key        what the outputs were made from
    build/<profile>/<chapter>/.states.json      the stored states it consumed, with their content hashes

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

from .. import store
from ..chapters import CHAPTERS
from ..chapters import module as chapter_module
from ..chapters import schema as chapter_schema
from .device import resolve_device
from .params import ParameterError

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


def _local_kernel_manager():
    from jupyter_client.manager import AsyncKernelManager

    class LocalKernelManager(AsyncKernelManager):
        """Kernels talk over local IPC sockets in the run's own folder, not TCP ports, and start through
        :mod:`rankcollapse.book.kernel_launcher`, so a kernel dies with the runner that started it."""

        def __init__(self, **kw):
            kw.setdefault("transport", "ipc")
            super().__init__(**kw)

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


def prepare(name: str, overrides: dict, profile: str, device: str) -> tuple[dict, dict]:
    """Validate everything before any work. Returns (resolved params, papermill parameters)."""
    if name not in CHAPTERS:
        raise ParameterError(f"unknown chapter '{name}'; chapters: {', '.join(CHAPTERS)}")
    if not chapter_source(name).exists():
        raise ParameterError(f"chapter source {chapter_source(name)} is missing")
    given = dict(overrides, profile=profile, device=device)
    resolved = chapter_schema(name).resolve(given)
    resolve_device(resolved["device"])  # cuda asked for but absent -> error now
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
    p = {k: v for k, v in resolved.items() if k != "output_dir"}
    p["device"] = str(resolve_device(p["device"]))
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
) -> RunOutcome:
    """Run one chapter (or reuse its cached outputs). Raises ParameterError before any work on bad input."""
    resolved, pm = prepare(name, overrides or {}, profile, device)
    out = build_dir(profile, root) / name
    key = cache_key(name, resolved)
    if not force and (why := stale_reason(out, key)) is None:
        return RunOutcome(name, "cached", 0.0, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with store.lock(out.parent / ".locks" / f"{name}.lock"):  # one run of a chapter into a folder at a time
        if not force and (why := stale_reason(out, key)) is None:  # made by a concurrent run meanwhile
            return RunOutcome(name, "cached", 0.0, out)
        return _execute(name, resolved, pm, out, key, log_output, why)


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
    sweep_abandoned(out.parent, name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-{os.getpid()}-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(
        tmp, 0o777 & ~umask
    )  # mkdtemp makes it 0700; the output folder it becomes gets the user's usual mode
    t0 = time.perf_counter()
    try:
        src = tmp / f"{name}.source.ipynb"
        nbformat.write(to_notebook(name), src)
        pm["output_dir"] = "."  # the kernel runs in the temporary folder, which becomes `out`
        states_log = tmp / ".states.log"  # every stored state the kernel and its workers read or write
        os.environ[store.STATES_LOG] = str(states_log)
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
            )
        finally:
            os.environ.pop(store.STATES_LOG, None)
        src.unlink()
        if not (tmp / "results.json").exists():
            raise RuntimeError(
                f"chapter '{name}' finished without writing results.json (missing ch.finish()?)"
            )
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
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, KeyboardInterrupt):
            raise
        return RunOutcome(name, "failed", time.perf_counter() - t0, out, describe_failure(name, e, kept))
    return RunOutcome(
        name, "ran", time.perf_counter() - t0, out, "" if why == "not run yet" else f"re-run: {why}"
    )


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
) -> list[RunOutcome]:
    """Run several chapters (validated first, all of them), in parallel processes when ``jobs > 1``."""
    for n in names:  # every chapter's parameters are checked before anything runs
        prepare(n, overrides, profile, device)
    total, outcomes = len(names), []

    def report(i, o):
        extra = f" -- {o.message}" if o.message else ""
        echo(f"[{i}/{total}] {o.chapter:<20} {profile:<6} {o.status:<7} {o.seconds:7.1f} s{extra}")

    echo(
        f"running {total} chapter(s) at profile '{profile}'"
        + (f" with {jobs} processes" if jobs > 1 else "")
    )
    if jobs <= 1:
        for i, n in enumerate(names, 1):
            o = run_chapter(n, overrides, profile, device, force, root, log_output)
            outcomes.append(o)
            report(i, o)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ex = ProcessPoolExecutor(
            max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_init_pool_worker
        )
        try:
            futs = {
                ex.submit(_run_star, (n, overrides, profile, device, force, root, log_output)): n
                for n in names
            }
            for i, f in enumerate(as_completed(futs), 1):
                o = f.result()
                outcomes.append(o)
                report(i, o)
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
            raise
        ex.shutdown(wait=True)
    return outcomes


def _init_pool_worker() -> None:
    """A chapter process of ``run_many``: SIGTERM cleans up like Ctrl-C, and it gets SIGTERM when the runner
    dies (its kernel, in turn, dies with it)."""
    import signal

    from .kernel_launcher import die_with_parent, terminate_gracefully

    terminate_gracefully()
    die_with_parent(signal.SIGTERM)
