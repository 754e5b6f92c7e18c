"""What a chapter would cost at the ``paper`` profile, told before ``rcbook`` refuses to start it on a CPU.

The ``paper`` profile runs the papers' own sizes and expects a GPU. Without one, ``rcbook run --profile
paper`` prints, per chapter, the chapter's CPU time at ``full`` from an empty store
(:func:`rankcollapse.book.runner.expected_seconds`) times :func:`paper_factor`, and stops. The factor is
either the chapter's own (a module attribute ``PAPER_VS_FULL``), or, for a chapter that trains the
language model of Part III (its schema has the driver's parameters, :data:`rankcollapse.chapters.common
.DRIVER_PARAMS`), computed from the two profiles' parameters: the matmul FLOPs of one training step, times
the steps of one driver and one branch, times the number of seeds (and of learning-rate multipliers where
the chapter has them), paper over full. It counts FLOPs, not seconds: larger matrices run nearer the
machine's peak, so on a CPU the real ratio is somewhat lower. Runner-side: no chapter's record or cache key
depends on this module.
"""

from __future__ import annotations

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
