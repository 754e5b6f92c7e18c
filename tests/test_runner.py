"""The runner end to end on the decomposition chapter at smoke size: cache, determinism, check."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rankcollapse.book.records import compare
from rankcollapse.book.results import load, strip_volatile
from rankcollapse.book.runner import run_chapter
from tiny import DECOMPOSITION as SMALL

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    oa = run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=a)
    ob = run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=b)
    assert oa.status == "ran" and ob.status == "ran", (oa.message, ob.message)
    return a, b


def test_outputs_written(two_runs):
    out = two_runs[0] / "smoke" / "decomposition"
    assert (out / "decomposition.ipynb").exists()
    doc = load(out / "results.json")
    assert doc["profile"] == "smoke" and doc["params"]["big_d"] == 16 and doc["seed"] == 0
    assert doc["library_version"] and doc["wall_time_s"] > 0
    # the kernel's CPU time (it imports torch and computes: well above nothing), never compared
    assert 0.5 < doc["cpu_time_s"] < 300 and "cpu_time_s" not in strip_volatile(doc)
    assert doc["verdicts"]["D1"]["verdict"] == "supported"
    assert {p.name for p in (out / "figures").iterdir()} >= {"fig-recon-error.png", "fig-path-lengths.png"}


def test_progress_goes_to_the_log_not_the_page(two_runs):
    out = two_runs[0] / "smoke" / "decomposition"
    nb = json.loads((out / "decomposition.ipynb").read_text())
    streams = [
        o
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if o["output_type"] == "stream"
    ]
    assert not streams, f"the page holds printed output: {streams[:2]}"
    log = (out / "progress.log").read_text().splitlines()
    assert any("reconstruction L=2 H=2 done" in line for line in log), log
    assert log[-1].startswith("[decomposition") and "results: results.json" in log[-1]


def test_verbose_streams_the_progress_lines(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", RCBOOK_BUILD=str(tmp_path))
    args = [a for k, v in SMALL.items() for a in ("-p", k, json.dumps(v))]
    cmd = [
        sys.executable,
        "-m",
        "rankcollapse.book.cli",
        "run",
        "decomposition",
        "--profile",
        "smoke",
        *args,
    ]
    quiet = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert quiet.returncode == 0, quiet.stderr
    # not a terminal: one plain line per stage, each once, on stdout; no cell output
    stages = [ln for ln in quiet.stdout.splitlines() if "reconstruction L=2 H=2 done" in ln]
    assert len(stages) == 1 and stages[0].lstrip().startswith("[decomposition"), quiet.stdout
    assert "[1/1] decomposition" in quiet.stdout
    loud = subprocess.run([*cmd, "-v", "--force"], env=env, capture_output=True, text=True)
    assert loud.returncode == 0, loud.stderr
    assert "[decomposition" in loud.stderr and "reconstruction L=2 H=2 done" in loud.stderr


def test_deterministic(two_runs):
    a, b = (strip_volatile(load(r / "smoke" / "decomposition" / "results.json")) for r in two_runs)
    assert a == b


def test_cache_executes_nothing_when_unchanged(two_runs):
    o = run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=two_runs[0])
    assert o.status == "cached"
    changed = dict(SMALL, seed=1)
    o = run_chapter("decomposition", changed, profile="smoke", device="cpu", root=two_runs[0])
    assert o.status == "ran"


def test_compare_uses_recorded_tolerances(two_runs):
    doc = load(two_runs[0] / "smoke" / "decomposition" / "results.json")
    assert all(r.ok for r in compare(doc, doc))
    moved = json.loads(json.dumps(doc))
    v = moved["values"]["bert_mean_length"]
    v["value"] = v["value"] * (1 + 1e-6)  # far outside its recorded rtol of 1e-12
    rows = compare(doc, moved)
    assert [r.name for r in rows if not r.ok] == ["bert_mean_length"]
    moved = json.loads(json.dumps(doc))
    moved["verdicts"]["D1"]["verdict"] = "refuted"
    assert [r.name for r in compare(doc, moved) if not r.ok] == ["verdict D1"]
    moved = json.loads(json.dumps(doc))
    moved["params"]["big_d"] = 32
    assert [r.name for r in compare(doc, moved) if not r.ok] == ["params"]


def test_check_command_fails_on_mismatch(two_runs, tmp_path):
    """`rcbook check` against a recorded file that disagrees exits non-zero and prints the table."""
    build = two_runs[0]
    env = dict(os.environ, RCBOOK_BUILD=str(build), RCBOOK_EXPECTED=str(tmp_path))
    doc = load(build / "smoke" / "decomposition" / "results.json")
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "decomposition.json").write_text(json.dumps(doc))
    ok = subprocess.run(
        [sys.executable, "-m", "rankcollapse.book.cli", "check", "decomposition", "--profile", "smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc["values"]["recon_configs"]["value"] += 1
    (tmp_path / "smoke" / "decomposition.json").write_text(json.dumps(doc))
    bad = subprocess.run(
        [sys.executable, "-m", "rankcollapse.book.cli", "check", "decomposition", "--profile", "smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert bad.returncode == 1
    assert "recon_configs" in bad.stdout and "FAIL" in bad.stdout


def test_failed_chapter_leaves_nothing(tmp_path, monkeypatch):
    """A chapter that raises mid-way reports the chapter and cell and leaves no partial outputs."""
    import rankcollapse.book.runner as R

    src = tmp_path / "chapters"
    src.mkdir()
    text = (REPO / "chapters" / "decomposition.md").read_text()
    text = text.replace("archs = dec.architecture_lengths()", "raise RuntimeError('boom')")
    (src / "decomposition.md").write_text(text)
    monkeypatch.setattr(R, "chapter_source", lambda name: src / f"{name}.md")
    o = R.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path / "build")
    assert o.status == "failed"
    assert "decomposition" in o.message and "boom" in o.message and "cell" in o.message
    assert not (tmp_path / "build" / "smoke" / "decomposition").exists()
    # nothing but the failed notebook, kept for the user to read
    # locks are no output
    assert sorted(p.name for p in (tmp_path / "build" / "smoke").iterdir()) == [".locks", "failed"]
    assert "boom" in (tmp_path / "build" / "smoke" / "failed" / "decomposition.ipynb").read_text()


def test_a_kernel_that_runs_no_cell_is_shut_down_without_a_sigint(tmp_path, monkeypatch):
    """jupyter_client interrupts every kernel it shuts down; one that had finished its chapter logged
    "ERROR | KeyboardInterrupt caught in kernel" when the SIGINT raced its last reply. Now a chapter that
    ran, and one that failed in a cell, send none; a kernel stopped mid-cell and a timeout's interrupt still
    do."""
    import asyncio
    import signal

    from jupyter_client.manager import AsyncKernelManager

    import rankcollapse.book.runner as R

    sent = []
    real = AsyncKernelManager._async_signal_kernel

    async def spy(self, signum):
        sent.append(signum)
        await real(self, signum)

    monkeypatch.setattr(AsyncKernelManager, "_async_signal_kernel", spy)
    o = R.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path / "ok")
    assert o.status == "ran", o.message
    assert signal.SIGINT not in sent and not R._CellTracker.running

    src = tmp_path / "chapters"
    src.mkdir()
    text = (REPO / "chapters" / "decomposition.md").read_text()
    (src / "decomposition.md").write_text(
        text.replace("archs = dec.architecture_lengths()", "raise RuntimeError('boom')")
    )
    monkeypatch.setattr(R, "chapter_source", lambda name: src / f"{name}.md")
    o = R.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path / "bad")
    assert o.status == "failed" and "boom" in o.message
    assert signal.SIGINT not in sent

    # the rule itself: only a shutdown of a kernel that runs no cell goes without the interrupt
    interrupted = []

    async def parent(self):
        interrupted.append((self.shutting_down, R._CellTracker.running))

    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", parent)
    km = R.LocalKernelManager()
    try:
        for shutting_down, running in [(True, False), (True, True), (False, False), (False, True)]:
            km.shutting_down, R._CellTracker.running = shutting_down, running
            asyncio.run(km._async_interrupt_kernel())
    finally:
        R._CellTracker.running = False
    assert interrupted == [(True, True), (False, False), (False, True)]


def test_glued_text_is_never_read_as_a_file_name(tmp_path, monkeypatch):
    # IPython's Markdown(".") would read the folder "." (and fail); glued strings are text, always
    from rankcollapse.book.notebook import as_markdown

    monkeypatch.chdir(tmp_path)
    (tmp_path / "note.md").write_text("file contents")
    assert as_markdown(".")._repr_markdown_() == "."
    assert as_markdown("note.md")._repr_markdown_() == "note.md"


def test_the_longest_chapters_start_first(monkeypatch):
    from rankcollapse.book import runner

    times = {"a": 10.0, "b": 300.0, "c": float("inf"), "d": 300.0}
    monkeypatch.setattr(runner, "expected_seconds", lambda n, profile: times[n])
    # never timed counts as longest; ties keep the order given
    assert runner.schedule(["a", "b", "c", "d"], "smoke") == ["c", "b", "d", "a"]


def test_expected_seconds_are_the_cost_from_scratch_else_the_record(tmp_path, monkeypatch):
    from rankcollapse.book import runner

    costs = json.loads((REPO / "data" / "costs" / "full.json").read_text())["chapters"]
    assert runner.expected_seconds("repair-path", "full") == costs["repair-path"]["cpu_s"]
    # the longest chapter from an empty store starts first, whatever its last record (made from saved
    # states) took
    assert runner.expected_seconds("repair-path", "full") > runner.expected_seconds("skip", "full")
    monkeypatch.setattr(runner, "costs_path", lambda profile: tmp_path / f"{profile}.json")  # none recorded
    rec = json.loads((REPO / "data" / "expected" / "smoke" / "repair-path.json").read_text())
    assert runner.expected_seconds("repair-path", "smoke") == rec["wall_time_s"]
    assert (
        runner.expected_seconds("repair-path", "paper") == float("inf")
        or (REPO / "data" / "expected" / "paper" / "repair-path.json").exists()
    )


def test_costs_are_recorded_only_from_a_run_where_every_chapter_ran(tmp_path, monkeypatch):
    from rankcollapse.book import runner
    from rankcollapse.book.params import ParameterError

    monkeypatch.setattr(runner, "costs_path", lambda profile: tmp_path / "costs" / f"{profile}.json")
    ran = runner.RunOutcome("a", "ran", 10.0, tmp_path, cpu_seconds=19.0)
    log = runner.write_run_log(
        tmp_path / "one", [ran, runner.RunOutcome("b", "cached", 0.0, tmp_path)], 2, 10.0
    )
    with pytest.raises(ParameterError, match="chapters b did not run"):
        runner.record_costs("full", log, "a fresh clone")
    log = runner.write_run_log(tmp_path / "two", [ran], 2, 10.0)
    with pytest.raises(ParameterError, match="'how' is empty"):
        runner.record_costs("full", log, "  ")
    assert not (tmp_path / "costs").exists()  # nothing written on bad input
    runner.record_costs("full", log, "a fresh clone")
    assert runner.scratch_costs("full") == {"a": {"wall_s": 10.0, "cpu_s": 19.0}}
    assert runner.expected_seconds("a", "full") == 19.0


def test_a_parallel_run_logs_its_wall_and_each_chapters_cpu_time(tmp_path):
    from rankcollapse.book import runner

    outs = [
        runner.RunOutcome("a", "ran", 10.0, tmp_path, cpu_seconds=19.0),
        runner.RunOutcome("b", "cached", 0.0, tmp_path),
    ]
    doc = json.loads(runner.write_run_log(tmp_path, outs, 2, 11.0).read_text())
    assert doc["cores"] == 2 and doc["wall_s"] == 11.0
    assert doc["chapters"]["a"] == {"status": "ran", "wall_s": 10.0, "cpu_s": 19.0}
    assert doc["chapters"]["b"]["status"] == "cached"


def test_the_lm_flop_count_is_torchs_own_count_of_the_forward():
    """lm_step_flops (the paper estimate's and the benchmark's FLOP count) against torch's flop counter on
    the model's forward with the attention written out (the probs path: the CPU flash kernel is not
    counted by torch), the backward being twice the forward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from rankcollapse.book.estimates import lm_step_flops
    from rankcollapse.lm import model as lm

    cfg = lm.LMConfig(depth=3, d_model=16, ctx=8, heads=2)
    with FlopCounterMode(display=False) as fc:
        lm.build_model(cfg, 0)(torch.randint(0, 256, (2, 8)), probs=True)
    assert 3 * fc.get_total_flops() == lm_step_flops(3, 16, 8, 2)


