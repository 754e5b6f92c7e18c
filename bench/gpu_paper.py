"""Part III's language model on a GPU: its step against one CPU core, and the paper profile's drivers.

    python bench/gpu_paper.py --out DIR [--corpus DIR] [--procs 8] [--budget 300] [--quick]

Run on a machine with a CUDA GPU (``python3`` with a CUDA build of torch; nothing else of the book's
environment is needed: the library is imported from ``lib/``). It measures, in one run on one machine:

1. **steps**: seconds per training step of the library's :func:`rankcollapse.lm.training.train` (probe every
   10 steps, weights' stable ranks every 50: the chapters' own loop) at the full and the paper profile's
   shapes, on the GPU (eager and compiled) and on one CPU core of the same machine (eager and compiled),
   wall and CPU time, after warm-up steps that include compiling. The ratio CPU core / GPU at the paper
   shapes is what :mod:`rankcollapse.book.estimates` needs in place of an assumed one.
2. **drivers**: the repair-driver chapter's drivers at the paper profile (its own
   :func:`rankcollapse.repair.drivers.driver_spec`, on ``cuda``), one process per seed, ``--procs`` at once,
   within ``--budget`` seconds: per seed, the steps reached, the wall time, whether and where the collapse
   settled, and the final stable rank; and the aggregate steps per second of the GPU shared by the
   processes.

Writes ``DIR/gpu_paper.json`` (machine, torch, every measurement) and one log per seed. The corpus is the
standard library's top-level ``.py`` files of the Python that runs the book (3.11); ``--corpus`` points at a
copy of them when this Python is another one, so the drivers see the book's own bytes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import torch  # noqa: E402

SHAPES = ("full", "paper")


def use_corpus(root: str | None) -> None:
    """Make the library's default corpus the files under ``root`` (when given), in this process."""
    if not root:
        return
    from rankcollapse.lm import model as lm

    orig = lm.corpus
    lm.corpus = lambda r=None: orig(r or root)


def params(profile: str, device: str) -> SimpleNamespace:
    """The repair-driver chapter's parameters at ``profile``, training on ``device`` (engine auto)."""
    from rankcollapse.chapters import schema

    p = dict(schema("repair-driver").resolve({}, profile))
    p["device"] = device
    return SimpleNamespace(**p)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def step_time(profile: str, device: str, engine: str, warm: int, steps: int) -> dict:
    """Seconds per step (wall and this process's CPU) of the library's train() at ``profile``'s shapes."""
    from rankcollapse.book.estimates import lm_step_flops
    from rankcollapse.lm import training as tr
    from rankcollapse.lm.model import LMConfig

    p = params(profile, device)
    cfg = LMConfig(depth=p.depth, d_model=p.d_model, heads=p.heads, ctx=p.ctx)
    spec = tr.RunSpec(model=cfg, seed=0, batch=p.batch, lr=p.lr, device=device, engine=engine)
    state = tr.new_state(spec)
    w0 = time.perf_counter()
    tr.train(spec, state, warm)
    sync(device)
    warm_s = time.perf_counter() - w0
    w0, c0 = time.perf_counter(), time.process_time()
    tr.train(spec, state, warm + steps)
    sync(device)
    wall, cpu = (time.perf_counter() - w0) / steps, (time.process_time() - c0) / steps
    flops = lm_step_flops(p.depth, p.d_model, p.ctx, p.batch, cfg.vocab, cfg.mlp_mult)
    return {
        "profile": profile,
        "device": device,
        "engine": engine,
        "steps": steps,
        "warmup_s": round(warm_s, 2),
        "wall_s_per_step": wall,
        "cpu_s_per_step": cpu,
        "gflop_per_step": flops / 1e9,
        "gflop_per_s": flops / wall / 1e9,
    }


def measure_steps(quick: bool, device: str, echo, until: float) -> list[dict]:
    """Every row of the plan, in order, while ``time.perf_counter()`` is below ``until``; the rest are
    listed as skipped. The paper shapes first: their GPU/CPU ratio is what the estimates need."""
    torch.set_num_threads(1)
    plan = []
    for prof in reversed(SHAPES):
        big = prof == "paper"
        if device == "cuda":
            plan += [(prof, "cuda", e, 10, 60 if big else 150) for e in ("eager", "compiled")]
        plan += [(prof, "cpu", e, 1, 3 if big else 20) for e in ("eager", "compiled")]
    if quick:
        plan = [(prof, dev, e, 1, 2) for prof, dev, e, _, _ in plan if prof == "full" and e == "eager"]
    rows = []
    for prof, dev, e, warm, n in plan:
        if time.perf_counter() > until:
            rows.append({"profile": prof, "device": dev, "engine": e, "skipped": "out of time"})
            echo(f"  {prof:<5} {dev:<4} {e:<8} skipped: out of time")
            continue
        r = step_time(prof, dev, e, warm, n)
        rows.append(r)
        echo(
            f"  {prof:<5} {dev:<4} {e:<8} {r['wall_s_per_step'] * 1e3:9.2f} ms/step wall "
            f"{r['cpu_s_per_step'] * 1e3:9.2f} ms CPU  {r['gflop_per_s']:8.1f} GFLOP/s "
            f"(warm-up {r['warmup_s']} s)"
        )
    return rows


