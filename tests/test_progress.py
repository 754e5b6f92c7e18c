"""What a person watching a run sees: stage lines once each in a log, and an ETA from the recorded costs."""

import io
import re
import time

from rankcollapse.book.progress import Progress


def test_stage_lines_appear_once_each_in_a_log(tmp_path):
    out = tmp_path / "build" / "smoke" / "ch"
    running = out.parent / ".ch-123-abc"
    running.mkdir(parents=True)
    buf = io.StringIO()
    with Progress({"ch": out}, {"ch": 10.0}, 2, "smoke", stream=buf, live=False, interval=0.05) as pr:
        pr.start("ch")
        (running / "progress.log").write_text("[ch 1.0s] stage one\n")
        time.sleep(0.3)
        with open(running / "progress.log", "a") as f:
            f.write("[ch 2.0s] stage two\n")
        time.sleep(0.3)
        pr.end("ch", "ran", "[1/1] ch ran")
    text = buf.getvalue()
    assert text.count("stage one") == 1 and text.count("stage two") == 1 and "[1/1] ch ran" in text


def test_the_eta_counts_what_is_left_on_the_cores(tmp_path):
    outs = {n: tmp_path / n for n in "abc"}
    pr = Progress(outs, {"a": 100.0, "b": 100.0, "c": 100.0}, 2, "full", stream=io.StringIO(), live=False)
    assert 145 < pr.eta() <= 150  # 300 s of work on 2 cores
    pr.ended["a"] = "ran"
    assert 95 < pr.eta() <= 100
    pr.started["b"] = time.perf_counter() - 500  # far over its recorded cost: still some time left
    assert pr.eta() > 0
    pr2 = Progress({"x": tmp_path / "x"}, {"x": float("inf")}, 2, "full", stream=io.StringIO(), live=False)
    assert pr2.eta() is None and "unknown" in pr2.summary()


def _progress_with_stage(tmp_path, expected: float, started_ago: float):
    out = tmp_path / "build" / "full" / "ch"
    running = out.parent / ".ch-123-abc"
    running.mkdir(parents=True)
    (running / "progress.log").write_text(
        "[ch    10.0s] 10 jobs, 2 at a time\n"
        "[ch    20.0s] done: a (1 of 10)\n"
        "[ch    30.0s] done: b (2 of 10)\n"
    )
    pr = Progress({"ch": out}, {"ch": expected}, 2, "full", stream=io.StringIO(), live=False)
    pr.started["ch"] = time.perf_counter() - started_ago
    pr.poll()
    return pr


def test_a_stage_of_jobs_says_what_it_has_left_at_the_pace_of_its_jobs(tmp_path):
    pr = _progress_with_stage(tmp_path, expected=1000.0, started_ago=30.0)
    # two of ten jobs in 20 s since the stage began at 10 s: the stage ends near 110 s, 80 s from now
    assert 79 < pr.stage_left("ch") <= 80
    assert 960 < pr.eta() <= 970  # within its recorded cost: the recorded cost still decides
    assert "at least" not in pr.summary()


def test_a_resumed_stage_is_paced_by_the_jobs_it_trains_not_by_those_the_store_served(tmp_path):
    out = tmp_path / "build" / "full" / "ch"
    running = out.parent / ".ch-123-abc"
    running.mkdir(parents=True)
    served = "".join(f"[ch    10.{k:02d}s] done: j{k} ({k} of 100)\n" for k in range(1, 91))  # all at once
    trained = "".join(f"[ch    {10 + 30 * i}.5s] done: t{i} ({90 + i} of 100)\n" for i in range(1, 5))
    (running / "progress.log").write_text("[ch     10.0s] 100 jobs, 1 at a time\n" + served + trained)
    pr = Progress({"ch": out}, {"ch": 10.0}, 1, "full", stream=io.StringIO(), live=False)
    pr.started["ch"] = time.perf_counter() - 130.5
    pr.poll()
    # 94 of 100 done; the last four took 30 s each, so six more take about 180 s (the whole stage's average,
    # 1.3 s a job, would say 8 s)
    assert 175 < pr.stage_left("ch") <= 180
    assert re.search(r"at least ~(2:5\d|3:00) ", pr.summary())


def test_past_its_recorded_cost_the_eta_is_a_lower_bound_that_says_so(tmp_path):
    pr = _progress_with_stage(tmp_path, expected=20.0, started_ago=30.0)
    assert 79 < pr.eta() <= 80  # not a tenth of the elapsed time: what the running stage has left
    s = pr.summary()
    assert "at least" in s and "ch ran past its recorded cost" in s
    pr.stage["ch"]["k"] = 10  # the stage is over and nothing is known beyond it
    assert pr.eta() == 0 and "at least" in pr.summary()


def _negate(x):
    return -x


def test_run_parallel_writes_the_lines_the_eta_reads():
    from rankcollapse.jobs import DONE_RE, STAGE_RE, run_parallel

    lines = []
    out = run_parallel(_negate, [{"x": -1}, {"x": -2}, {"x": -3}], workers=1, log=lines.append, labels="abc")
    assert out == [1, 2, 3]
    assert re.search(STAGE_RE, lines[0]) and lines[0] == "3 jobs, 1 at a time"
    assert lines[1:] == ["done: a (1 of 3)", "done: b (2 of 3)", "done: c (3 of 3)"]
    assert all(re.match(DONE_RE, ln) for ln in lines[1:])
