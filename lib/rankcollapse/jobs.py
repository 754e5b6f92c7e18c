"""Where independent training jobs run: the local process pool (the default) or a Dask cluster.

:func:`run_parallel` is ``[fn(**job) for job in jobs]``. Each job is deterministic and reads and writes its
states in the shared store (``$RCBOOK_STATES``), so where it runs changes nothing but the wall time:

* ``workers <= 1``: in this process, one after another;
* else, by default, in ``workers`` spawned processes of this machine (one thread each; they die with the
  process that started them);
* with a scheduler (``RCBOOK_SCHEDULER``, set by ``rcbook run --scheduler``): on a Dask ``distributed``
  cluster — ``local`` starts a :class:`distributed.LocalCluster` of ``workers`` one-thread processes on this
  machine, any other value is the address of a running scheduler (``tcp://host:8786``). The cluster's
  workers must see the same store path and the same library.

**What a job sees.** A job sees the environment variables of :data:`FORWARDED_ENV` as the process that
called :func:`run_parallel` has them, wherever it runs: the store and build roots, the states log
(``$RCBOOK_STATES_LOG``: which stored networks the chapter used), the step ledger (``$RCBOOK_STEP_LEDGER``),
the job log (below), thread counts, offline switches, the compile cache, and the kernel variant
(:mod:`rankcollapse.book.kernels`). Spawned local workers inherit them. On Dask, each job sets the
submitter's values (and unsets those the submitter has not set) for its duration, and restores the worker's
own after, so the workers must run one thread each (``dask worker --nthreads 1``). The kernel switches
(:data:`KERNEL_ENV`) act only when torch is imported, so they cannot be set per job: a ``local`` cluster
gets them when its worker processes are created (``LocalCluster(env=...)``), and on a cluster started
elsewhere each job checks that its worker was started with the submitter's switches and the same CPU
capability (when the submitter has imported torch), and refuses to run otherwise: a state trained with other
kernels has other rounding under the same content key.

**Job log.** When ``$RCBOOK_JOB_LOG`` names a file, every job appends one JSON line to it, and every call of
:func:`run_parallel` (a *stage*) one more when its last job has finished::

    {"chapter": $RCBOOK_CHAPTER or "", "stage": "<pid>-<n>", "label": ..., "cpu_s": ..., "wall_s": ...,
     "t0": ..., "t1": ..., "host": ...}
    {"chapter": ..., "stage": "<pid>-<n>", "kind": "stage", "mode": "serial" | "pool" | "dask-local" |
     "dask-remote", "t0": ..., "t1": ..., "n_jobs": ..., "workers": ...}

``cpu_s`` is the CPU time (user + system) of the process that ran the job, measured around ``fn`` in that
process, plus that of any child processes it waited for meanwhile; ``t0``/``t1`` are ``time.time()`` there.
The stage id is unique per call within a process (the process id and a counter). The submitting process
writes the lines (one ``write`` each, to a file opened for appending: concurrent chapters do not
interleave), so a remote worker needs no access to the file. ``rcbook costs``
(:func:`rankcollapse.book.runner.record_costs`) folds the log into each chapter's segments, which
:mod:`rankcollapse.book.schedule` replays. Nothing of this changes a result.

This module is not imported by the training code, so choosing where jobs run never changes a trained
state's content key; it imports no other module of the package but :mod:`rankcollapse.procs` and
:mod:`rankcollapse.cores`, so the
environment variables it forwards are named here (``tests/test_jobs_dask.py`` checks them against
:data:`rankcollapse.store.STATES_LOG`, :data:`rankcollapse.lm.training.STEP_LEDGER_ENV` and
:data:`rankcollapse.book.kernels.SWITCHES`).
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import json
import multiprocessing as mp
import os
import socket
import time

from . import cores

SCHEDULER_ENV = "RCBOOK_SCHEDULER"
JOB_LOG_ENV = "RCBOOK_JOB_LOG"
CHAPTER_ENV = "RCBOOK_CHAPTER"

# The kernel variant's switches: rankcollapse.book.kernels.SWITCHES (everything kernels.env_for sets). They
# act when torch is imported, so a Dask worker is started with them, never switched per job.
KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")

# Every variable a job sees as the submitting process has it, wherever the job runs. Not forwarded:
# RCBOOK_SCHEDULER (a job never hands its own jobs to the cluster it runs on), RCBOOK_RUNNER_PID (which
# process a chapter's kernel dies with) and PYTHONHASHSEED (read at interpreter start; Dask's nanny sets its
# own, and no result depends on it).
FORWARDED_ENV = (
    # where states and records lie
    "RCBOOK_ROOT",
    "RCBOOK_BUILD",
    "RCBOOK_STATES",
    "RCBOOK_CACHE",
    "RCBOOK_EXPECTED",
    # what the runner records of a chapter: rankcollapse.store.STATES_LOG, the step ledger
    # (rankcollapse.lm.training.STEP_LEDGER_ENV, named here so as not to import torch), the job log
    "RCBOOK_STATES_LOG",
    "RCBOOK_STEP_LEDGER",
    JOB_LOG_ENV,
    CHAPTER_ENV,
    # how a chapter computes and reports
    "RCBOOK_THREADS",
    "RCBOOK_VERBOSE",
    "RCBOOK_INDUCTOR_CACHE",
    "TORCHINDUCTOR_CACHE_DIR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    *KERNEL_ENV,
)

_STAGES = itertools.count(1)


def _init_worker():
    """A worker of the local pool: one thread, and it dies with the process that started it (a chapter's
    kernel killed by any signal takes its workers with it)."""
    import signal

    import torch

    from .procs import die_with_parent

    torch.set_num_threads(1)
    die_with_parent(signal.SIGKILL)


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for children (a job that runs a pool of its own)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _timed(fn, kwargs) -> tuple:
    """``(fn(**kwargs), {"cpu_s", "wall_s", "t0", "t1", "host"})``, measured in the process that runs it."""
    c0, t0, p0 = _cpu(), time.time(), time.perf_counter()
    out = fn(**kwargs)
    c1, t1, p1 = _cpu(), time.time(), time.perf_counter()
    rec = {"cpu_s": round(c1 - c0, 4), "wall_s": round(p1 - p0, 4), "t0": t0, "t1": t1}
    return out, dict(rec, host=socket.gethostname())


def _call(fn, kwargs):
    """A job in a pool worker: it computes while it holds one core of the run's budget (rankcollapse.cores;
    nothing outside the runner), and the wait for that core is not part of its time."""
    with cores.slot():
        return _timed(fn, kwargs)


def scheduler() -> str | None:
    """The scheduler named by ``$RCBOOK_SCHEDULER`` (``local`` or an address), or None: the local pool."""
    s = os.environ.get(SCHEDULER_ENV, "").strip()
    return s or None


def forwarded_env() -> dict[str, str]:
    """The variables of :data:`FORWARDED_ENV` this process has set."""
    return {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}


def append_line(path: str | os.PathLike, d: dict) -> None:
    """Append ``d`` as one JSON line, in one ``write`` to a file opened for appending (concurrent writers
    do not interleave)."""
    line = (json.dumps(d, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class _JobLog:
    """The records of one stage, written to ``$RCBOOK_JOB_LOG`` (nothing when it is unset)."""

    def __init__(self, n_jobs: int, workers: int, mode: str):
        self.path = os.environ.get(JOB_LOG_ENV) or None
        self.chapter = os.environ.get(CHAPTER_ENV, "")
        self.stage = f"{os.getpid()}-{next(_STAGES)}"
        self.n_jobs, self.workers, self.mode = n_jobs, workers, mode
        self.t0 = time.time()

    def job(self, label: str, rec: dict) -> None:
        if self.path:
            append_line(self.path, dict(rec, chapter=self.chapter, stage=self.stage, label=str(label)))

    def done(self) -> None:
        if self.path:
            append_line(
                self.path,
                {
                    "chapter": self.chapter,
                    "stage": self.stage,
                    "kind": "stage",
                    "mode": self.mode,
                    "t0": self.t0,
                    "t1": time.time(),
                    "n_jobs": self.n_jobs,
                    "workers": self.workers,
                },
            )


STAGE_RE = r"(\d+) jobs?, (\d+) at a time$"  # what stage_line writes
DONE_RE = r"^done: .* \((\d+) of (\d+)\)$"  # what done_line writes


def stage_line(n: int, workers: int) -> str:
    """The progress line that opens a stage of ``n`` jobs run ``workers`` at a time (matches STAGE_RE)."""
    return f"{n} job{'s' if n != 1 else ''}, {workers} at a time"


def done_line(label: str, k: int, n: int) -> str:
    """The progress line of the ``k``-th of ``n`` jobs of a stage to finish (matches DONE_RE)."""
    return f"done: {label} ({k} of {n})"


def run_parallel(fn, jobs: list[dict], workers: int = 1, log=None, labels=None, scheduler_=None) -> list:
    """``[fn(**job) for job in jobs]``: in this process when ``workers <= 1`` (and no scheduler), else in
    spawned processes (one thread each), or on the Dask cluster of ``scheduler_`` (default:
    :func:`scheduler`). Results come back in job order; ``log`` gets :func:`stage_line` before the first job
    and :func:`done_line` (``done: <label> (k of n)``) as each finishes, from which the runner's ETA reads
    what the stage has left (:mod:`rankcollapse.book.progress`); each job and the stage are recorded in
    ``$RCBOOK_JOB_LOG`` when it is set."""
    if not jobs:
        return []
    labels = labels or [str(i) for i in range(len(jobs))]
    sched = scheduler() if scheduler_ is None else scheduler_
    n = len(jobs)
    if sched is not None:
        mode = "dask-local" if sched == "local" else "dask-remote"
        jl = _JobLog(n, max(1, workers), mode)
        if log:
            log(stage_line(n, min(max(1, workers), n)))
        out = _run_dask(fn, jobs, workers, log, labels, sched, jl)
        jl.done()
        return out
    if workers <= 1 or n <= 1:
        jl = _JobLog(n, 1, "serial")
        if log:
            log(stage_line(n, 1))
        out = []
        for k, (lab, j) in enumerate(zip(labels, jobs), 1):
            res, rec = _timed(fn, j)
            out.append(res)
            jl.job(lab, rec)
            if log:
                log(done_line(lab, k, n))
        jl.done()
        return out
    workers = min(workers, n)
    jl = _JobLog(n, workers, "pool")
    if log:
        log(stage_line(n, workers))
    ctx = mp.get_context("spawn")
    res_ = [None] * n
    # this process only waits meanwhile: its core of the run's budget goes to the jobs (rankcollapse.cores)
    with cores.released(), cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as ex:
        futs = {ex.submit(_call, fn, j): i for i, j in enumerate(jobs)}
        for k, f in enumerate(cf.as_completed(futs), 1):
            i = futs[f]
            res_[i], rec = f.result()
            jl.job(labels[i], rec)
            if log:
                log(done_line(labels[i], k, n))
    jl.done()
    return res_


def _dask_worker_setup():
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _cpu_capability() -> str | None:
    """torch's CPU capability in this process, when torch is imported here (None otherwise: importing it
    just to ask would fix the kernel switches of a process that has not chosen them yet)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # pragma: no cover - an old torch
        return None


