"""Training throughput (tokens/s) of the library's loop against a minimal plain-PyTorch loop, same model.

    .venv/bin/python bench/train_throughput.py [--steps 60] [--repeats 3] [--depth 12] [--batch 16]

Both train the same :class:`rankcollapse.lm.model.TinyLM` (same initialisation, AdamW lr 1e-3, clipping at
1) at the repair chapters' CPU scale, one thread. The library loop (:func:`rankcollapse.lm.training.train`)
also does what the chapters need: the probe measurement every 10 steps, per-step gradient norm and clip
flag, history.
The two are measured alternately in the same process, best of ``--repeats``; the ratio library/plain is the
figure of merit (target >= 0.9). On a shared machine absolute numbers are inflated; the ratio less so.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from rankcollapse.lm import model as lm
from rankcollapse.lm import training as tr


def plain(cfg: lm.LMConfig, steps: int, batch: int, seed: int = 0) -> float:
    model = lm.build_model(cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    data = lm.corpus().data
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for _ in range(steps):
        i = torch.randint(0, data.numel() - cfg.ctx - 1, (batch,), generator=g)
        w = data[i[:, None] + torch.arange(cfg.ctx + 1)].long()
        loss = F.cross_entropy(model(w[:, :-1]).flatten(0, 1), w[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return steps * batch * cfg.ctx / (time.perf_counter() - t0)


def library(cfg: lm.LMConfig, steps: int, batch: int, seed: int = 0) -> float:
    spec = tr.RunSpec(model=cfg, seed=seed, batch=batch, alpha_knots=((0, 1.0),))
    state = tr.new_state(spec)
    t0 = time.perf_counter()
    tr.train(spec, state, steps)
    return steps * batch * cfg.ctx / (time.perf_counter() - t0)


def measure(
    quick: bool = False, echo=print, steps: int = 60, repeats: int = 3, depth: int = 12, batch: int = 16
) -> list[dict]:
    """Measure both loops alternately; print through ``echo``; return the summary row for bench/all.py."""
    if quick:
        steps, repeats = 20, 2
    torch.set_num_threads(1)
    cfg = lm.LMConfig(depth=depth)
    lm.corpus()
    plain(cfg, 5, batch)
    library(cfg, 5, batch)  # warm-up
    p, l = [], []
    for _ in range(repeats):
        p.append(plain(cfg, steps, batch))
        l.append(library(cfg, steps, batch))
    echo(
        f"plain PyTorch loop : {max(p):9.0f} tokens/s "
        f"(best of {repeats}: {', '.join(f'{x:.0f}' for x in p)})"
    )
    echo(
        f"library train()    : {max(l):9.0f} tokens/s "
        f"(best of {repeats}: {', '.join(f'{x:.0f}' for x in l)})"
    )
    ratio = max(l) / max(p)
    return [
        {
            "benchmark": "training throughput, library / plain loop",
            "measured": ratio,
            "unit": "x",
            "target": ">= 0.9",
            "ok": ratio >= 0.9,
        }
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args(argv)
    row = measure(steps=a.steps, repeats=a.repeats, depth=a.depth, batch=a.batch)[0]
    print(f"ratio library/plain: {row['measured']:.3f} (target >= 0.9)")
    return 0 if row["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
