"""Failures that explain themselves, and runs that leave no litter (runner side)."""

import json
import os
import subprocess
import sys

import nbformat
import pytest

from rankcollapse.book import runner
from tiny import DECOMPOSITION as SMALL


def planted(source: str, real=runner.to_notebook):
    """A ``to_notebook`` that puts a code cell holding ``source`` after the chapter's fourth code cell."""

    def to_notebook(name):
        nb = real(name)
        code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        nb.cells.insert(code[3] + 1, nbformat.v4.new_code_cell(source))
        return nb

    return to_notebook


def test_a_failing_cell_is_named_and_its_notebook_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "to_notebook", planted("x = 1\nraise ValueError('planted failure')"))
    o = runner.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path)
    assert o.status == "failed"
    assert "in code cell 5 of the chapter ('x = 1')" in o.message, o.message
    assert "ValueError: planted failure" in o.message
    kept = tmp_path / "smoke" / "failed" / "decomposition.ipynb"
    assert kept.exists() and str(kept) in o.message
    assert "planted failure" in kept.read_text()
    assert not list((tmp_path / "smoke").glob(".decomposition-*")), "the partial folder was left behind"


def test_abandoned_partial_folders_are_swept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f".skip-{dead.pid}-abc").mkdir()
    (tmp_path / ".skip-oldformat").mkdir()
    (tmp_path / f".skip-{os.getpid()}-live").mkdir()
    gone = runner.sweep_abandoned(tmp_path, "skip")
    assert sorted(p.name for p in gone) == sorted([f".skip-{dead.pid}-abc", ".skip-oldformat"])
    assert (tmp_path / f".skip-{os.getpid()}-live").exists()


def test_outputs_get_the_users_permissions(tmp_path):
    o = runner.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path)
    assert o.status == "ran", o.message
    umask = os.umask(0)
    os.umask(umask)
    assert (o.out.stat().st_mode & 0o777) == (0o777 & ~umask)


DRIVER = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from rankcollapse.book import runner
from test_failures import planted
runner.to_notebook = planted("import time; time.sleep(120)")
from tiny import DECOMPOSITION as SMALL
runner.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=Path(sys.argv[1]))
"""


def _children(pid):
    """The chapter kernels started by ``pid``, read from /proc (``ps`` cuts its ``args`` column to $COLUMNS,
    so a long interpreter path hid the kernel's module name)."""
    kids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmdline = f.read()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == pid and b"kernel_launcher" in cmdline:
            kids.append(int(d))
    return kids


def test_a_killed_runner_takes_its_kernel_with_it(tmp_path):
    import signal
    import time

    runner_proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), os.path.dirname(__file__)],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        start_new_session=True,
    )
    _STARTED.append(runner_proc)
    kernels = []
    for _ in range(300):  # wait for the kernel to start (and reach the sleeping cell)
        kernels = _children(runner_proc.pid)
        if kernels:
            break
        time.sleep(0.2)
    assert kernels, "the chapter's kernel never started"
    time.sleep(3)
    runner_proc.send_signal(signal.SIGKILL)
    runner_proc.wait()
    for _ in range(50):
        if not any(_alive(k) for k in kernels):
            break
        time.sleep(0.1)
    assert not any(_alive(k) for k in kernels), "the kernel outlived the runner killed with SIGKILL"
    # the next run sweeps the partial folder the killed one left
    partial = list((tmp_path / "smoke").glob(".decomposition-*"))
    assert partial
    runner.sweep_abandoned(tmp_path / "smoke", "decomposition")
    assert not list((tmp_path / "smoke").glob(".decomposition-*"))


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- a training chapter killed with SIGKILL: nothing survives, the rerun resumes to the same results --------
TINY_DRIVER = [
    "-p",
    "depth",
    "2",
    "-p",
    "d_model",
    "16",
    "-p",
    "heads",
    "2",
    "-p",
    "ctx",
    "16",
    "-p",
    "batch",
    "4",
    "-p",
    "ramp_start",
    "1500",
    "-p",
    "ramp_end",
    "1700",
    "-p",
    "tail_steps",
    "300",
    "-p",
    "branch_steps",
    "10",
    "-p",
    "seeds",
    "[0,1]",
    "-p",
    "alpha_grid",
    "[0.0]",
    "-p",
    "depth_grid",
    "[2]",
]


