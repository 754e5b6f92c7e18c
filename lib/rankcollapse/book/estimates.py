"""What a chapter would cost at the ``paper`` profile, told before ``rcbook`` refuses to start it on a CPU.

The ``paper`` profile runs the papers' own sizes and expects a GPU. Without one, ``rcbook run --profile
paper`` prints, per chapter, the chapter's CPU time at ``full`` from an empty store
(:func:`rankcollapse.book.runner.expected_seconds`) times :func:`paper_factor`, and stops. The factor is
either the chapter's own (a module attribute ``PAPER_VS_FULL``), or, for a chapter that trains the
language model of Part III (its schema has the driver's parameters, :data:`rankcollapse.book.repair_params
.DRIVER_PARAMS`), computed from the two profiles' parameters: the matmul FLOPs of one training step, times
the steps of one driver and one branch, times the number of seeds (and of learning-rate multipliers where
the chapter has them), paper over full. It counts FLOPs, not seconds: larger matrices run nearer the
machine's peak, so on a CPU the real ratio is somewhat lower. Beside each CPU estimate it prints the time on
one GPU, the CPU time over :data:`GPU_VS_CPU_CORE`, measured on an H200 (:func:`gpu_measurement`).
Runner-side: no chapter's record or cache key depends on this module.
"""

from __future__ import annotations

import json
from pathlib import Path

GPU_RECORD = Path(__file__).resolve().parents[3] / "data" / "gpu" / "h200.json"


def gpu_measurement(path: Path = GPU_RECORD) -> dict:
    """One GPU against one CPU core, measured (``bench/gpu_paper.py``, recorded in ``data/gpu/``): the
    library's training step at the paper profile's shapes, its best engine on each, on the GPU and on one
    core of the same machine, in one run. Returns the device, both seconds per step, their ratio, and the
    steps per second that ``procs`` drivers sharing the GPU reached together (compiling included) over one
    process's rate."""
    d = json.loads(Path(path).read_text())
    rows = [r for r in d["steps"] if r.get("profile") == "paper" and "wall_s_per_step" in r]
    gpu = min(r["wall_s_per_step"] for r in rows if r["device"] == "cuda")
    cpu = min(r["wall_s_per_step"] for r in rows if r["device"] == "cpu")
    dr = d["drivers"]
    return {
        "device": d["machine"]["device"],
        "gpu_s": gpu,
        "cpu_s": cpu,
        "ratio": cpu / gpu,
        "procs": dr["procs"],
        "together": dr["steps_per_s"] * gpu,
    }


# One GPU against one CPU core at the paper profile's shapes: measured, not assumed. The step is bound by
# kernel launches on the GPU (its CPU time equals its wall time: dozens of small kernels per layer at width
# 128), so the GPU's gain is far below its peak FLOP rate. The CPU figure it divides is itself scaled from
# the full profile by FLOPs, and a core runs the paper's larger matrices faster per FLOP than the full
# profile's, so both printed figures are on the high side.
_G = gpu_measurement()
GPU_VS_CPU_CORE = round(_G["ratio"], 1)
GPU_BASIS = (
    f"measured: one training step at the paper's shapes took {_G['gpu_s'] * 1e3:.0f} ms on an "
    f"{_G['device']} and {_G['cpu_s']:.2f} s on one CPU core of the same machine, {GPU_VS_CPU_CORE:g}x "
    "(bench/gpu_paper.py, data/gpu/h200.json)"
)

LM_KEYS = ("depth", "d_model", "ctx", "batch", "ramp_end", "tail_steps", "branch_steps", "seeds")


def lm_step_flops(
    depth: int, d_model: int, ctx: int, batch: int, vocab: int = 256, mlp_mult: int = 4
) -> float:
    """Matmul FLOPs of one training step of the Part III language model (forward and backward, the backward
    counted as twice the forward): per token ``L (2 d (4 d + 2 m d) + 4 n d) + 2 d V``."""
    d, n, L = d_model, ctx, depth
    per_token = L * (2 * d * (3 * d + d + 2 * mlp_mult * d) + 4 * n * d) + 2 * d * vocab
    return 3.0 * per_token * batch * n


