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
from pathlib import Path

import numpy as np
import torch

from ...lm import training as tr
from ...lm.model import corpus
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


# -- Figure 6 middle: rho along the line from the collapse towards the healthy network ---------------
LINE_TS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)  # fractions of the way from the collapse to the healthy net
LINE_BATCHES = 3  # rho at a point: median over the first this many batches the branches measure rho on
LINE_TERMS = ("penalty-1x", "hinge-1x", "cosine-1x")  # the 1x terms, each at its event's beta
DIRECTION_SEED = 6_000  # the random direction of event seed s: a Gaussian drawn from seed DIRECTION_SEED + s


def params_of(model) -> dict:
    """The model's parameters by name (every trainable tensor; buffers such as alpha left out), detached
    copies."""
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def norm_of(theta: dict) -> float:
    """Euclidean norm over all the tensors of ``theta`` (float64)."""
    return float(torch.sqrt(sum((v.double() ** 2).sum() for v in theta.values())))


def difference(a: dict, b: dict) -> dict:
    """``a - b``, tensor by tensor."""
    return {k: a[k] - b[k] for k in a}


def line_point(theta: dict, direction: dict, t: float) -> dict:
    """``theta + t * direction``, tensor by tensor: t = 0 is ``theta`` itself."""
    return {k: theta[k] + t * direction[k] for k in theta}


def random_direction(like: dict, length: float, seed: int) -> dict:
    """A Gaussian direction over every tensor of ``like`` (same shapes and dtypes), drawn from ``seed`` and
    scaled to Euclidean norm ``length`` over all of them together."""
    g = torch.Generator().manual_seed(seed)
    d = {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in like.items()}
    s = length / norm_of(d)
    return {k: (v * s).to(like[k].dtype) for k, v in d.items()}


def rho_batches(study: StudySpec, e: dict, n: int = LINE_BATCHES) -> list[int]:
    """The steps whose training batches the branches of event ``e`` measure rho on first (every
    ``rho_every`` steps from the switch): the first ``n`` of them."""
    every = tr.RunSpec.rho_every
    first = -(-e["start"] // every) * every
    return [first + i * every for i in range(n)]


def rho_at(model, batches, terms: dict) -> dict:
    """rho = |grad added| / |grad task| for each term of ``terms`` ({name: tr.Term}) on each batch, with
    respect to all parameters, before clipping: the measurement the training loop records for Table 2
    (:func:`rankcollapse.lm.training.train`: task cross-entropy and ``beta * raw`` taken separately, the
    norm over every parameter's gradient). Returns ({name: [rho per batch]}, [task gradient norm per
    batch])."""
    import torch.nn.functional as F

    params = list(model.parameters())
    out, task = {k: [] for k in terms}, []
    for x, y in batches:
        logits, hs, _ = model(x, hidden=True)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        nt = tr._norm(torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True))
        task.append(nt)
        for name, term in terms.items():
            added = term.beta * tr.term_value(term, hs)
            na = tr._norm(torch.autograd.grad(added, params, retain_graph=True, allow_unused=True))
            out[name].append(na / nt if nt > 0 else float("inf"))
    return out, task


def healthy_path(summary: dict) -> Path:
    """The saved end state of a healthy run (its ``driver.pt``, the only state it keeps)."""
    return Path(summary["dir"]) / "driver.pt"


def rho_along_line(p, study: StudySpec, events: list[dict], healthy: dict, log=None) -> dict:
    """Figure 6 middle, from the saved states alone (nothing is trained): per event, rho of each 1x loss
    term (:data:`LINE_TERMS` among ``p.treatments``, each at its event's beta and ``s0``) at the points
    ``theta_c + t (theta_h - theta_c)`` for t in :data:`LINE_TS` (theta_c the saved collapse, theta_h the
    healthy network of the same seed, its saved end state), and at ``theta_c + t r`` along a Gaussian
    direction ``r`` of the same length ``|theta_h - theta_c|`` (all parameters, seed ``DIRECTION_SEED +
    seed``). The skip scale stays at ``alpha_min`` everywhere (where the treatments train); rho at a point
    is the median over the first :data:`LINE_BATCHES` training batches the branches measure rho on.

    Returns {"t": [...], "terms": [...], "events": [{seed, start, healthy_step, distance, theta_norm,
    batch_steps, line: {term: [rho per t], "task": [task gradient norm per t]}, random: {...}, first_batch:
    {term: rho at t = 0 on the first batch}}]}."""
    terms = [t for t in LINE_TERMS if t in p.treatments]
    c = corpus()
    out = {"t": list(LINE_TS), "terms": terms, "events": []}
    for e in events:
        s = e["seed"]
        m = tr.load_model(e["collapse"], p.alpha_min)
        th_c = params_of(m)
        th_h = params_of(tr.load_model(healthy_path(healthy[s])))
        delta = difference(th_h, th_c)
        dist = norm_of(delta)
        rand = random_direction(th_c, dist, DIRECTION_SEED + s)
        steps = rho_batches(study, e)
        batches = [c.batch(s, t, p.batch, p.ctx) for t in steps]
        tm = {}
        for name in terms:
            kind, mult = name.split("-")
            s0 = e["s0"] if kind == "hinge" else 0.0
            tm[name] = tr.Term(kind, e["betas"][kind] * float(mult[:-1]), s0)
        row = {
            "seed": s,
            "start": e["start"],
            "healthy_step": healthy[s]["step"],
            "distance": dist,
            "theta_norm": norm_of(th_c),
            "batch_steps": steps,
            "line": {k: [] for k in (*terms, "task")},
            "random": {k: [] for k in (*terms, "task")},
        }
        for label, direction in (("line", delta), ("random", rand)):
            for t in LINE_TS:
                point = line_point(th_c, direction, t)
                with torch.no_grad():
                    for k, v in m.named_parameters():
                        v.copy_(point[k])
                r, task = rho_at(m, batches, tm)
                if t == 0.0 and label == "line":
                    row["first_batch"] = {k: r[k][0] for k in terms}
                for k in terms:
                    row[label][k].append(statistics.median(r[k]))
                row[label]["task"].append(statistics.median(task))
        out["events"].append(row)
        if log is not None:
            log(f"figure 6 middle: seed {s} done (|theta_h - theta_c| = {dist:.3g})")
    return out


def line_summary(line: dict) -> dict:
    """Over the events of :func:`rho_along_line`: per direction ("line", "random") and term, the median,
    lowest and highest rho at each t, and each event's change factor rho(t = 1) / rho(t = 0) with their
    median; the same for the task gradient's norm (key ``"task"``), the denominator of every rho."""
    out = {}
    for label in ("line", "random"):
        out[label] = {}
        for k in (*line["terms"], "task"):
            per_t = list(zip(*(r[label][k] for r in line["events"])))
            factors = [r[label][k][-1] / r[label][k][0] for r in line["events"]]
            out[label][k] = {
                "median": [statistics.median(v) for v in per_t],
                "low": [min(v) for v in per_t],
                "high": [max(v) for v in per_t],
                "factors": factors,
                "factor": statistics.median(factors),
            }
    return out
