"""Where jobs run changes nothing a chapter records: a stage on the local pool and on a two-worker Dask
cluster write the same stored states (but for the global RNG state each holds), the same states log and the
same step ledger, with the same results; the job log records every job and stage; a worker started with
other kernels refuses a job."""

import collections
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rankcollapse import jobs as rjobs
from rankcollapse import store
from rankcollapse.book import kernels
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import LMConfig
from rankcollapse.repair import stages

TINY = LMConfig(depth=2, d_model=8, heads=2, ctx=8)


def tiny_spec(**kw):
    base = tr.RunSpec(model=TINY, seed=3, batch=2, probe_batch=2, alpha_knots=tr.driver_knots(10, 20, 0.05))
    return replace(base, **kw)


def stage():
    """Two drivers and a healthy run of other seeds (no shared prefix, so no order decides who trains it)."""
    jobs = [("driver", {"ds": tr.DriverSpec(tiny_spec(seed=s), 30)}) for s in (0, 1)]
    jobs.append(("healthy", {"spec": tiny_spec(seed=2), "steps": 25, "share_at": 0}))
    return [{"kind": k, "kw": kw} for k, kw in jobs], ["driver 0", "driver 1", "healthy 2"]


def test_the_forwarded_names_are_the_librarys():
    assert store.STATES_LOG in rjobs.FORWARDED_ENV
    assert tr.STEP_LEDGER_ENV in rjobs.FORWARDED_ENV
    assert set(kernels.SWITCHES) == set(rjobs.KERNEL_ENV) <= set(rjobs.FORWARDED_ENV)
    for v in kernels.VARIANTS:
        assert set(kernels.env_for(v)) <= set(rjobs.KERNEL_ENV)
    assert len(set(rjobs.FORWARDED_ENV)) == len(rjobs.FORWARDED_ENV)
    assert rjobs.SCHEDULER_ENV not in rjobs.FORWARDED_ENV
    # the module stays out of the keys' business: it imports nothing of the package but procs
    assert set(store.import_closure("rankcollapse.jobs")) <= {"rankcollapse", "rankcollapse.jobs"} | set(
        store.KEY_EXEMPT
    )


def _run(where: str, tmp: Path, monkeypatch) -> dict:
    d = tmp / where
    d.mkdir()
    monkeypatch.setenv("RCBOOK_STATES", str(d / "states"))
    monkeypatch.setenv(store.STATES_LOG, str(d / "states.log"))
    monkeypatch.setenv(tr.STEP_LEDGER_ENV, str(d / "steps.log"))
    monkeypatch.setenv(rjobs.JOB_LOG_ENV, str(d / "jobs.log"))
    monkeypatch.setenv(rjobs.CHAPTER_ENV, f"chapter-{where}")
    jobs, labels = stage()
    sched = "local" if where == "dask" else None
    out = rjobs.run_parallel(stages._dispatch, jobs, 2, labels=labels, scheduler_=sched)
    again = rjobs.run_parallel(stages._dispatch, jobs, 2, labels=labels, scheduler_=sched)  # loads them
    root = (d / "states").resolve()
    return {
        "out": out,
        "again": again,
        "root": root,
        "consumed": {str(Path(p).relative_to(root)): h for p, h in store.consumed(d / "states.log").items()},
        "ledger": collections.Counter((d / "steps.log").read_text().splitlines()),
        "jobs": [json.loads(line) for line in (d / "jobs.log").read_text().splitlines()],
    }


