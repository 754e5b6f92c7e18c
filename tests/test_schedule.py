"""The schedule simulation (book/schedule.py) on hand-made costs whose answer is known, and rcbook costs
folding a job log into each chapter's segments."""

import json

import pytest

from rankcollapse import jobs as rjobs
from rankcollapse.book import schedule as sc

FOUR = [10.0, 10.0, 10.0, 10.0]


def costs(**chapters):
    return {"chapters": chapters}


def ch(*segments, cpu=None):
    total = sum(s.get("serial", 0) + sum(s.get("stage", [])) for s in segments)
    return {"wall_s": total, "cpu_s": total if cpu is None else cpu, "segments": list(segments)}


@pytest.mark.parametrize("cores, wall", [(1, 40), (2, 20), (3, 20), (4, 10), (16, 10)])
def test_a_stage_of_four_equal_jobs(cores, wall):
    c = costs(a=ch({"stage": FOUR, "workers": 2}))
    r = sc.simulate(c, cores)
    assert r["wall_s"] == wall and r["chapters"]["a"] == {"start_s": 0.0, "end_s": wall, "wall_s": wall}
    assert r["cpu_s"] == 40 and r["busy"] == pytest.approx(40 / (cores * wall)) and r["segments"]


@pytest.mark.parametrize("cores, wall", [(1, 48), (2, 28), (4, 18), (8, 18)])
def test_serial_segments_around_a_stage(cores, wall):
    c = costs(a=ch({"serial": 5.0}, {"stage": FOUR, "workers": 4}, {"serial": 3.0}))
    assert sc.simulate(c, cores)["wall_s"] == wall


@pytest.mark.parametrize("cores, wall, b_start", [(1, 55, 40), (2, 35, 20), (4, 25, 10), (5, 15, 0)])
def test_the_chapter_that_started_first_has_the_cores(cores, wall, b_start):
    """a (40 s of jobs) starts first, being longer; b (15 s serial) gets a core only when a leaves one."""
    c = costs(b=ch({"serial": 15.0}), a=ch({"stage": FOUR, "workers": 2}))
    assert sc.order(c) == ["a", "b"]
    r = sc.simulate(c, cores)
    assert r["wall_s"] == wall and r["chapters"]["b"]["start_s"] == b_start


def test_units_of_a_running_chapter_take_any_free_core():
    """a's serial 10 s, then two jobs of 10 s; b is one serial unit of 25 s, started on the idle core."""
    c = costs(
        a=ch({"serial": 10.0}, {"stage": [10.0, 10.0], "workers": 2}, cpu=30.0), b=ch({"serial": 25.0})
    )
    r = sc.simulate(c, 2)
    assert r["chapters"]["b"] == {"start_s": 0.0, "end_s": 25.0, "wall_s": 25.0}
    assert r["chapters"]["a"]["end_s"] == 30.0 and r["wall_s"] == 30.0
    assert sc.simulate(c, 3)["wall_s"] == 25.0  # a's stage on two cores beside b


def test_todays_runner_reserves_a_chapters_workers():
    c = costs(a=ch({"stage": FOUR, "workers": 2}), b=ch({"serial": 15.0}))
    r = sc.simulate(c, 2, "reserved")
    assert r["chapters"]["b"]["start_s"] == 20.0 and r["wall_s"] == 35.0
    one = costs(a=ch({"stage": FOUR, "workers": 1}), b=ch({"serial": 15.0}))
    r = sc.simulate(one, 2, "reserved")  # a takes one core, runs its jobs one after another; b beside it
    assert r["chapters"]["a"]["wall_s"] == 40.0 and r["chapters"]["b"]["start_s"] == 0.0
    assert r["wall_s"] == 40.0
    assert sc.simulate(one, 2)["wall_s"] == 35.0  # shared: a's pool takes both cores
    with pytest.raises(ValueError, match="allowed"):
        sc.simulate(c, 2, "greedy")


def test_chapters_without_segments_are_one_serial_unit_each():
    c = costs(
        a={"wall_s": 31.0, "cpu_s": 30.0}, b={"wall_s": 21.0, "cpu_s": 20.0}, c={"wall_s": 1, "cpu_s": 0}
    )
    assert not sc.has_segments(c)
    assert sc.simulate(c, 1)["wall_s"] == 50.0
    r = sc.simulate(c, 2)
    assert r["wall_s"] == 30.0 and not r["segments"] and r["chapters"]["c"]["wall_s"] == 0.0
    assert sc.simulate(c, 16)["wall_s"] == 30.0