def lm_work(p: dict) -> float:
    """FLOPs of one seed's driver and one branch of its chapter at the resolved parameters ``p``, times the
    seeds (and the learning-rate multipliers, where the chapter has them)."""
    steps = p["ramp_end"] + p["tail_steps"] + p["branch_steps"]
    runs = len(p["seeds"]) * len(p.get("multipliers") or [1])
    return lm_step_flops(p["depth"], p["d_model"], p["ctx"], p["batch"]) * steps * runs


def gpu_seconds(cpu_seconds: float) -> float:
    """The time on one GPU of work taking ``cpu_seconds`` on one CPU core (:data:`GPU_BASIS`)."""
    return cpu_seconds / GPU_VS_CPU_CORE


def gpu_hours(cpu_seconds: float) -> str:
    """:func:`gpu_seconds` in hours, as printed: "~" and two decimals, or "<0.01"."""
    h = gpu_seconds(cpu_seconds) / 3600
    return f"~{h:.2f}" if h >= 0.01 else "<0.01"


def paper_factor(name: str) -> tuple[float, str] | None:
    """(paper cost over full cost, how it was obtained) for chapter ``name``, or ``None`` when there is no
    basis for one."""
    from ..chapters import module, schema

    own = getattr(module(name), "PAPER_VS_FULL", None)
    if own:
        return float(own), "the chapter's own factor"
    s = schema(name)
    full, paper = s.resolve({}, "full"), s.resolve({}, "paper")
    if not all(k in full for k in LM_KEYS):
        return None
    return lm_work(paper) / lm_work(full), "training FLOPs, paper over full"


def gpu_table(path: Path = GPU_RECORD) -> str:
    """The recorded GPU run as Markdown for the page on how the book is built: each measured step (profile
    shapes, device, engine: ms per step, GFLOP/s), the ratio the paper estimates use, and the drivers that
    shared the GPU."""
    d = json.loads(Path(path).read_text())
    g, m = gpu_measurement(path), d["machine"]
    lines = [
        f"Measured on one {m['device']} with {m['cores']} CPU cores (torch {m['torch']}, Python "
        f"{m['python']}, the book's corpus), in one run of `bench/gpu_paper.py` (`data/gpu/h200.json`):",
        "",
        "| shapes | device | engine | ms per step | GFLOP/s |",
        "|---|---|---|---|---|",
    ]
    for r in d["steps"]:
        dev = m["device"] if r["device"] == "cuda" else "one CPU core"
        if "wall_s_per_step" not in r:
            lines.append(f"| {r['profile']} | {dev} | {r['engine']} | not measured ({r['skipped']}) | |")
            continue
        lines.append(
            f"| {r['profile']} | {dev} | {r['engine']} | {r['wall_s_per_step'] * 1e3:,.1f} | "
            f"{r['gflop_per_s']:,.0f} |"
        )
    dr = d["drivers"]
    reached = sorted(s.get("steps") if s.get("done") else s.get("progress", 0) for s in dr["seeds"])
    of = dr["seeds"][0].get("steps")
    done = sum(bool(s.get("done")) for s in dr["seeds"])
    from ..chapters import schema

    ramp_end = schema("repair-driver").resolve({}, dr["profile"])["ramp_end"]
    lines += [
        "",
        f"At the paper's shapes the GPU takes one step in {g['gpu_s'] * 1e3:.0f} ms against "
        f"{g['cpu_s']:.2f} s on one core: {g['ratio']:.1f}×, the ratio `rcbook run --profile paper` "
        "uses for its GPU hours. The step is bound by kernel launches (its CPU time equals its wall time), "
        "so the GPU runs far below its peak. "
        f"{dr['procs']} of the repair-driver chapter's paper-profile drivers, one process each, sharing the "
        f"GPU, trained {dr['steps_per_s']:.0f} steps per second together, compiling included: "
        f"{g['together']:.1f}× one process. In the {dr['wall_s']:.0f} s they had, {done} of "
        f"{len(dr['seeds'])} finished; they reached steps {reached[0]:,}–{reached[-1]:,}"
        + (f" of {of:,}" if of else "")
        + f", inside the skip's ramp, which ends at step {ramp_end:,}: this run says nothing yet about "
        "collapse at the paper's scale.",
    ]
    return "\n".join(lines)
