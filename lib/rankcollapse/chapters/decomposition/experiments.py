"""What chapter `decomposition` computes, from its parameters: the explicit path sum and the length
recursion against the forward pass on small SANs (:func:`reconstruction`), the path-length distributions of
named architectures (:func:`architecture_lengths`), the recursion at a size where enumeration is impossible
(:func:`recursion_at_scale`) and the share of the residual carried by each path length over weight scales
(:func:`length_shares`).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ...core.metrics import res
from ...core.paths import length_components, path_length_distribution, path_sum_naive
from ...core.san import SAN, SANConfig, random_tokens

# (name, heads H, layers L) as listed in the spec
ARCHITECTURES = [
    ("DeiT-T", 3, 12),
    ("MobileBERT", 4, 12),
    ("DistilBERT", 12, 6),
    ("BERT-Base / ViT-B", 12, 12),
    ("BERT-Large / ViT-L", 16, 24),
    ("ViT-H", 16, 32),
    ("T5-3B", 32, 24),
    ("T5-11B", 128, 24),
    ("GPT-3", 96, 96),
]


DTYPES = {"float32": torch.float32, "float64": torch.float64}


def rel_fro(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(a - b) / torch.linalg.matrix_norm(b))


def reconstruction(layers, heads, n, d, scale, max_paths, seed, device, log=print) -> list[dict]:
    """Explicit path sum (each path from scratch) and the recursion against the forward pass.

    One row per (L, H, skip, dtype) whose path count is at most ``max_paths``.
    """
    rows = []
    for L in layers:
        for H in heads:
            for skip in (False, True):
                count = (H + 1) ** L if skip else H**L
                if count > max_paths:
                    continue
                # each head d // H wide (H need not divide d; validate() keeps it >= 1)
                cfg = SANConfig(L, H, d, d_qk=d // H, d_v=d // H, skip=skip, weight_scale=scale)
                for dname, dt in DTYPES.items():
                    san = SAN.random(cfg, seed, dtype=dt, device=device)
                    X = random_tokens(n, d, seed + 1, dtype=dt, device=device)
                    hs, atts = san.forward(X)
                    naive = path_sum_naive(san, X, atts)
                    rec = length_components(san, X, atts)
                    # D1's control: the same path sum with its longest paths (length L) left out
                    dropped = naive.total() - naive.components[L]
                    rows.append(
                        {
                            "L": L,
                            "H": H,
                            "skip": skip,
                            "dtype": dname,
                            "paths": count,
                            "err_paths": rel_fro(naive.total(), hs[-1]),
                            "err_drop_longest": rel_fro(dropped, hs[-1]),
                            "err_recursion": rel_fro(rec.total(), hs[-1]),
                            "err_rec_vs_paths": float(
                                (rec.components - naive.components).abs().max()
                                / naive.components.abs().max()
                            ),
                            "eps": float(torch.finfo(dt).eps),
                        }
                    )
            log(f"reconstruction L={L} H={H} done")
    return rows


def architecture_lengths() -> list[dict]:
    out = []
    for name, H, L in ARCHITECTURES:
        dist = np.array(path_length_distribution(L, H))
        lengths = np.arange(L + 1)
        out.append(
            {
                "name": name,
                "H": H,
                "L": L,
                "dist": dist.tolist(),
                "mean_length": float((dist * lengths).sum()),
                "share_half_or_shorter": float(dist[: L // 2 + 1].sum()),
                "share_len0": float(dist[0]),
                "mode": int(dist.argmax()),
            }
        )
    return out


def big_network(L, H, n, d, scale, seed, device, dtype=torch.float64, skip=True):
    san = SAN.random(SANConfig(L, H, d, skip=skip, weight_scale=scale), seed, dtype=dtype, device=device)
    X = random_tokens(n, d, seed + 1, dtype=dtype, device=device)
    return san, X


def recursion_at_scale(L, H, n, d, seed, device, repeats=3) -> dict:
    """The recursion at a size where enumeration ((H+1)^L paths) is impossible: exactness and cost."""
    out = {}
    for dname, dt in DTYPES.items():
        san, X = big_network(L, H, n, d, 1.0, seed, device, dt)
        with torch.no_grad():
            hs, atts = san.forward(X)
            split = length_components(san, X, atts)
        out[f"err_{dname}"] = rel_fro(split.total(), hs[-1])
        # D1's control: the recursion's sum with the longest paths (length L) left out
        out[f"err_drop_longest_{dname}"] = rel_fro(split.total() - split.components[L], hs[-1])
    san, X = big_network(L, H, n, d, 1.0, seed, device, torch.float32)
    with torch.no_grad():
        t_fwd, t_rec = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, atts = san.forward(X)
            t1 = time.perf_counter()
            length_components(san, X, atts)
            t2 = time.perf_counter()
            t_fwd.append(t1 - t0)
            t_rec.append(t2 - t1)
    out.update(
        paths=(H + 1) ** L,
        forward_s=min(t_fwd),
        recursion_s=min(t_rec),
        recursion_in_forwards=min(t_rec) / min(t_fwd),
    )
    return out


def length_shares(L, H, n, d, scales, seeds, seed, device, log=print, skip=True) -> list[dict]:
    """Per scale: norm and residual norm of each length component, and the truncation error.

    ``trunc_err[k] = ||res(Y) - res(S^(<=k))||_F / ||res(Y)||_F`` (the bias term has zero residual).
    Averaged over ``seeds`` random networks, float64. ``skip=False``: the same networks (same seeds and
    weights) without their skip connections, C5's control.
    """
    rows = []
    for s in scales:
        norm_share, res_share, trunc, growth = [], [], [], []
        for i in range(seeds):
            san, X = big_network(L, H, n, d, s, seed + 1000 * i, device, skip=skip)
            with torch.no_grad():
                hs, atts = san.forward(X)
                S = length_components(san, X, atts).components  # (L+1, n, d)
            Y, R = hs[-1], res(hs[-1])
            rS = res(S)
            norm_share.append((torch.linalg.matrix_norm(S) / torch.linalg.matrix_norm(Y)).tolist())
            res_share.append((torch.linalg.matrix_norm(rS) / torch.linalg.matrix_norm(R)).tolist())
            cum = torch.cumsum(rS, dim=0)
            trunc.append((torch.linalg.matrix_norm(R - cum) / torch.linalg.matrix_norm(R)).tolist())
            growth.append(float(torch.linalg.matrix_norm(Y) / torch.linalg.matrix_norm(X)))
        trunc_mean = np.mean(trunc, axis=0)
        k90 = int(np.argmax(trunc_mean <= 0.1)) if (trunc_mean <= 0.1).any() else L
        rows.append(
            {
                "scale": s,
                "norm_share": np.mean(norm_share, axis=0).tolist(),
                "res_share": np.mean(res_share, axis=0).tolist(),
                "trunc_err": trunc_mean.tolist(),
                "k90": k90,
                "r_out": float(torch.linalg.matrix_norm(R) / torch.linalg.matrix_norm(Y)),
                "growth": float(np.mean(growth)),
                "layers": L,
            }
        )
        log(f"shares at scale {s}{'' if skip else ' without skips'} done (k90 = {k90})")
    return rows