def _driver(seed: int, profile: str, device: str, root: str, corpus: str | None, logdir: str, q) -> None:
    """One seed's driver, in its own process: put its summary on ``q``."""
    torch.set_num_threads(1)
    use_corpus(corpus)
    from rankcollapse.book.repair_params import study_spec
    from rankcollapse.lm import training as tr
    from rankcollapse.repair.drivers import driver_spec

    ds = driver_spec(study_spec(params(profile, device)), seed)
    logf = open(Path(logdir) / f"driver_s{seed}.log", "a", buffering=1)
    t0 = time.perf_counter()
    last = {"step": 0}

    def log(msg):
        if msg.startswith("step "):
            last["step"] = int(msg.split()[1])
        logf.write(f"{time.perf_counter() - t0:8.1f}s {msg}\n")
        q.put({"seed": seed, "progress": last["step"], "wall_s": time.perf_counter() - t0})

    out = tr.driver(ds, log=log, root=Path(root))
    h, det = out["hist"], out.get("det") or {}
    q.put(
        {
            "seed": seed,
            "done": True,
            "steps": ds.steps,
            "wall_s": time.perf_counter() - t0,
            "settled": det.get("settled"),
            "final_srank": h["srank"][-1][-1] if h["srank"] else None,
            "final_loss": h["probe_loss"][-1] if h["probe_loss"] else None,
            "engine": ds.run.engine,
        }
    )


def run_drivers(
    profile: str, device: str, seeds, procs: int, budget: float, out: Path, root: Path, corpus, echo
):
    """The drivers of ``seeds`` at ``profile``, ``procs`` processes at once, stopped at ``budget`` s; their
    states under ``root``."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    root.mkdir(parents=True, exist_ok=True)
    pending, running, res = list(seeds), {}, {}
    t0 = time.perf_counter()
    last_echo = 0.0
    while pending or running:
        while pending and len(running) < procs:
            s = pending.pop(0)
            pr = ctx.Process(target=_driver, args=(s, profile, device, str(root), corpus, str(out), q))
            pr.start()
            running[s] = pr
            res[s] = {"seed": s, "progress": 0}
        try:
            m = q.get(timeout=2)
            res[m["seed"]].update(m)
        except Exception:
            pass
        for s, pr in list(running.items()):
            if not pr.is_alive() and q.empty():
                pr.join()
                running.pop(s)
        el = time.perf_counter() - t0
        if el - last_echo > 30:
            last_echo = el
            echo(f"  {el:6.0f}s " + " ".join(f"s{s}:{res[s].get('progress', 0)}" for s in sorted(res)))
        if el > budget:
            for pr in running.values():
                pr.terminate()
            break
    wall = time.perf_counter() - t0
    rows = [res[s] for s in sorted(res)]
    steps = sum(r["steps"] if r.get("done") else r.get("progress", 0) for r in rows)
    return {
        "profile": profile,
        "procs": procs,
        "wall_s": wall,
        "steps_total": steps,
        "steps_per_s": steps / wall,
        "seeds": rows,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--corpus", default=None, help="the book's stdlib .py files")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--budget", type=float, default=300.0, help="seconds for the drivers part at most")
    ap.add_argument("--deadline", type=float, default=480.0, help="seconds for the whole run at most")
    ap.add_argument("--steps-share", type=float, default=0.4, help="share of the deadline for part 1")
    ap.add_argument("--states", type=Path, default=None, help="the drivers' states (OUT/states)")
    ap.add_argument("--profile", default="paper", choices=SHAPES, help="the drivers' profile")
    ap.add_argument("--quick", action="store_true", help="a few steps on the CPU: checks the script")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    a.out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    use_corpus(a.corpus)

    def echo(s):
        print(s, flush=True)

    from rankcollapse.lm import model as lm

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "cpu": platform.processor() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)),
        "corpus_sha256": lm.corpus().sha256,
        "fp32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    echo(json.dumps(info))
    result = {"machine": info}
    echo("steps:")
    result["steps"] = measure_steps(a.quick, device, echo, t0 + a.steps_share * a.deadline)
    (a.out / "gpu_paper.json").write_text(json.dumps(result, indent=1))
    prof = "smoke" if a.quick else a.profile
    budget = min(a.budget, a.deadline - 15 - (time.perf_counter() - t0))
    echo(f"drivers ({prof} profile, {a.procs} at once, budget {budget:.0f} s):")
    p = params(prof, device)
    seeds = list(p.seeds)[:2] if a.quick else list(p.seeds)
    states = a.states or a.out / "states"
    result["drivers"] = run_drivers(prof, device, seeds, a.procs, budget, a.out, states, a.corpus, echo)
    d = result["drivers"]
    for r in d["seeds"]:
        echo(f"  {json.dumps(r)}")
    echo(f"  {d['steps_total']} steps in {d['wall_s']:.0f} s: {d['steps_per_s']:.1f} steps/s together")
    (a.out / "gpu_paper.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
