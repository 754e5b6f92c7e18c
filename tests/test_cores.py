"""The run's core budget (rankcollapse.cores): no more than N holders at once, a holder's slot comes back
when it ends however it ends, and a waiting kernel gives its slot to its jobs."""

import multiprocessing as mp
import os
import time

from rankcollapse import cores, jobs


def _hold_for(folder, n, seconds, q):
    os.environ[cores.SLOTS_ENV], os.environ[cores.CORES_ENV] = str(folder), str(n)
    with cores.slot():
        q.put(("in", time.time()))
        time.sleep(seconds)
        q.put(("out", time.time()))


def test_no_more_than_n_hold_a_core_at_once(tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_hold_for, args=(tmp_path, 2, 0.6, q)) for _ in range(4)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(30)
    events = sorted((q.get(timeout=5) for _ in range(8)), key=lambda e: e[1])
    inside, most = 0, 0
    for kind, _ in events:
        inside += 1 if kind == "in" else -1
        most = max(most, inside)
    assert most == 2


def test_a_killed_holder_gives_its_core_back(tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_hold_for, args=(tmp_path, 1, 60, q))
    p.start()
    assert q.get(timeout=30)[0] == "in"
    assert cores.busy(tmp_path, 1) == 1
    p.kill()
    p.join(10)
    assert cores.busy(tmp_path, 1) == 0


def _square(x):
    return {"x": x * x, "busy": cores.busy(*cores.budget())}


def test_a_waiting_kernel_lends_its_core_to_its_jobs(tmp_path, monkeypatch):
    """A kernel that holds the only core and starts a pool: its jobs still run (it waits without it)."""
    monkeypatch.setenv(cores.SLOTS_ENV, str(tmp_path))
    monkeypatch.setenv(cores.CORES_ENV, "1")
    monkeypatch.setattr(cores, "_held", None)
    cores.hold()
    try:
        out = jobs.run_parallel(_square, [{"x": 2}, {"x": 3}], workers=2)
    finally:
        os.close(cores._held)
        cores._held = None
    assert [o["x"] for o in out] == [4, 9] and all(o["busy"] == 1 for o in out)


def test_outside_the_runner_nothing_is_held(monkeypatch):
    monkeypatch.delenv(cores.SLOTS_ENV, raising=False)
    assert cores.budget() is None
    with cores.slot(), cores.released():
        pass


def _wait_for_lock(folder, lock_path, q):
    from rankcollapse import store

    os.environ[cores.SLOTS_ENV], os.environ[cores.CORES_ENV] = str(folder), "1"
    with cores.slot():
        q.put("has a core")
        with store.lock(lock_path):
            q.put("has the lock")


def test_a_job_waiting_for_a_lock_does_not_hold_a_core(tmp_path):
    """Two chapters need the same network: the one waiting for it to be trained gives its core back."""
    from rankcollapse import store

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    (tmp_path / "slots").mkdir()
    with store.lock(tmp_path / "net.lock"):
        p = ctx.Process(target=_wait_for_lock, args=(tmp_path / "slots", tmp_path / "net.lock", q))
        p.start()
        assert q.get(timeout=30) == "has a core"
        time.sleep(1.0)
        assert cores.busy(tmp_path / "slots", 1) == 0  # blocked on the lock, not on a core
    assert q.get(timeout=30) == "has the lock"
    p.join(10)


def _take(folder, kernel, seconds, q, name):
    os.environ[cores.SLOTS_ENV], os.environ[cores.CORES_ENV] = str(folder), "1"
    if kernel:
        cores.hold()
        q.put((name, time.time()))
        time.sleep(seconds)
        return
    with cores.slot():
        q.put((name, time.time()))
        time.sleep(seconds)


def test_a_kernel_taking_its_core_back_goes_before_waiting_jobs(tmp_path):
    """A chapter whose pool has ended goes on at once, not behind another chapter's stream of jobs."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    first = ctx.Process(target=_take, args=(tmp_path, False, 4.0, q, "job 1"))
    first.start()
    assert q.get(timeout=30)[0] == "job 1"
    jobs_ = [ctx.Process(target=_take, args=(tmp_path, False, 0.5, q, f"job {i}")) for i in (2, 3)]
    for p in jobs_:
        p.start()
    time.sleep(0.8)  # the jobs wait for the core
    kernel = ctx.Process(target=_take, args=(tmp_path, True, 0.5, q, "kernel"))
    kernel.start()
    order = [q.get(timeout=60)[0] for _ in range(3)]
    for p in [first, kernel, *jobs_]:
        p.join(30)
    assert order[0] == "kernel", order