def test_paper_without_a_gpu_estimates_every_chapter_it_can_and_refuses(monkeypatch, capsys):
    import argparse

    import torch

    from rankcollapse.book import cli, estimates

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    a = argparse.Namespace(profile="paper", device="auto", allow_cpu=False)
    assert cli.paper_guard(a, ["repair-path", "skip"]) == 2
    err = capsys.readouterr().err
    assert "expects a CUDA GPU" in err and "--allow-cpu" in err
    f, how = estimates.paper_factor("repair-path")
    # width 48 -> 128, context 32 -> 256, longer runs, 10 seeds -> 8: hundreds of times full's work
    assert 100 < f < 1000 and "FLOPs" in how
    assert f"x {f:.3g}: training FLOPs" in err
    # beside the CPU hours, the GPU hours: the same work over the measured GPU/CPU-core step-time ratio
    from rankcollapse.book.runner import expected_seconds

    cpu_s = expected_seconds("repair-path", "full") * f
    line = next(x for x in err.splitlines() if x.strip().startswith("repair-path"))
    cpu_h, gpu_h = (float(v) for v in re.findall(r"~\s*([\d.]+) h on one (?:CPU core|GPU)", line))
    assert cpu_h == pytest.approx(cpu_s / 3600, abs=0.06)
    assert gpu_h == pytest.approx(cpu_s / estimates.GPU_VS_CPU_CORE / 3600, abs=0.006)
    assert gpu_h == pytest.approx(cpu_h / estimates.GPU_VS_CPU_CORE, rel=0.05)
    assert estimates.GPU_BASIS in err and f"{estimates.GPU_VS_CPU_CORE:g}x" in estimates.GPU_BASIS
    assert re.search(r"total ~[\d.]+ h on one CPU core, ~[\d.]+ h on one GPU \(measured: ", err)
    assert estimates.gpu_hours(1.0) == "<0.01"  # a chapter of seconds is not printed as "~0.00 h"
    assert "skip" in err and "no estimate" in err and "1 chapter(s) without an estimate" in err
    assert estimates.paper_factor("decomposition")[0] == 3.0  # the chapter's own
    # and it starts nothing only where it should refuse
    for kw in ({"allow_cpu": True}, {"device": "cuda"}, {"profile": "full"}):
        assert cli.paper_guard(argparse.Namespace(**{**vars(a), **kw}), ["repair-path"]) is None


