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

This module is not imported by the training code, so choosing where jobs run never changes a trained
state's content key.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os

SCHEDULER_ENV = "RCBOOK_SCHEDULER"


def _init_worker():
    """A worker of the local pool: one thread, and it dies with the process that started it (a chapter's
    kernel killed by any signal takes its workers with it)."""
    import signal

    import torch

    from .procs import die_with_parent

    torch.set_num_threads(1)
    die_with_parent(signal.SIGKILL)


def _call(fn, kwargs):
    return fn(**kwargs)


def scheduler() -> str | None:
    """The scheduler named by ``$RCBOOK_SCHEDULER`` (``local`` or an address), or None: the local pool."""
    s = os.environ.get(SCHEDULER_ENV, "").strip()
    return s or None


def run_parallel(fn, jobs: list[dict], workers: int = 1, log=None, labels=None, scheduler_=None) -> list:
    """``[fn(**job) for job in jobs]``: in this process when ``workers <= 1`` (and no scheduler), else in
    spawned processes (one thread each), or on the Dask cluster of ``scheduler_`` (default:
    :func:`scheduler`). Results come back in job order; ``log("done: <label>")`` as each finishes."""
    labels = labels or [str(i) for i in range(len(jobs))]
    sched = scheduler() if scheduler_ is None else scheduler_
    if sched is not None and jobs:
        return _run_dask(fn, jobs, workers, log, labels, sched)
    if workers <= 1 or len(jobs) <= 1:
        out = []
        for lab, j in zip(labels, jobs):
            out.append(fn(**j))
            if log:
                log(f"done: {lab}")
        return out
    ctx = mp.get_context("spawn")
    res_ = [None] * len(jobs)
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker) as ex:
        futs = {ex.submit(_call, fn, j): i for i, j in enumerate(jobs)}
        for f in cf.as_completed(futs):
            i = futs[f]
            res_[i] = f.result()
            if log:
                log(f"done: {labels[i]}")
    return res_


def _dask_worker_setup():
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _run_dask(fn, jobs, workers, log, labels, sched: str) -> list:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as e:  # pragma: no cover - dask is a dependency of the package
        raise RuntimeError(
            f"{SCHEDULER_ENV}={sched!r} asks for a Dask cluster, but dask.distributed is not installed "
            "(pip install 'dask[distributed]')"
        ) from e
    cluster = None
    if sched == "local":
        cluster = LocalCluster(
            n_workers=max(1, workers), threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
    else:
        client = Client(sched)
    try:
        client.run(_dask_worker_setup)
        env = {k: os.environ[k] for k in ("RCBOOK_STATES", "RCBOOK_BUILD") if k in os.environ}
        futs = [client.submit(_call_env, fn, j, env, pure=False) for j in jobs]
        index = {f.key: i for i, f in enumerate(futs)}
        res_ = [None] * len(jobs)
        for f in as_completed(futs):
            i = index[f.key]
            res_[i] = f.result()
            if log:
                log(f"done: {labels[i]} (dask)")
        return res_
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _call_env(fn, kwargs, env: dict):
    """A job on a Dask worker, with the submitting process's store location."""
    os.environ.update(env)
    return fn(**kwargs)