def _descendants(pid):
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        todo.extend(kids)
    return out


_STARTED: list = []  # every rcbook run a test started: ended at the test's end, whatever the test's outcome


@pytest.fixture(autouse=True)
def _end_what_the_test_started():
    yield
    import signal

    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:  # a failed test left it running: end it and what it started (its session)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _rcbook(build, *args, **kw):
    env = dict(os.environ, OMP_NUM_THREADS="1", RCBOOK_BUILD=str(build))
    env.pop("RCBOOK_STATES", None)
    env.pop("RCBOOK_CACHE", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rankcollapse.book.cli", *args], env=env, start_new_session=True, **kw
    )
    _STARTED.append(proc)
    return proc


def _results(build, chapter):
    import json

    from rankcollapse.book.results import strip_volatile

    return strip_volatile(json.loads((_out(build, chapter) / "results.json").read_text()))


def _out(build, chapter):
    """Where `rcbook run` put the chapter: build/smoke/<chapter> for the profile's own parameters, else its
    own rerun folder (the tiny parameters of these tests are a rerun)."""
    reruns = sorted((build / "reruns").glob(f"{chapter}-smoke-*"))
    assert len(reruns) <= 1, reruns
    return reruns[0] if reruns else build / "smoke" / chapter


def test_a_killed_training_chapter_leaves_no_process_and_resumes_to_the_same_results(tmp_path):
    import signal
    import time

    build = tmp_path / "killed"
    run = ["run", "repair-driver", "--profile", "smoke", *TINY_DRIVER]
    proc = _rcbook(build, *run)
    seen, t0 = set(), time.time()
    while time.time() - t0 < 240:  # until the two training workers have written a checkpoint
        seen |= _descendants(proc.pid)
        if list((build / "states").glob("*/ckpt.pt")) and len(seen) >= 3:
            break
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    else:
        raise AssertionError("no training checkpoint appeared")
    seen |= _descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)  # the runner alone, as the OOM killer would
    proc.wait()
    for _ in range(100):
        alive = [p for p in seen if _alive(p)]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"processes of the killed run survived it: {alive}"
    assert list((build / "states").glob("*/ckpt.pt")), "the checkpoint to resume from is gone"
    # the rerun resumes from the checkpoints and ends with the results of a run never killed
    assert _rcbook(build, *run).wait() == 0
    assert not list((build / "states").glob("*/ckpt.pt"))
    partial = list(_out(build, "repair-driver").parent.glob(".repair-driver-*"))
    assert not partial, "the killed run's partial folder is left"
    ref = tmp_path / "ref"
    assert _rcbook(ref, *run).wait() == 0
    assert _results(build, "repair-driver") == _results(ref, "repair-driver")


# -- concurrent runs over one store ------------------------------------------------------------------------
TINY_TOYS = [
    "-p",
    "circle_hidden",
    "[4]",
    "-p",
    "circle_steps",
    "50",
    "-p",
    "sort_steps",
    "10",
    "-p",
    "hull_steps",
    "10",
    "-p",
    "mem_steps",
    "10",
    "-p",
    "n_repeat",
    "1",
    "-p",
    "eval_size",
    "50",
]