def test_bench_takes_the_books_times_from_the_empty_store_run(tmp_path, monkeypatch):
    """bench/all.py reports a chapter's time from the run that trained everything (data/costs), and labels
    any other time as one that may only have loaded saved states."""
    import importlib.util

    from rankcollapse.book import runner

    spec = importlib.util.spec_from_file_location("bench_all", REPO / "bench" / "all.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    doc = {"how": "test", "cores": 2, "wall_s": 4000.0, "chapters": {"skip": {"wall_s": 12.5, "cpu_s": 12}}}
    (tmp_path / "full.json").write_text(json.dumps(doc))
    monkeypatch.setattr(runner, "costs_path", lambda profile: tmp_path / f"{profile}.json")
    times = bench.chapter_times("full")
    assert times["skip"] == (12.5, "from an empty store")
    assert all("may have loaded saved states" in src for ch, (_, src) in times.items() if ch != "skip")
    assert bench.scratch_book("full")["wall_s"] == 4000.0 and bench.scratch_book("smoke") == {}


def test_gpu_ratio_is_the_recorded_measurement(tmp_path):
    """The GPU/CPU-core ratio behind the paper estimates is read from the recorded GPU run, at the paper
    profile's shapes, best engine on each side; skipped rows are ignored."""
    import json

    from rankcollapse.book import estimates

    g = estimates.gpu_measurement()
    assert g["device"] and 1 < g["ratio"] < 1000 and g["ratio"] == pytest.approx(g["cpu_s"] / g["gpu_s"])
    assert estimates.GPU_VS_CPU_CORE == pytest.approx(g["ratio"], abs=0.05)
    rec = {
        "machine": {"device": "GPU X"},
        "steps": [
            {"profile": "paper", "device": "cuda", "engine": "eager", "wall_s_per_step": 0.04},
            {"profile": "paper", "device": "cuda", "engine": "compiled", "wall_s_per_step": 0.02},
            {"profile": "paper", "device": "cpu", "engine": "eager", "wall_s_per_step": 1.0},
            {"profile": "paper", "device": "cpu", "engine": "compiled", "skipped": "out of time"},
            {"profile": "full", "device": "cpu", "engine": "eager", "wall_s_per_step": 0.01},
        ],
        "drivers": {"procs": 8, "steps_per_s": 100.0},
    }
    p = tmp_path / "g.json"
    p.write_text(json.dumps(rec))
    g = estimates.gpu_measurement(p)
    assert g["ratio"] == pytest.approx(50.0) and g["together"] == pytest.approx(2.0)
    assert g["device"] == "GPU X"


def test_check_names_another_pythons_corpus(monkeypatch):
    """Part III trains on this Python's standard library: where its bytes are not those the records were
    made with, `rcbook check` says so (and nothing where they are)."""
    import dataclasses

    from rankcollapse.book import cli
    from rankcollapse.lm import model

    assert cli.corpus_differs("smoke") == ""  # the records were made with this Python
    real = model.corpus()
    fake = dataclasses.replace(real, sha256="0" * 64)
    monkeypatch.setattr(model, "corpus", lambda root=None: fake)
    msg = cli.corpus_differs("smoke")
    assert "standard library" in msg and "0000000000000000 here" in msg and real.sha256[:16] in msg
