"""Benchmark: the exact length-restricted recursion against path enumeration and forward passes.

    .venv/bin/python bench/paths.py [--quick]

Prints, from one run on one thread:
1. the recursion (`paths.length_components`) against the fastest honest enumeration of paths
   (`paths.path_sum_enumerated`: level by level, every prefix product computed once and shared)
   at L=6, H=4 (target: >= 100x faster), and over a grid of L and H beside the ratio of head
   applications the path count predicts, ((H+1)^L - 1) / (H L (L+1) / 2);
2. the recursion's time at BERT-Base size (L=12, H=12, n=128, d=768) in units of one forward pass of
   the same network (target: <= 3.5). The forward pass is the library's `SAN.forward`, which mixes the
   heads with the same GEMMs as the recursion's `SAN.mix`; the two are timed alternately in one process
   (rounds of one recursion and the median of three forward passes), and the ratio is of their medians
   over the rounds. The FLOP count's ideal is about 3.25: the recursion applies the value and output
   projections and P V to l stacked components at layer l, L (L+1) / 2 = 78 such applications of
   2 n d^2 + n^2 d multiply-adds each, against L = 12 forward layers of 4 n d^2 + 2 n^2 d
   (Q, K, V, O projections, the logits and P V).
Both methods produce the same per-length sums (checked here too, and at BERT-Base size the recursion's
total against the forward pass's output). Times are medians over repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rankcollapse.core.paths import length_components, path_sum_enumerated
from rankcollapse.core.san import SAN, SANConfig, random_tokens

TARGET_FORWARDS = 3.5  # the recursion at BERT-Base size, in forward passes (ideal by FLOPs: about 3.25)


def median_time(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def network(L, H, n, d, dtype=torch.float32):
    # per-head widths d // H, given explicitly: the grid has head counts (3, 6) that do not divide d
    san = SAN.random(SANConfig(L, H, d, d_qk=d // H, d_v=d // H, skip=True), seed=0, dtype=dtype)
    X = random_tokens(n, d, seed=1, dtype=dtype)
    with torch.no_grad():
        _, atts = san.forward(X)
    return san, X, atts


def enumeration_vs_recursion(L, H, n, d, repeats):
    san, X, atts = network(L, H, n, d)
    with torch.no_grad():
        a = path_sum_enumerated(san, X, atts)
        b = length_components(san, X, atts)
        err = float((a.components - b.components).abs().max() / a.components.abs().max())
        t_enum = median_time(lambda: path_sum_enumerated(san, X, atts), repeats)
        t_rec = median_time(lambda: length_components(san, X, atts), max(repeats, 5))
    predicted = ((H + 1) ** L - 1) / (H * L * (L + 1) / 2)
    return t_enum, t_rec, predicted, err


def measure(quick: bool = False, echo=print) -> list[dict]:
    """Run the benchmark; print its own tables through ``echo``; return summary rows for bench/all.py."""
    torch.set_num_threads(1)
    n, d = 32, 32
    repeats = 3
    echo(f"1. recursion vs prefix-sharing enumeration (n={n}, d={d}, float32, one thread)")
    echo(
        f"   {'L':>2} {'H':>2} {'paths':>9} {'enum (s)':>10} {'recursion (s)':>14} {'speed-up':>9} "
        f"{'predicted':>10} {'max rel diff':>12}"
    )
    grid = [(6, 4), (4, 4), (5, 4), (7, 4), (6, 2), (6, 3), (6, 6)]
    if quick:
        grid = [(6, 4), (4, 4), (6, 2)]
    headline = None
    for L, H in grid:
        t_enum, t_rec, pred, err = enumeration_vs_recursion(L, H, n, d, repeats)
        ratio = t_enum / t_rec
        if (L, H) == (6, 4):
            headline = ratio
        echo(
            f"   {L:>2} {H:>2} {(H + 1) ** L:>9} {t_enum:>10.4f} {t_rec:>14.5f} {ratio:>8.0f}x "
            f"{pred:>9.0f}x {err:>12.1e}"
        )

    L, H, nb, db = 12, 12, (32 if quick else 128), 768
    san, X, atts = network(L, H, nb, db)
    rounds = 3 if quick else 7
    with torch.no_grad():
        hs, _ = san.forward(X)
        split = length_components(san, X, atts)
        err = float((split.total() - hs[-1]).norm() / hs[-1].norm())
        t_fwd, t_rec = [], []
        for _ in range(rounds):  # alternately, so that a change in the machine's load hits both alike
            t_fwd.append(median_time(lambda: san.forward(X), 3))
            t_rec.append(median_time(lambda: length_components(san, X, atts), 1))
    t_fwd, t_rec = statistics.median(t_fwd), statistics.median(t_rec)
    ratio = t_rec / t_fwd
    echo(
        f"2. BERT-Base size (L={L}, H={H}, n={nb}, d={db}, float32, {(H + 1) ** L:.2e} paths): "
        f"forward pass {t_fwd:.3f} s, recursion {t_rec:.3f} s (medians over {rounds} alternating rounds), "
        f"{ratio:.2f} forward passes; recursion total vs forward output: rel. error {err:.1e}"
    )
    return [
        {
            "benchmark": "path recursion vs enumeration (L=6, H=4)",
            "measured": headline,
            "unit": "x faster",
            "target": ">= 100",
            "ok": headline >= 100,
        },
        {
            "benchmark": f"path recursion at BERT-Base size (n={nb})",
            "measured": ratio,
            "unit": "forward passes",
            "target": f"<= {TARGET_FORWARDS}",
            "ok": ratio <= TARGET_FORWARDS,
        },
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="smaller grid and BERT-Base at n=32 (for a smoke check)"
    )
    a = ap.parse_args(argv)
    rows = measure(a.quick)
    for r in rows:
        print(
            f"{r['benchmark']}: {r['measured']:.2f} {r['unit']} (target {r['target']}): "
            f"{'PASS' if r['ok'] else 'FAIL'}"
        )
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