def test_the_prediction_beside_the_recorded_wall():
    c = dict(costs(a=ch({"stage": FOUR, "workers": 2}), b=ch({"serial": 15.0})), cores=2, wall_s=40.0)
    v = sc.versus_record(c)
    assert v["predicted_wall_s"] == 35.0 and v["error"] == pytest.approx(35 / 40 - 1)
    assert v["chapters"]["a"] == {"recorded_wall_s": 40.0, "predicted_wall_s": 20.0}
    assert sc.versus_record(costs(a=ch({"serial": 1.0}))) is None


def test_the_recorded_books_simulate(monkeypatch):
    from rankcollapse.book import runner

    for profile in ("full", "smoke"):
        doc = json.loads(runner.costs_path(profile).read_text())
        total = sum(c["cpu_s"] for c in doc["chapters"].values())
        # every recorded time is rounded to the millisecond: the segments' sum may differ from the chapters'
        # totals by half a millisecond per rounded number
        chapters = doc["chapters"].values()
        rounded = sum(1 + sum(len(s.get("stage", [0])) for s in c.get("segments", [])) for c in chapters)
        assert sc.simulate(doc, 1)["wall_s"] == pytest.approx(total, rel=0, abs=5e-4 * rounded)
        walls = [sc.simulate(doc, n)["wall_s"] for n in (2, 4, 8, 16)]
        assert walls == sorted(walls, reverse=True)
        assert walls[-1] >= max(c["cpu_s"] for c in doc["chapters"].values()) - 1e-6 or sc.has_segments(doc)


# -- folding a job log into segments ----------------------------------------------------------------------
T = 1000.0


def job(chapter, stage, cpu, t0, t1, label="j"):
    return {
        "chapter": chapter,
        "stage": stage,
        "label": label,
        "cpu_s": cpu,
        "wall_s": t1 - t0,
        "t0": t0,
        "t1": t1,
    }


def stage(chapter, sid, t0, t1, n, workers, mode="pool"):
    return {
        "chapter": chapter,
        "stage": sid,
        "kind": "stage",
        "mode": mode,
        "t0": t0,
        "t1": t1,
        "n_jobs": n,
        "workers": workers,
    }


def synthetic_log():
    """Chapter a: 100 s CPU, 60 s wall; a stage of two 30 s jobs (10..30 s) with a stage nested in its first
    job (a job's own pool: its CPU is in that job's), then a stage of one 20 s job (40..50 s). Chapter b ran
    no stage; c is no chapter of the run."""
    return [
        job("a", "1-1", 30.0, T + 10, T + 30),
        stage("a", "7-1", T + 12, T + 20, 1, 1, "serial"),
        job("a", "7-1", 5.0, T + 12, T + 20),
        job("a", "1-1", 30.0, T + 10.5, T + 29),
        stage("a", "1-1", T + 10, T + 30, 2, 2),
        job("a", "1-2", 20.0, T + 40, T + 50),
        stage("a", "1-2", T + 40, T + 50, 1, 1, "serial"),
        job("c", "9-1", 500.0, T, T + 500),
        stage("c", "9-1", T, T + 500, 1, 1),
    ]


def write_log(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + "not json\n")


def run_log(runner, folder, a_cpu=100.0):
    outs = [
        runner.RunOutcome("a", "ran", 60.0, folder, cpu_seconds=a_cpu),
        runner.RunOutcome("b", "ran", 20.0, folder, cpu_seconds=20.0),
    ]
    return runner.write_run_log(folder, outs, 2, 70.0)


@pytest.fixture
def runner(tmp_path, monkeypatch):
    from rankcollapse.book import runner

    monkeypatch.setattr(runner, "costs_path", lambda profile: tmp_path / "costs" / f"{profile}.json")
    return runner