def _run_dask(fn, jobs, workers, log, labels, sched: str, jl: _JobLog) -> list:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as e:  # pragma: no cover - dask is a dependency of the package
        raise RuntimeError(
            f"{SCHEDULER_ENV}={sched!r} asks for a Dask cluster, but dask.distributed is not installed "
            "(pip install 'dask[distributed]')"
        ) from e
    env = forwarded_env()
    cluster = None
    if sched == "local":
        # the worker processes start with the submitter's environment, kernel switches included (torch
        # reads them when imported); the nanny's pre-spawn settings must not leak into this process
        before = dict(os.environ)
        try:
            cluster = LocalCluster(
                n_workers=max(1, workers),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                env=env,
            )
        finally:
            os.environ.clear()
            os.environ.update(before)
        client = Client(cluster)
    else:
        client = Client(sched)
    try:
        client.run(_dask_worker_setup)
        want = {"env": env, "cpu_capability": _cpu_capability()}
        futs = [client.submit(_call_env, fn, j, want, pure=False) for j in jobs]
        index = {f.key: i for i, f in enumerate(futs)}
        res_ = [None] * len(jobs)
        for k, f in enumerate(as_completed(futs), 1):
            i = index[f.key]
            res_[i], rec = f.result()
            jl.job(labels[i], rec)
            if log:
                log(done_line(f"{labels[i]} (dask)", k, len(jobs)))
        return res_
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def check_kernels(want: dict) -> None:
    """Raise ``RuntimeError`` unless this process computes with the kernel switches ``want["env"]`` names
    (:data:`KERNEL_ENV`; unset where the submitter has none) and, when known, its CPU capability."""
    env = want.get("env", {})
    mine = {k: os.environ[k] for k in KERNEL_ENV if k in os.environ}
    theirs = {k: env[k] for k in KERNEL_ENV if k in env}
    where = f"Dask worker on {socket.gethostname()} (pid {os.getpid()})"
    if mine != theirs:
        raise RuntimeError(
            f"{where} was started with kernel switches {mine or 'none (native)'}, but the job was "
            f"submitted under {theirs or 'none (native)'}: these act when torch is imported, so start the "
            "workers with the submitter's environment (see rankcollapse.book.kernels), or run without "
            "--scheduler"
        )
    cap = want.get("cpu_capability")
    if cap is not None:
        import torch

        here = str(torch.backends.cpu.get_cpu_capability())
        if here != cap:
            raise RuntimeError(
                f"{where} computes with CPU capability {here!r}, the submitting process with {cap!r}: its "
                "kernels round differently, so its states would differ under the same content key"
            )


def _call_env(fn, kwargs, want: dict):
    """A job on a Dask worker: checked to compute with the submitter's kernels, run with the submitter's
    :data:`FORWARDED_ENV` (the worker's own values restored after)."""
    check_kernels(want)
    env = want["env"]
    keep = {k: os.environ.get(k) for k in FORWARDED_ENV if k not in KERNEL_ENV}
    for k in keep:
        if k in env:
            os.environ[k] = env[k]
        else:
            os.environ.pop(k, None)
    try:
        return _timed(fn, kwargs)
    finally:
        for k, v in keep.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
