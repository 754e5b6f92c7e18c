"""A stage of branches: one at a time against all of them as stacks.

    .venv/bin/python bench/stage_throughput.py [--branches 7] [--steps 40] [--repeats 2]
        [--term-every 3] [--engine compiled]

At the repair chapters' CPU scale (depth 12, width 48, context 32, batch 16), one thread: ``--branches``
branches of ``--steps`` steps from one saved state, as the treatments of one collapse are (held alpha
0.02; every ``--term-every``-th with the hinge term, 0: none), trained (a) each by
:func:`rankcollapse.lm.training.branch` and (b) together by
:func:`rankcollapse.lm.stacked_runs.train_branches` (the stacked engine), both with the ``--engine``
forward (``compiled``, the full profile's, by default; its first round only warms the compiler up and is
not counted). Both go through the store (saved states, checkpoints, final probes), in fresh folders,
interleaved, best of ``--repeats`` (CPU time, ``time.process_time``). Prints the ratio of (a) to (b): how
much faster a stage trains stacked. No target of its own: it is the stage-level reading of
``bench/train_throughput.py``'s stack row (target >= 1.7 there, per network step).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from rankcollapse.lm import stacked_runs as sr
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import LMConfig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--branches", type=int, default=7)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--term-every", type=int, default=3)
    ap.add_argument("--engine", choices=("eager", "compiled"), default="compiled", help="both sides' engine")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    base = tr.RunSpec(
        model=LMConfig(depth=12, d_model=48, heads=4, ctx=32), seed=0, batch=16, engine=a.engine
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["RCBOOK_STATES"] = str(tmp)
        parent = tmp / "parent" / "state.pt"
        parent.parent.mkdir()
        tr.save_state(tr.new_state(base), parent)
        specs = [
            replace(
                base,
                seed=k,
                alpha_knots=((0, 0.02),),
                term=tr.Term("hinge", 0.05, 1.0) if a.term_every and k % a.term_every == 2 else None,
            )
            for k in range(a.branches)
        ]
        items = [{"parent": str(parent), "spec": s, "steps": a.steps} for s in specs]
        eager, stacked = [], []
        for r in range(a.repeats + (a.engine == "compiled")):  # a compiled first round only warms up
            t = time.process_time()
            for it in items:
                tr.branch(it["parent"], it["spec"], it["steps"], root=tmp / f"eager{r}")
            eager.append(time.process_time() - t)
            t = time.process_time()
            sr.train_branches(items, root=tmp / f"stacked{r}")
            stacked.append(time.process_time() - t)
    if a.engine == "compiled":
        eager, stacked = eager[1:], stacked[1:]
    e, s = min(eager), min(stacked)
    n = a.branches * a.steps
    print(
        f"stage of {a.branches} branches x {a.steps} steps ({a.engine}): one at a time {e:.2f} s CPU "
        f"({1e3 * e / n:.1f} ms per step), stacked {s:.2f} s ({1e3 * s / n:.1f} ms per step); "
        f"ratio {e / s:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
