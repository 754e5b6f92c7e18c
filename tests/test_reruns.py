"""A rerun with other parameters never replaces the book; parameters the runner sets are refused with -p;
an unwritable output folder is a named error before any work; the number of training processes changes no
number."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from rankcollapse.book import runner
from rankcollapse.book.params import ParameterError


def _cli(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "rankcollapse.book.cli", *args], env=env, capture_output=True, text=True
    )


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_rerun_with_other_parameters_keeps_the_book_and_its_check(tmp_path):
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        RCBOOK_BUILD=str(tmp_path / "build"),
        RCBOOK_EXPECTED=str(tmp_path / "expected"),
    )
    book = _cli("run", "decomposition", "--profile", "smoke", env=env)  # the book's own run: defaults
    assert book.returncode == 0, book.stderr
    page = tmp_path / "build" / "smoke" / "decomposition" / "decomposition.ipynb"
    assert page.exists() and "outputs (the book's)" in book.stdout
    assert _cli("record", "decomposition", "--profile", "smoke", env=env).returncode == 0
    before = _digest(page)

    rerun = _cli("run", "decomposition", "--profile", "smoke", "-p", "d_model", "24", env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert "the book is unchanged" in rerun.stdout
    folder = tmp_path / "build" / "reruns"
    (made,) = [p for p in folder.iterdir() if not p.name.startswith(".")]
    assert made.name.startswith("decomposition-smoke-d_model=24-") and str(made) in rerun.stdout
    assert json.loads((made / "results.json").read_text())["params"]["d_model"] == 24

    assert _digest(page) == before, "the rerun replaced the book's page"
    check = _cli("check", "decomposition", "--profile", "smoke", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "all results match" in check.stdout

    out = tmp_path / "mine"
    named = _cli("run", "decomposition", "--profile", "smoke", "-p", "seed", "3", "--out", str(out), env=env)
    assert named.returncode == 0, named.stderr
    assert (out / "results.json").exists() and str(out) in named.stdout
    assert _digest(page) == before


def test_the_book_folder_is_what_a_default_run_writes():
    assert runner.is_book_run("decomposition", {}, "smoke", "auto")
    assert runner.is_book_run("decomposition", {}, "smoke", "cpu")  # what auto picks at smoke
    assert runner.is_book_run("decomposition", {"d_model": 8}, "smoke", "auto") is (
        runner.prepare("decomposition", {}, "smoke", "auto")[0]["d_model"] == 8
    )
    assert not runner.is_book_run("decomposition", {"seed": 5}, "smoke", "auto")
    a = runner.rerun_dir("decomposition", {"seed": 5}, "smoke", "auto")
    b = runner.rerun_dir("decomposition", {"seed": 6}, "smoke", "auto")
    assert a != b and a.parent.name == "reruns" and "seed=5" in a.name


@pytest.mark.parametrize(
    "name,flag",
    [("profile", "--profile"), ("device", "--device"), ("output_dir", "--out"), ("workers", "-j")],
)
def test_a_parameter_the_runner_sets_is_refused_with_p(name, flag, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", RCBOOK_BUILD=str(tmp_path))
    value = {"profile": "smoke", "device": "cuda", "output_dir": "elsewhere", "workers": "3"}[name]
    r = _cli("run", "repair-driver", "--profile", "smoke", "-p", name, value, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"parameter '{name}' is set by the runner" in r.stderr and flag in r.stderr
    assert not any(tmp_path.iterdir()), "work started before the refusal"


def test_an_unknown_profile_is_refused():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = _cli("run", "collapse", "--profile", "tiny", env=env)
    assert r.returncode == 2 and "tiny" in r.stderr


def test_an_unwritable_output_folder_is_a_named_error_before_any_work(tmp_path):
    if os.geteuid() == 0:
        # root writes anywhere: a file where a folder must be stands for an unwritable folder
        blocker = tmp_path / "build"
        blocker.write_text("a file")
        env = dict(os.environ, OMP_NUM_THREADS="1", RCBOOK_BUILD=str(blocker))
        r = _cli("run", "decomposition", "--profile", "smoke", env=env)
        assert r.returncode == 2, r.stderr
        assert "cannot be made" in r.stderr and "Traceback" not in r.stderr
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1", RCBOOK_BUILD=str(ro))
        r = _cli("run", "decomposition", "--profile", "smoke", env=env)
        assert r.returncode == 2 and "not writable" in r.stderr and "Traceback" not in r.stderr
    finally:
        ro.chmod(0o700)


def test_writable_names_the_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ParameterError, match="is a file"):
        runner.writable(tmp_path / "f" / "out")
    runner.writable(tmp_path / "new" / "deeper")  # made later: its nearest existing folder is writable


def test_workers_are_in_no_cache_key_and_no_record_check():
    from rankcollapse.book.records import compare

    r1 = runner.prepare("repair-driver", {}, "smoke", "cpu")[0]
    r3 = dict(r1, workers=3)
    assert runner.cache_key("repair-driver", r1) == runner.cache_key("repair-driver", r3)
    doc = {"params": r1, "values": {}, "verdicts": {}}
    assert all(row.ok for row in compare(doc, dict(doc, params=r3)))
