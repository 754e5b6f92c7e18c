"""Chapter `toy-tasks`, experiments: what is trained and computed, from the parameters. The circle
dynamics of Figure 3 (:func:`circle_experiment`: train, roll out, classify each rollout) and the path
effectiveness of Figure 4 (:func:`path_experiments`). The trained networks
(configurations, losses, data and the training calls) are defined in :mod:`rankcollapse.toy.models`, whose
key (:mod:`rankcollapse.toy.training`: seeded, checkpointed, cached by content) names that module and not
this chapter's, so an edit of a rule here never retrains; the data comes from :mod:`rankcollapse.toy.tasks`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...toy import nets as tn
from ...toy import tasks as tt
from ...toy.models import (  # noqa: F401 -- re-exported: the networks' definitions live in the library
    RADIUS,
    TASK_NAMES,
    accuracy_of_labels,
    ce_loss,
    circle_config,
    circle_step,
    task_config,
    task_data,
    train_circle,
    train_task,
)

TASKS = ("sort", "hull", "mem")
VARIANTS = ("attention", "mlp", "skip")


# =====================================================================================================
# the networks
# =====================================================================================================
def seeds_of(p, arch: str = "bert") -> list[int]:
    """The training seeds of an architecture: ``seed, seed + 1, ...`` (``n_seeds`` for the authors',
    ``n_seeds_plain`` for the LN-free SAN)."""
    return [p.seed + i for i in range(p.n_seeds if arch == "bert" else p.n_seeds_plain)]


# =====================================================================================================
# circle (Figure 3)
# =====================================================================================================
@torch.no_grad()
def rollout(cfg, p, variant, steps, start=None):
    """Apply the learned step recurrently from ``start`` (default ``(0.3, 0)`` and ``(-0.3, 0)``):
    trajectory (steps+1, 2, 2)."""
    x = torch.tensor([[[RADIUS, 0.0], [-RADIUS, 0.0]]]) if start is None else start.reshape(1, 2, 2).float()
    return rollouts(cfg, p, variant, steps, x)[:, 0]


@torch.no_grad()
def rollouts(cfg, p, variant, steps, starts):
    """The learned step applied recurrently from each of ``starts`` (K, 2, 2) at once: (steps+1, K, 2, 2).
    A rollout that overflows is NaN from then on."""
    x = starts.float()
    traj = [x]
    for _ in range(steps):
        x = circle_step(cfg, p, x, variant)
        x = torch.where(torch.isfinite(x).all(-1, keepdim=True).all(-2, keepdim=True), x, float("nan"))
        traj.append(x)
    return torch.stack(traj)


def circle_starts(n: int, k: int) -> torch.Tensor:
    """``k`` antipodal start pairs ``(p_j, p_{j + n/2})``, ``j = i n / k``, spread around the circle; the
    first is the spec's ``(0.3, 0), (-0.3, 0)``. Shape (k, 2, 2)."""
    P = tt.circle_points(n, RADIUS, torch.float64)
    j = (torch.arange(k) * n) // k
    return torch.stack([P[j], P[(j + n // 2) % n]], 1).float()


# a rollout's class (Figure 3): what a degenerate trajectory did
COLLAPSE_SEP = 0.01  # mean token separation over the last quarter (diameters) below which the tokens merged
STILL = 0.01  # mean step over the last quarter (in true steps 2 pi r / n) below which the points stopped
CLASSES = ("kept", "collapsed", "diverged", "other")


def trajectory_metrics(traj: torch.Tensor, n: int) -> dict:
    """Numbers that say what a rollout did.

    * ``radius_err``: mean over steps and tokens of ``min(| ||x|| - r | / r, 1)`` (0 on the circle, 1 far
      off; steps after the rollout blew up to inf/nan count as 1);
    * ``separation``: distance between the two tokens over the last quarter, in units of the
      diameter (1: antipodal as at the start; 0: both tokens on one point -- rank collapse of the pair;
      None if the rollout diverged);
    * ``step``: mean distance between consecutive points over the last quarter, in units of the true
      step ``2 pi r / n`` (1: the right speed; 0: the points stopped; None if diverged);
    * ``progress``: angle travelled (unwrapped) over the angle the true points travel, ``steps * 2 pi / n``
      (1: right speed; 0: stuck at a fixed point);
    * ``spread``: RMS distance of all visited points from their centroid, over that of the true
      trajectory (0: the trajectory shrinks to a point; None if it blew up);
    * ``diverged``: the rollout left the disc of ten times the radius, or blew up;
    * ``cls``: :func:`classify` of these.
    """
    T = traj.shape[0] - 1
    x = traj.double()
    finite = torch.isfinite(x).all(-1).all(-1)  # (T+1,) steps before any blow-up
    rad = x.norm(dim=-1)
    dist = torch.where(
        torch.isfinite(rad), ((rad - RADIUS).abs() / RADIUS).clamp(max=1.0), torch.ones_like(rad)
    )
    radius_err = float(dist.mean())
    q = max(1, T // 4)
    sep = (x[-q:, 0] - x[-q:, 1]).norm(dim=-1) / (2 * RADIUS)
    separation = float(sep.mean()) if bool(torch.isfinite(sep).all()) else float("nan")
    true_step = 2 * RADIUS * math.sin(math.pi / n)
    stp = (x[-q:] - x[-q - 1 : -1]).norm(dim=-1).mean() / true_step
    step = float(stp) if bool(torch.isfinite(stp)) else float("nan")
    last = int(finite.nonzero().max()) if finite.any() else 0
    xf = x[: last + 1]
    ang = torch.atan2(xf[..., 1], xf[..., 0]).numpy()
    travelled = np.abs(np.unwrap(ang, axis=0)[-1] - ang[0]).mean()
    progress = float(travelled / (T * 2 * math.pi / n))
    true = torch.stack(
        [
            tt.circle_points(n, RADIUS, torch.float64)[(torch.arange(T + 1) + k * (n // 2)) % n]
            for k in (0, 1)
        ],
        1,
    )
    rms = lambda z: float(((z.reshape(-1, 2) - z.reshape(-1, 2).mean(0)) ** 2).sum(-1).mean().sqrt())  # noqa: E731
    spread = rms(xf) / rms(true) if bool(finite.all()) else float("nan")
    diverged = not bool(finite.all()) or float(rad.max()) > 10 * RADIUS
    kept = (not diverged) and radius_err < 0.2 and separation > 0.5 and 0.5 < progress < 2.0 and spread > 0.5
    m = {
        "radius_err": radius_err,
        "separation": None if diverged else separation,
        "step": None if diverged else step,
        "progress": progress,
        "spread": spread if math.isfinite(spread) else None,
        "kept": bool(kept),
        "diverged": diverged,
    }
    m["cls"] = classify(m)
    m["still"] = m["cls"] == "collapsed" and step < STILL
    return m


def classify(m: dict) -> str:
    """``diverged`` (left ten radii or blew up), ``collapsed`` (the two tokens merged: mean separation over
    the last quarter below :data:`COLLAPSE_SEP` of the diameter, the token matrix of rank one; whether
    the merged point also stops is reported apart), ``kept`` (the circle kept, :func:`trajectory_metrics`),
    else ``other`` (off the circle without merging or diverging, e.g. stuck at two points)."""
    if m["diverged"]:
        return "diverged"
    if m["separation"] < COLLAPSE_SEP:
        return "collapsed"
    return "kept" if m["kept"] else "other"


def circle_experiment(p, log=print) -> list[dict]:
    """Every architecture, hidden size, variant and seed: train (or load), roll out from the spec's start
    and from the first training pair, classify."""
    rows = []
    for arch in p.archs:
        for h in p.circle_hidden:
            for v in VARIANTS:
                for seed in seeds_of(p, arch):
                    cfg, r = train_circle(
                        h, v, arch, p.circle_steps, p.circle_lr, p.circle_n, seed, p.model_cache, log
                    )
                    trajs = rollouts(
                        cfg, r.params, v, p.rollout_steps, circle_starts(p.circle_n, p.circle_starts)
                    )
                    ms = [trajectory_metrics(trajs[:, k], p.circle_n) for k in range(trajs.shape[1])]
                    m = ms[0]
                    start = tt.circle_dataset(p.circle_n, RADIUS)[0][0]
                    m_in = trajectory_metrics(rollout(cfg, r.params, v, p.rollout_steps, start), p.circle_n)
                    rows.append(
                        {
                            "arch": arch,
                            "h": h,
                            "variant": v,
                            "seed": seed,
                            "final_loss": r.losses[-1],
                            "traj": trajs[:, 0].numpy(),
                            **m,
                            "classes": [x["cls"] for x in ms],
                            "still_all": [x["still"] for x in ms],
                            "cls_train_start": m_in["cls"],
                        }
                    )
                    log(
                        f"circle {arch} h={h} {v} seed {seed}: loss {r.losses[-1]:.2e}, {m['cls']} "
                        f"(radius err {m['radius_err']:.3f}, separation {m['separation']}, step {m['step']})"
                    )
    return rows


# =====================================================================================================
# path effectiveness (Figure 4)
# =====================================================================================================
def accuracy(logits, y) -> float:
    return accuracy_of_labels(logits.argmax(-1), y)


LEARNED = 0.1  # "learned": full accuracy at least this far above the best input-blind predictor
RECOVER = 0.9  # l90: the exact network with paths <= l recovers this share of the accuracy above baseline


def l90_of(upto: list[float], full: float, baseline: float) -> int:
    """The shortest maximal path length whose exact restricted network recovers :data:`RECOVER` of the
    full network's accuracy above the baseline (``L`` when only the full network does)."""
    above = full - baseline
    return next((l for l, a in enumerate(upto) if (a - baseline) >= RECOVER * above - 1e-12), len(upto) - 1)


def path_effectiveness(task, p, seed, arch, log=print) -> dict:
    cfg, r, X, Y, info = train_task(task, p, seed, arch, log=log)
    upto, only, full = tn.path_restricted_logits(cfg, r.params, X)
    L = cfg.n_layers
    g = torch.Generator().manual_seed(seed + 404)
    sampled = np.array(
        [
            [accuracy(tn.sampled_path_logits(cfg, r.params, X, l, p.n_paths, g), Y) for l in range(L + 1)]
            for _ in range(p.n_repeat)
        ]
    )
    out = {
        "task": task,
        "arch": arch,
        "seed": seed,
        "L": L,
        "full": accuracy(full, Y),
        "baseline": info["baseline"],
        "upto": [accuracy(upto[l], Y) for l in range(L + 1)],
        "only": [accuracy(only[l], Y) for l in range(L + 1)],
        "sampled_mean": sampled.mean(0).tolist(),
        "sampled_std": sampled.std(0).tolist(),
        "recon_err": float((upto[L] - full).abs().max() / full.abs().max()),
        "losses": r.losses,
        "info": info,
    }
    out["learned"] = out["full"] >= out["baseline"] + LEARNED
    out["l90"] = l90_of(out["upto"], out["full"], out["baseline"]) if out["learned"] else None
    log(
        f"{TASK_NAMES[task]} {arch} seed {seed}: full accuracy {out['full']:.3f} (baseline "
        f"{out['baseline']:.3f}); paths <= l: {[round(a, 3) for a in out['upto']]}; l90 {out['l90']}"
    )
    return out


def path_experiments(p, log=print) -> list[dict]:
    """:func:`path_effectiveness` for every architecture, task and seed."""
    rows = []
    for arch in p.archs:
        for task in TASKS:
            log(f"path effectiveness: {TASK_NAMES[task]} ({arch})")
            for seed in seeds_of(p, arch):
                rows.append(path_effectiveness(task, p, seed, arch, log=log))
    return rows
