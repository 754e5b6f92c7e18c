"""One budget of cores for everything a build runs at once: chapter kernels and their training workers.

``rcbook run``/``rcbook book -j N`` names a folder of ``N`` slot files (``$RCBOOK_CORE_SLOTS``, with
``$RCBOOK_CORES`` = ``N``). A process that computes holds one slot (an exclusive ``flock`` on one of the
files, released by the kernel when the process ends, however it ends):

* a chapter's kernel takes one when it starts (:func:`hold`, from the runner's kernel launcher) and gives it
  back while it waits for a pool of training jobs (:func:`released`);
* each training job takes one while it runs (:func:`slot`, in :func:`rankcollapse.jobs.run_parallel`);
* a kernel taking its slot back goes before the training jobs that wait for one (the chapter goes on);
* a process that waits for a lock another process holds (a network another chapter is training,
  :func:`rankcollapse.store.lock`) gives its slot back while it waits.

So a chapter's pool may be as wide as the whole budget and uses whatever cores the other chapters leave
idle, and no more than ``N`` processes compute at any moment. Outside the runner (raw papermill, tests) no
folder is named and every function here does nothing. Where a job runs never changes what it computes: no
trained state's key depends on this module.
"""

from __future__ import annotations

import fcntl
import os
import random
import time
from contextlib import contextmanager
from pathlib import Path

SLOTS_ENV = "RCBOOK_CORE_SLOTS"
CORES_ENV = "RCBOOK_CORES"

_held: int | None = None  # the file descriptor of the slot this process holds (hold), if any


def budget() -> tuple[Path, int] | None:
    """(slot folder, number of cores) named by the runner, or None outside it."""
    d, n = os.environ.get(SLOTS_ENV), os.environ.get(CORES_ENV)
    try:
        n_ = int(n or 0)
    except ValueError:
        return None
    if not d or n_ < 1:
        return None
    return Path(d), n_


def setup(folder: Path, cores: int) -> None:
    """Name ``folder`` (created) as the slot folder of a budget of ``cores`` to this process and its
    children."""
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[SLOTS_ENV] = str(folder)
    os.environ[CORES_ENV] = str(int(cores))


def _kernels_waiting(folder: Path) -> bool:
    """Whether a chapter's kernel (alive) waits to take its slot back (:func:`hold`)."""
    for w in folder.glob("want-*"):
        pid = w.name[len("want-") :]
        try:
            os.kill(int(pid), 0)
            return True
        except (ValueError, ProcessLookupError):
            w.unlink(missing_ok=True)  # its kernel is gone
        except PermissionError:
            return True
    return False


def _acquire(folder: Path, n: int, kernel: bool = False) -> int:
    """Block until one of the ``n`` slots is free; its open, locked file descriptor. A kernel (``kernel``)
    goes first: while one waits, a training job does not take a freed slot, so a chapter whose pool has
    ended goes on at once instead of waiting behind another chapter's stream of jobs."""
    wait = 0.02
    want = folder / f"want-{os.getpid()}"
    if kernel:
        want.touch()
    try:
        while True:
            if kernel or not _kernels_waiting(folder):
                fd = _try(folder, n)
                if fd is not None:
                    return fd
            time.sleep(0.01 if kernel else wait)
            wait = min(0.25, wait * 1.5)
    finally:
        if kernel:
            want.unlink(missing_ok=True)


def _try(folder: Path, n: int) -> int | None:
    """One pass over the slots: a locked file descriptor, or None when all are held."""
    for i in random.sample(range(n), n):
        fd = os.open(folder / f"core-{i}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            os.close(fd)
    return None


@contextmanager
def slot():
    """Hold one core of the budget for the duration (nothing outside the runner, nor in a process that holds
    one already). It is this process's slot meanwhile, so :func:`released` gives it back while the process
    only waits (for a file lock another process holds: :func:`rankcollapse.store.lock`)."""
    global _held
    b = budget()
    if b is None or _held is not None:
        yield
        return
    _held = _acquire(*b)
    try:
        yield
    finally:
        if _held is not None:
            os.close(_held)
            _held = None


def hold() -> None:
    """Take one slot for this process until it ends (a chapter kernel); nothing outside the runner."""
    global _held
    b = budget()
    if b is not None and _held is None:
        _held = _acquire(*b, kernel=True)


@contextmanager
def released():
    """Give this process's slot back while it only waits (for a pool of jobs), and take one again after."""
    global _held
    if _held is None:
        yield
        return
    os.close(_held)
    _held = None
    try:
        yield
    finally:
        hold()


def busy(folder: Path, n: int) -> int:
    """How many of the ``n`` slots in ``folder`` are held now (for progress displays and tests)."""
    held = 0
    for i in range(n):
        p = folder / f"core-{i}.lock"
        if not p.exists():
            continue
        fd = os.open(p, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held += 1
        finally:
            os.close(fd)
    return held