def _same_state(a, b, where=""):
    """Equal saved states, but for the global torch RNG state each one holds: that of the process that saved
    it, seeded at random when torch is imported (no result reads it: batches and initialisations come from
    their own generators), so the file hashes of two runs differ wherever they run."""
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            if k != "torch_rng":
                _same_state(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


def test_a_dask_stage_records_what_the_local_pool_records(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    torch.set_num_threads(1)
    monkeypatch.delenv(rjobs.SCHEDULER_ENV, raising=False)
    pool = _run("pool", tmp_path, monkeypatch)
    dask = _run("dask", tmp_path, monkeypatch)
    for a, b in zip(pool["out"] + pool["again"], dask["out"] + dask["again"]):
        assert a["key"] == b["key"] and a["hist"] == b["hist"] and a["final_probe"] == b["final_probe"]
    assert [o["hist"] for o in pool["again"]] == [o["hist"] for o in pool["out"]]
    # the same stored states, written then loaded, noted with the hashes they are stored with
    assert pool["consumed"] and set(pool["consumed"]) == set(dask["consumed"])
    for r in (pool, dask):
        assert not store.changed_states({str(r["root"] / p): h for p, h in r["consumed"].items()})
    for p in pool["consumed"]:
        _same_state(tr.load_dict(pool["root"] / p, False), tr.load_dict(dask["root"] / p, False))
    assert pool["ledger"] and pool["ledger"] == dask["ledger"]  # trained once, in the first stage
    for where, r in (("pool", pool), ("dask", dask)):
        jobs = [j for j in r["jobs"] if j.get("kind") != "stage"]
        stages = [j for j in r["jobs"] if j.get("kind") == "stage"]
        assert len(jobs) == 6 and len(stages) == 2
        assert {j["chapter"] for j in r["jobs"]} == {f"chapter-{where}"}
        assert sorted(j["label"] for j in jobs) == sorted(stage()[1] * 2)
        assert {s["mode"] for s in stages} == {"pool" if where == "pool" else "dask-local"}
        assert all(s["n_jobs"] == 3 and s["workers"] == 2 for s in stages)
        assert len({s["stage"] for s in stages}) == 2 and {j["stage"] for j in jobs} == {
            s["stage"] for s in stages
        }
        first = [j for j in jobs if j["stage"] == stages[0]["stage"]]
        assert all(j["cpu_s"] > 0 and j["t1"] >= j["t0"] and j["wall_s"] >= 0 for j in first)
        assert all(stages[0]["t0"] <= j["t0"] <= j["t1"] <= stages[0]["t1"] for j in first)


def test_in_process_jobs_are_logged_and_unlogged_alike(tmp_path, monkeypatch):
    calls = []

    def fn(x):
        calls.append(x)
        return sum(i * i for i in range(20000 * x))

    monkeypatch.delenv(rjobs.SCHEDULER_ENV, raising=False)
    monkeypatch.delenv(rjobs.JOB_LOG_ENV, raising=False)
    plain = rjobs.run_parallel(fn, [{"x": 1}, {"x": 2}], 1)
    monkeypatch.setenv(rjobs.JOB_LOG_ENV, str(tmp_path / "jobs.log"))
    monkeypatch.delenv(rjobs.CHAPTER_ENV, raising=False)
    logged = rjobs.run_parallel(fn, [{"x": 1}, {"x": 2}], 1, labels=["a", "b"])
    assert plain == logged and calls == [1, 2, 1, 2]
    recs = [json.loads(line) for line in (tmp_path / "jobs.log").read_text().splitlines()]
    assert [r.get("label") for r in recs] == ["a", "b", None]
    assert recs[-1]["kind"] == "stage" and recs[-1]["mode"] == "serial" and recs[-1]["n_jobs"] == 2
    assert all(r["chapter"] == "" and r["stage"] == recs[-1]["stage"] for r in recs)
    assert recs[-1]["stage"].startswith(f"{os.getpid()}-")


def test_a_worker_with_other_kernels_refuses_the_job(monkeypatch):
    for k in kernels.SWITCHES:
        monkeypatch.delenv(k, raising=False)
    want = {"env": kernels.env_for("avx2"), "cpu_capability": None}
    with pytest.raises(RuntimeError, match="kernel switches"):
        rjobs._call_env(lambda: 1, {}, want)
    same = {"env": {}, "cpu_capability": str(torch.backends.cpu.get_cpu_capability())}
    assert rjobs._call_env(lambda: 1, {}, same)[0] == 1
    with pytest.raises(RuntimeError, match="CPU capability"):
        rjobs._call_env(lambda: 1, {}, {"env": {}, "cpu_capability": "some-other-isa"})


def test_a_job_on_a_worker_sees_the_submitters_variables_and_leaves_the_workers(monkeypatch):
    monkeypatch.setenv("RCBOOK_STATES", "/worker/own")
    monkeypatch.delenv(store.STATES_LOG, raising=False)
    for k in kernels.SWITCHES:
        monkeypatch.delenv(k, raising=False)
    seen = {}

    def fn():
        seen.update({k: os.environ.get(k) for k in ("RCBOOK_STATES", store.STATES_LOG)})

    want = {"env": {store.STATES_LOG: "/sub/states.log"}, "cpu_capability": None}
    rjobs._call_env(fn, {}, want)
    assert seen == {"RCBOOK_STATES": None, store.STATES_LOG: "/sub/states.log"}  # as the submitter has them
    assert os.environ["RCBOOK_STATES"] == "/worker/own" and store.STATES_LOG not in os.environ
