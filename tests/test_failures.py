"""Failures that explain themselves, and runs that leave no litter (runner side)."""
import os
import subprocess
import sys

import nbformat

from rankcollapse import runner

SMALL = {"recon_layers": [1, 2], "recon_heads": [1], "big_layers": 2, "big_heads": 2, "big_tokens": 8,
         "big_d": 8, "share_scales": [1.0], "share_seeds": 1}


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
    dead = subprocess.Popen([sys.executable, "-c", "pass"]); dead.wait()
    (tmp_path / f".skip-{dead.pid}-abc").mkdir()
    (tmp_path / ".skip-oldformat").mkdir()
    (tmp_path / f".skip-{os.getpid()}-live").mkdir()
    gone = runner.sweep_abandoned(tmp_path, "skip")
    assert sorted(p.name for p in gone) == sorted([f".skip-{dead.pid}-abc", ".skip-oldformat"])
    assert (tmp_path / f".skip-{os.getpid()}-live").exists()


def test_outputs_get_the_users_permissions(tmp_path):
    o = runner.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path)
    assert o.status == "ran", o.message
    umask = os.umask(0); os.umask(umask)
    assert (o.out.stat().st_mode & 0o777) == (0o777 & ~umask)


DRIVER = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from rankcollapse import runner
from test_failures import planted
runner.to_notebook = planted("import time; time.sleep(120)")
SMALL = {"recon_layers": [1, 2], "recon_heads": [1], "big_layers": 2, "big_heads": 2, "big_tokens": 8,
         "big_d": 8, "share_scales": [1.0], "share_seeds": 1}
runner.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=Path(sys.argv[1]))
"""


def _children(pid):
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines()
            if int(line.split()[1]) == pid and "kernel_launcher" in line]


def test_a_killed_runner_takes_its_kernel_with_it(tmp_path):
    import signal
    import time
    runner_proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), os.path.dirname(__file__)],
                                   env=dict(os.environ, OMP_NUM_THREADS="1"))
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
