"""Chapter `repair-treatments`, experiments: what is computed from the parameters, as plain data: every
treatment branch of every saved collapse (one parallel stage through :mod:`rankcollapse.repair`, from the
study's spec ``study``), their summary per treatment (recoveries under both thresholds, rho, clip fraction,
the calibration of each loss term against its target, the loss gap to the healthy network), the loss-term
treatments asked for, and Figure 6 left's synthetic force of each term on a near-rank-one token matrix
with its log-log slope.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import torch

from ...lm import training as tr
from ...repair.recovery import at_step, last_srank, q_of, recovery
from ...repair.spec import RecoverySettings, StudySpec
from ...repair.stages import run_stage
from ...repair.treatments import LOSS_TERMS, added_loss, branch_job, calib_target


def run_branches(p, study: StudySpec, events: list[dict], log=print) -> dict:
    """Every treatment branch of every event (one parallel stage); a loss term's beta is its multiplier
    times the 1x beta of its kind (``e["betas"]``, :func:`rankcollapse.repair.events.prepare_events`)."""
    jobs, labels, tags = [], [], []
    for e in events:
        for tname in p.treatments:
            jobs.append(("branch", branch_job(study, e, tname)))
            labels.append(f"seed {e['seed']} {tname}")
            tags.append((e["seed"], tname))
    out = run_stage(study, jobs, log, labels)
    res = {}
    for (s, tname), o in zip(tags, out):
        res.setdefault(s, {})[tname] = o
    return res


def summarise(p, study: StudySpec, events: list[dict], branches: dict, healthy: dict) -> dict:
    """Per treatment: recoveries under the book's stricter threshold (``rec_threshold``) and under the
    paper's literal one (``rec_threshold_literal``, half the healthy srank), rho (median per event; median
    and range over events), clip fraction, achieved added loss (mean over the first ``calib_steps`` steps)
    against its target, final loss gap to the healthy network."""
    out = {}
    for tname in p.treatments:
        rows = []
        for e in events:
            b = branches[e["seed"]][tname]
            h = b["hist"]
            end = b["step"]
            gap = b["final_probe"]["loss"] - at_step(healthy[e["seed"]]["hist"], end, "probe_loss")
            cal = at_switch(study.recovery, e, tname)
            rows.append(
                {
                    "seed": e["seed"],
                    "recovered_after": recovery(h, e["start"], e["rec_threshold"], p.recover_window),
                    "recovered_after_literal": recovery(
                        h, e["start"], e["rec_threshold_literal"], p.recover_window
                    ),
                    "rho": statistics.median(h["rho"]) if h["rho"] else None,
                    "clip_fraction": float(np.mean(h["clipped"])),
                    "added_loss": added_loss(h, p.calib_steps),
                    **cal,
                    "first_step_check": abs(h["term"][0] / cal["first_batch"] - 1) if cal["target"] else 0.0,
                    "final_srank": statistics.median(last_srank(h)[-p.recover_window :]),
                    "loss_gap": gap,
                }
            )
        rhos = [r["rho"] for r in rows if r["rho"] is not None]
        out[tname] = {
            "rows": rows,
            "recovered": sum(r["recovered_after"] is not None for r in rows),
            "recovered_literal": sum(r["recovered_after_literal"] is not None for r in rows),
            "events": len(rows),
            "rho_median": statistics.median(rhos) if rhos else None,
            "rho_low": min(rhos) if rhos else None,
            "rho_high": max(rhos) if rhos else None,
            "clip_fraction": float(np.mean([r["clip_fraction"] for r in rows])),
            "added_loss": float(np.mean([r["added_loss"] for r in rows])),
            "target": rows[0]["target"] if rows else 0.0,
            "calib_error": max(
                (abs(r["at_switch"] / r["target"] - 1) for r in rows if r["target"]), default=0.0
            ),
            "loss_gap": float(np.median([r["loss_gap"] for r in rows])),
        }
    return out


def at_switch(rec: RecoverySettings, e: dict, tname: str) -> dict:
    """The calibration of a treatment in one event: its target (multiplier x Lambda), beta, what the term
    adds at the saved state averaged over the branch's first ``calib_steps`` training batches (the target,
    by construction: the term is linear in beta there), on the first batch alone (the branch's first
    recorded term must equal it: a check that the calibration saw the branch's batches), and what the former
    calibration, beta = Lambda / raw on the probe batch, would have added at the switch."""
    if tname not in LOSS_TERMS:
        return {"target": 0.0, "beta": None, "at_switch": 0.0, "first_batch": 0.0, "probe_set": 0.0}
    kind, mult = tname.split("-")
    c = e["calib"][kind]
    beta = e["betas"][kind] * float(mult[:-1])
    return {
        "target": calib_target(rec, tname),
        "beta": beta,
        "at_switch": beta * c["raw"],
        "first_batch": beta * c["raws"][0],
        "probe_set": calib_target(rec, tname) * c["raw"] / c["probe_raw"],
    }


def loss_terms(p) -> list[str]:
    """The loss-term treatments among ``p.treatments``, in the order of
    :data:`rankcollapse.repair.treatments.LOSS_TERMS`."""
    return [t for t in LOSS_TERMS if t in p.treatments]


# -- Figure 6 left: force of each term on a synthetic near-rank-one token matrix --------------------
def synthetic_force(n: int, d: int, deltas, seed: int, s0: float = math.sqrt(2.0)) -> dict:
    """Gradient norm of each raw term (beta = 1) with respect to ``X = a v^T + delta E`` (float64).

    ``a`` has zero mean over tokens and unit norm, ``v`` is a unit vector, ``E`` is Gaussian, centred over
    tokens, orthogonal to ``v`` and of unit Frobenius norm, so that ``Q(X) = delta`` up to the cross term."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, 1, generator=g, dtype=torch.float64)
    a -= a.mean()
    a /= a.norm()
    v = torch.randn(1, d, generator=g, dtype=torch.float64)
    v /= v.norm()
    E = torch.randn(n, d, generator=g, dtype=torch.float64)
    E -= E.mean(0, keepdim=True)
    E -= (E @ v.T) @ v
    E /= E.norm()
    out = {"delta": list(deltas)}
    for kind in tr.TERMS:
        norms, qs = [], []
        for dl in deltas:
            X = (a @ v + dl * E).requires_grad_(True)
            val = tr.term_value(tr.Term(kind, 1.0, s0), [X[None]])
            (gX,) = torch.autograd.grad(val, X)
            norms.append(float(gX.norm()))
            qs.append(float(q_of(float(tr.stable_rank(X.detach())))))
        out[kind] = norms
        out["Q"] = qs
    return out


def loglog_slope(x, y) -> float:
    lx, ly = np.log(np.asarray(x)), np.log(np.maximum(np.asarray(y), 1e-300))
    return float(np.polyfit(lx, ly, 1)[0])
