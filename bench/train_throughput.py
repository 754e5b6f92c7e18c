"""The training engine against the machine: throughput, FLOP rate, the cost of a loss term.

    .venv/bin/python bench/train_throughput.py [--steps 40] [--repeats 3] [--depth 12] [--batch 16]

At the repair chapters' CPU scale (depth 12, width 48, context 32, batch 16), one thread, every variant
measured in the same process, interleaved, best of ``--repeats`` (CPU time, ``time.process_time``):

- **throughput**: the library's :func:`rankcollapse.lm.training.train` (probe every 10 steps, per-step
  gradient norm and clip flag, history, weights every 50 steps), eager (the chapters' smoke engine) and
  compiled (their full engine where a compiler exists), each per step against a plain PyTorch loop on the
  same model with torch's default AdamW (the for-loop implementation on the CPU) and default clipping;
  target >= 1.7;
- **FLOP rate**: the step's matmul FLOPs (forward and backward, counted from the shapes) per second of the
  library's step, over the rate of the same matmuls alone (``torch.mm`` at the model's own shapes, timed
  here); target >= 0.25;
- **term step**: a library step with the hinge term (Q of every block,
  :func:`~rankcollapse.lm.training.q_gram`) over a plain library step, both at alpha = 0.02 (where the
  chapters' loss-term branches train); target <= 1.35.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from rankcollapse.lm import model as lm
from rankcollapse.lm import training as tr


def plain_loop(cfg: lm.LMConfig, batch: int, seed: int = 0):
    """A minimal loop, default AdamW and clipping: returns ``run(steps)``, which trains on."""
    model = lm.build_model(cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    corpus = lm.corpus()

    done = [0]

    def run(steps):
        for t in range(done[0], done[0] + steps):
            x, y = corpus.batch(seed, t, batch, cfg.ctx)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        done[0] += steps

    return run


def library_loop(
    cfg: lm.LMConfig,
    batch: int,
    term: tr.Term | None = None,
    seed: int = 0,
    engine: str = "eager",
    alpha: float = 1.0,
):
    """The library's train() (its probe, history and hooks included) at a constant ``alpha``: returns
    ``run(steps)``."""
    spec = tr.RunSpec(model=cfg, seed=seed, batch=batch, alpha_knots=((0, alpha),), term=term, engine=engine)
    state = tr.new_state(spec)

    def run(steps):
        tr.train(spec, state, state.step + steps)

    return run


def step_flops(cfg: lm.LMConfig, batch: int) -> float:
    """Matmul FLOPs of one training step (:func:`rankcollapse.book.estimates.lm_step_flops`)."""
    from rankcollapse.book.estimates import lm_step_flops

    return lm_step_flops(cfg.depth, cfg.d_model, cfg.ctx, batch, cfg.vocab, cfg.mlp_mult)


def matmul_rate(cfg: lm.LMConfig, batch: int, reps: int = 20) -> float:
    """FLOP/s of ``torch.mm`` over the linear layers' forward and backward shapes of one step."""
    T, d, f, V = batch * cfg.ctx, cfg.d_model, cfg.mlp_mult * cfg.d_model, cfg.vocab
    shapes = []
    for k, m in ((d, 3 * d), (d, d), (d, f), (f, d)):
        shapes += [(T, k, m), (T, m, k), (k, T, m)]  # forward, grad of input, grad of weight
    shapes += [(T, d, V), (T, V, d), (d, T, V)]
    mats = [(torch.randn(a, b), torch.randn(b, c)) for a, b, c in shapes]
    flops = sum(2.0 * a * b * c for a, b, c in shapes)
    for A, B in mats:
        A @ B
    best = float("inf")
    for _ in range(3):
        c0 = time.process_time()
        for _ in range(reps):
            for A, B in mats:
                torch.mm(A, B)
        best = min(best, (time.process_time() - c0) / reps)
    return flops / best


def _time(run, steps: int) -> float:
    """CPU seconds per step of ``run(steps)``."""
    n = max(1, steps)
    c0 = time.process_time()
    run(n)
    return (time.process_time() - c0) / n


def measure(
    quick: bool = False, echo=print, steps: int = 40, repeats: int = 3, depth: int = 12, batch: int = 16
) -> list[dict]:
    """Measure every variant interleaved; print through ``echo``; return the rows for bench/all.py."""
    if quick:
        steps, repeats = 15, 2
    torch.set_num_threads(1)
    cfg = lm.LMConfig(depth=depth)
    lm.corpus()
    # the terms are compared where the chapters train them: at a small alpha (the loss-term branches hold
    # alpha_min = 0.02 from a collapse), where the tokens' top singular value is well separated
    hinge, am = tr.Term("hinge", 0.1, 3.0), 0.02
    loops = {
        "plain": plain_loop(cfg, batch),
        "library": library_loop(cfg, batch),
        "library@0.02": library_loop(cfg, batch, alpha=am),
        "library+hinge": library_loop(cfg, batch, hinge, alpha=am),
    }
    compiled = not quick and tr.compiler_available()
    if compiled:
        loops["compiled"] = library_loop(cfg, batch, engine="compiled")
        loops["compiled@0.02"] = library_loop(cfg, batch, engine="compiled", alpha=am)
        loops["compiled+hinge"] = library_loop(cfg, batch, hinge, engine="compiled", alpha=am)
    for k, run in loops.items():  # warm-up (and compilation)
        t0 = time.perf_counter()
        _time(run, 3)
        echo(f"warm-up {k}: {time.perf_counter() - t0:.1f} s")
    best = {k: float("inf") for k in loops}
    for _ in range(repeats):
        for k, run in loops.items():
            best[k] = min(best[k], _time(run, steps))
    rate = matmul_rate(cfg, batch)
    flops = step_flops(cfg, batch)
    for k, v in best.items():
        echo(f"{k:<14}: {v * 1e3:7.1f} ms CPU per step ({batch * cfg.ctx / v:8.0f} tokens/s)")
    echo(
        f"matmuls alone : {flops / rate * 1e3:7.1f} ms per step ({rate / 1e9:.1f} GFLOP/s); "
        f"step {flops / 1e9:.2f} GFLOP"
    )
    rows = []
    names = {
        "library": "library, eager (smoke)",
        "compiled": "library, compiled (full)",
    }
    for k, label in names.items():
        if k in best:
            thr = best["plain"] / best[k]
            rows.append(
                {
                    "benchmark": f"training throughput, {label} / plain loop (default AdamW)",
                    "measured": thr,
                    "unit": "x",
                    "target": ">= 1.7",
                    "ok": thr >= 1.7,
                }
            )
    fastest = min((k for k in names if k in best), key=lambda k: best[k])
    frac = (flops / best[fastest]) / rate
    rows.append(
        {
            "benchmark": f"training step FLOP rate ({names[fastest]}) / matmul rate at the model's shapes",
            "measured": frac,
            "unit": "",
            "target": ">= 0.25",
            "ok": frac >= 0.25,
        }
    )
    for k in ("library", "compiled"):
        if k in best:
            term = best[f"{k}+hinge"] / best[f"{k}@0.02"]
            rows.append(
                {
                    "benchmark": f"term step (hinge) / plain step at alpha 0.02, {names[k]}",
                    "measured": term,
                    "unit": "x",
                    "target": "<= 1.35",
                    "ok": term <= 1.35,
                }
            )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args(argv)
    rows = measure(steps=a.steps, repeats=a.repeats, depth=a.depth, batch=a.batch)
    for r in rows:
        print(f"{r['benchmark']}: {r['measured']:.3f} (target {r['target']})")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