def test_record_costs_folds_the_job_log_into_segments(tmp_path, runner):
    log = run_log(runner, tmp_path)
    write_log(tmp_path / "jobs.log", synthetic_log())
    runner.record_costs("full", log, "synthetic")
    got = runner.scratch_costs("full")
    third = round(20.0 / 3, 3)  # 100 - 80 s of jobs, over the gaps 10 (before), 10 (between), 10 (after)
    assert got["a"] == {
        "wall_s": 60.0,
        "cpu_s": 100.0,
        "segments": [
            {"serial": third},
            {"stage": [30.0, 30.0], "workers": 2},
            {"serial": third},
            {"stage": [20.0], "workers": 1},
            {"serial": third},
        ],
    }
    assert got["b"] == {"wall_s": 20.0, "cpu_s": 20.0, "segments": [{"serial": 20.0}]}
    doc = json.loads(runner.costs_path("full").read_text())
    assert set(doc) == {"how", "cores", "wall_s", "steps_trained", "steps_unique", "chapters"}
    assert sc.simulate(doc, 1)["wall_s"] == pytest.approx(120.0, abs=0.01)
    assert sc.simulate(doc, 4)["chapters"]["a"]["wall_s"] == pytest.approx(20 + 30 + 20, abs=0.01)


def test_a_chapter_record_places_the_serial_time(tmp_path, runner):
    log = run_log(runner, tmp_path)
    recs = synthetic_log() + [{"chapter": "a", "kind": "chapter", "t0": T + 5, "t1": T + 60}]
    write_log(tmp_path / "other.log", recs)
    runner.record_costs("full", log, "synthetic", job_log=tmp_path / "other.log")
    segs = runner.scratch_costs("full")["a"]["segments"]
    assert [s.get("serial") for s in segs if "serial" in s] == [4.0, 8.0, 8.0]  # gaps 5, 10, 10


def test_without_a_job_log_costs_have_no_segments(tmp_path, runner):
    log = run_log(runner, tmp_path)
    runner.record_costs("full", log, "no log")
    assert runner.scratch_costs("full") == {
        "a": {"wall_s": 60.0, "cpu_s": 100.0},
        "b": {"wall_s": 20.0, "cpu_s": 20.0},
    }
    write_log(tmp_path / "jobs.log", [dict(r, chapter="") for r in synthetic_log()])  # no $RCBOOK_CHAPTER
    runner.record_costs("full", log, "unnamed")
    assert not sc.has_segments(json.loads(runner.costs_path("full").read_text()))


def test_a_job_log_of_another_run_is_refused(tmp_path, runner):
    from rankcollapse.book.params import ParameterError

    log = run_log(runner, tmp_path, a_cpu=50.0)  # less than its jobs' 80 s
    write_log(tmp_path / "jobs.log", synthetic_log())
    with pytest.raises(ParameterError, match="chapter 'a'.*not of this run"):
        runner.record_costs("full", log, "synthetic")
    assert not runner.costs_path("full").exists()


def test_the_job_log_of_run_parallel_folds(tmp_path, runner, monkeypatch):
    """Records written by rankcollapse.jobs itself: an in-process stage between two stretches of serial
    work."""
    import time

    def spin(s):
        t = time.process_time()
        while time.process_time() - t < s:
            pass

    monkeypatch.delenv(rjobs.SCHEDULER_ENV, raising=False)
    monkeypatch.setenv(rjobs.JOB_LOG_ENV, str(tmp_path / "jobs.log"))
    monkeypatch.setenv(rjobs.CHAPTER_ENV, "a")
    c0, w0 = time.process_time(), time.perf_counter()
    spin(0.05)
    rjobs.run_parallel(spin, [{"s": 0.1}, {"s": 0.1}], 1)
    spin(0.05)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    folder = tmp_path / "run"
    outs = [runner.RunOutcome("a", "ran", wall, folder, cpu_seconds=cpu)]
    log = runner.write_run_log(folder, outs, 2, wall)
    runner.record_costs("full", log, "in-process", job_log=tmp_path / "jobs.log")
    segs = runner.scratch_costs("full")["a"]["segments"]
    (st,) = [s for s in segs if "stage" in s]
    assert st["workers"] == 1 and len(st["stage"]) == 2 and all(0.09 <= x <= 0.2 for x in st["stage"])
    serial = sum(s.get("serial", 0) for s in segs)
    assert serial == pytest.approx(cpu - sum(st["stage"]), abs=2e-3)