def test_two_toy_chapters_at_once_from_a_cold_store_agree_with_one(tmp_path):
    store_root = tmp_path / "states"
    run = ["run", "toy-tasks", "--profile", "smoke", *TINY_TOYS]

    def start(build):
        env = dict(os.environ, OMP_NUM_THREADS="1", RCBOOK_BUILD=str(build), RCBOOK_STATES=str(store_root))
        env.pop("RCBOOK_CACHE", None)
        return subprocess.Popen(
            [sys.executable, "-m", "rankcollapse.book.cli", *run],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    a, b = start(tmp_path / "a"), start(tmp_path / "b")
    outs = [p.communicate(timeout=300)[0] for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, outs
    assert _results(tmp_path / "a", "toy-tasks") == _results(tmp_path / "b", "toy-tasks")
    folders = sorted((store_root / "toy").iterdir())
    assert folders
    for f in folders:  # each network stored once, whole, with its hash, and no temporary file left
        assert {p.name for p in f.iterdir()} == {".lock", "final.pt", "final.pt.sha256", "spec.json"}, f
    # and one run alone, from another cold store, gives the same numbers
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        RCBOOK_BUILD=str(tmp_path / "c"),
        RCBOOK_STATES=str(tmp_path / "states-c"),
    )
    env.pop("RCBOOK_CACHE", None)
    subprocess.run(
        [sys.executable, "-m", "rankcollapse.book.cli", *run], env=env, check=True, capture_output=True
    )
    assert _results(tmp_path / "c", "toy-tasks") == _results(tmp_path / "a", "toy-tasks")
    assert sorted(p.name for p in (tmp_path / "states-c" / "toy").iterdir()) == [p.name for p in folders]


def test_two_runs_of_a_chapter_into_one_folder_take_turns(tmp_path):
    run = ["run", "toy-tasks", "--profile", "smoke", *TINY_TOYS]
    env = dict(
        os.environ, OMP_NUM_THREADS="1", RCBOOK_BUILD=str(tmp_path / "b"), RCBOOK_STATES=str(tmp_path / "s")
    )
    env.pop("RCBOOK_CACHE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rankcollapse.book.cli", *run],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    status = sorted(line.split()[3] for o in outs for line in o.splitlines() if line.startswith("[1/1]"))
    assert status == ["cached", "ran"], outs  # the second waited for the first and found its output
    assert not list(_out(tmp_path / "b", "toy-tasks").parent.glob(".toy-tasks-*"))


def test_a_cached_chapter_is_rerun_when_a_state_it_consumed_changes(tmp_path, monkeypatch):
    from rankcollapse import store

    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "states"))
    state = tmp_path / "states" / "planted" / "s.pt"
    cell = (
        "from rankcollapse import store\n"
        "planted_state = store.states_root() / 'planted' / 's.pt'\n"
        "if not planted_state.exists(): store.save_checked({'w': 1}, planted_state)\n"
        "store.load_checked(planted_state)"
    )
    monkeypatch.setattr(runner, "to_notebook", planted(cell))
    go = lambda: runner.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path)  # noqa: E731
    o = go()
    assert o.status == "ran", o.message
    assert list(json.loads((o.out / ".states.json").read_text())) == [str(state.resolve())]
    assert go().status == "cached"
    store.save_checked({"w": 2}, state, record=False)  # the state is replaced: its output is not served
    o = go()
    assert o.status == "ran" and "changed or are gone" in o.message, o.message
    assert go().status == "cached"
    store.quarantine(state, "planted corruption")  # moved aside as corrupt: not served either
    assert go().status == "ran"


def test_sigterm_ends_a_parallel_run_and_everything_it_started(tmp_path):
    """`timeout`, a CI job's end: SIGTERM to `rcbook run all -j 4` ends it and every chapter process,
    kernel and worker within seconds, and no chapter starts after it. (-j counts cores: the two longest
    chapters, which start first, train with two workers each.)"""
    import signal
    import time

    proc = _rcbook(tmp_path, "run", "all", "--profile", "smoke", "-j", "4")
    seen, t0 = set(), time.time()
    while time.time() - t0 < 120:  # until both chapter processes run a kernel
        seen |= _descendants(proc.pid)
        if len([p for p in _descendants(proc.pid) if _is_kernel(p)]) >= 2:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the two chapter kernels never ran")
    time.sleep(1)
    seen |= _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    t1, started = time.time(), set()
    while proc.poll() is None and time.time() - t1 < 60:  # no chapter may start once it is told to stop
        started |= {p for p in _descendants(proc.pid) if p not in seen and _is_kernel(p)}
        time.sleep(0.05)
    proc.wait(timeout=5)
    took = time.time() - t1
    assert not started, f"chapter kernels started after SIGTERM: {started}"
    for _ in range(100):
        alive = [p for p in seen if _alive(p)]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"processes of the terminated run survived it: {alive}"
    assert proc.returncode == 130 and took < 15, (proc.returncode, took)
    assert not list((tmp_path / "smoke").glob(".*-*-*")), "partial folders left"


def _is_kernel(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"kernel_launcher" in f.read()
    except FileNotFoundError:
        return False
