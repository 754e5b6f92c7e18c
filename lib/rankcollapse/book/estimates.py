"""What a chapter would cost at the ``paper`` profile, told before ``rcbook`` refuses to start it on a CPU.

The ``paper`` profile runs the papers' own sizes and expects a GPU. Without one, ``rcbook run --profile
paper`` prints, per chapter, the chapter's CPU time at ``full`` from an empty store
(:func:`rankcollapse.book.runner.expected_seconds`) times :func:`paper_factor`, and stops. The factor is
either the chapter's own (a module attribute ``PAPER_VS_FULL``), or, for a chapter that trains the
language model of Part III (its schema has the driver's parameters, :data:`rankcollapse.chapters.common
.DRIVER_PARAMS`), computed from the two profiles' parameters: the matmul FLOPs of one training step, times
the steps of one driver and one branch, times the number of seeds (and of learning-rate multipliers where
the chapter has them), paper over full. It counts FLOPs, not seconds: larger matrices run nearer the
machine's peak, so on a CPU the real ratio is somewhat lower. Beside each CPU estimate it prints the time on
one GPU, the CPU time over :data:`GPU_VS_CPU_CORE` (a stated assumption: no GPU run of the book exists).
Runner-side: no chapter's record or cache key depends on this module.
"""

from __future__ import annotations

# One GPU against one CPU core, as a ratio of sustained FLOP rates: an ASSUMPTION, not a measurement, since
# no run of the book on a GPU exists. One core sustains about 30 GFLOP/s in the language model's training
# step (measured: the step reaches 0.42-0.48 of torch.mm's rate, 72 GFLOP/s at the model's shapes, on an
# AVX-512 host; README, bench/train_throughput.py). An H100/H200-class GPU peaks near 67 TFLOP/s in fp32
# (the book's dtype; TF32 is off for matmuls by default), but at these small shapes (width 48-768, a few
# thousand tokens a step, head sizes of 12-64, dozens of small kernels per layer, eager PyTorch) it is
# bound by kernel launches and memory traffic and is taken to sustain about 3 TFLOP/s, some 5% of its
# peak: 100 times one core. Chapters whose work is not large matmuls (SVDs, small loops) may gain less.
GPU_VS_CPU_CORE = 100.0
GPU_ASSUMPTION = (
    f"assumption: an H100/H200-class GPU sustains {GPU_VS_CPU_CORE:g}x one CPU core's FLOP rate at these "
    "small shapes (~3 TFLOP/s, ~5% of its fp32 peak, against ~30 GFLOP/s measured on one core); "
    "no GPU run of the book exists to check it"
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
    """The time on one GPU of work taking ``cpu_seconds`` on one CPU core, under :data:`GPU_ASSUMPTION`."""
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
