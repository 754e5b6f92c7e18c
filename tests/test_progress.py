"""What a person watching a run sees: stage lines once each in a log, and an ETA from the recorded costs."""

import io
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
