"""Chapter `repair-driver`, experiments: what is computed from the parameters, as plain data: the corpus,
every driver of the chapter (main seeds, the alpha_min and depth grids) with the healthy networks, trained or
loaded by content key through :mod:`rankcollapse.repair` from the study's spec (``study``), each driver's
outcome against its healthy network (:func:`events`), the healthy networks' early dip, and the branches
without a loss term from each saved collapse (:func:`branches`: the untreated and reversed-ramp branches
``repair-treatments`` runs, the same jobs, so loaded from the shared store) read by the book's recovery rule
(:func:`branch_rows`). Training and caching live in :mod:`rankcollapse.lm.training`.
"""

from __future__ import annotations

import statistics

import numpy as np

from ...lm import model as lm
from ...lm import training as tr
from ...repair import drivers, stages
from ...repair.events import collapse_events
from ...repair.recovery import at_step, last_srank, median_around, recovery
from ...repair.spec import StudySpec
from ...repair.treatments import branch_job

BRANCHES = ("untreated", "reversed-ramp")  # H1 reads the first; the second is its control


def corpus_info() -> dict:
    c = lm.corpus()
    return {
        "files": len(c.files),
        "bytes": c.n_bytes,
        "sha256": c.sha256,
        "files_sha256": c.files_sha256,
        "unigram": c.unigram_loss(),
    }


def all_runs(p, study: StudySpec, log=print) -> dict:
    """Every driver of the chapter (main seeds, alpha_min grid, depth grid) and the healthy networks,
    trained or loaded by content key, in parallel (``study``: the driver's spec, made from ``p``)."""
    s0 = p.seeds[0]
    jobs, labels, tags = [], [], []
    for s in p.seeds:
        jobs.append(("driver", drivers.driver_job(study, s)))
        labels.append(f"driver seed {s}")
        tags.append(("main", s))
        jobs.append(("healthy", drivers.healthy_job(study, s)))
        labels.append(f"healthy seed {s}")
        tags.append(("healthy", s))
    for a in p.alpha_grid:
        if a != p.alpha_min:
            jobs.append(("driver", drivers.driver_job(study, s0, alpha_min=a)))
            labels.append(f"alpha_min {a}")
            tags.append(("alpha", a))
    for dpt in p.depth_grid:
        if dpt != p.depth:
            jobs.append(("driver", drivers.driver_job(study, s0, depth=dpt)))
            labels.append(f"depth {dpt}")
            tags.append(("depth", dpt))
    out = stages.run_stage(study, jobs, log, labels)
    runs = {"main": {}, "healthy": {}, "alpha": {}, "depth": {}}
    for (kind, k), o in zip(tags, out):
        runs[kind][k] = o
    runs["alpha"][p.alpha_min] = runs["main"][s0]
    runs["depth"][p.depth] = runs["main"][s0]
    return runs


def final_srank(run: dict, k: int = 10) -> float:
    """Median of the last block's srank over the last ``k`` measurements of a run."""
    s = last_srank(run["hist"])
    return statistics.median(s[-k:])


def events(p, runs: dict) -> list[dict]:
    """One row per seed: did the driver settle, when, heals, loss and attention entropy at the collapse
    against the healthy network of the same seed and step."""
    rows = []
    for s in p.seeds:
        d, h = runs["main"][s], runs["healthy"][s]
        det = d["det"]
        row = {
            "seed": s,
            "settled": det.get("settled"),
            "first_cross": det.get("first_cross"),
            "heals": [list(x) for x in det.get("heals", [])],
            "final_srank": final_srank(d),
            "healthy_final_srank": final_srank(h),
        }
        if d["collapse"] is not None:
            t = det["settled"]
            m = tr.load_model(d["collapse"], alpha=d["hist"]["alpha"][d["hist"]["m_step"].index(t)])
            probe = lm.corpus().probe(s, 16, m.cfg.ctx)
            meas = tr.probe_measure(m, probe, entropy=True)
            row.update(
                collapse_loss=meas["loss"],
                collapse_entropy=float(np.mean(meas["entropy"])),
                collapse_entropy_blocks=meas["entropy"],
                collapse_entropy_last=meas["entropy"][-1],
                collapse_srank=meas["srank"][-1],
                healthy_loss_same_step=at_step(h["hist"], t, "probe_loss"),
                healthy_srank_same_step=median_around(h["hist"], t),
            )
        row["final_loss"] = d["final_probe"]["loss"]
        row["final_entropy"] = float(np.mean(d["final_probe"]["entropy"]))
        row["healthy_final_entropy"] = float(np.mean(h["final_probe"]["entropy"]))
        row["healthy_final_entropy_last"] = h["final_probe"]["entropy"][-1]
        row["healthy_final_loss"] = h["final_probe"]["loss"]
        rows.append(row)
    return rows


def early_dip(p, runs: dict) -> list[dict]:
    """The healthy networks' early dip: lowest srank, when, and every run below the threshold."""
    out = []
    for s in p.seeds:
        h = runs["healthy"][s]["hist"]
        sr = last_srank(h)
        i = int(np.argmin(sr))
        out.append(
            {
                "seed": s,
                "min_srank": sr[i],
                "min_step": h["m_step"][i],
                "below": [list(c) for c in tr.crossings(h["m_step"], sr, p.threshold)],
                "final": final_srank(runs["healthy"][s]),
                "heals": runs["healthy"][s]["det"].get("heals", []),
            }
        )
    return out


def branches(p, study: StudySpec, runs: dict, log=print) -> tuple[list[dict], dict]:
    """The collapse events of the main drivers (:func:`rankcollapse.repair.events.collapse_events`, with
    the recovery rule's ``recover_frac``) and, per event, its :data:`BRANCHES` (``branch_steps`` updates
    from the saved collapse, :func:`rankcollapse.repair.treatments.branch_job`: the jobs
    ``repair-treatments`` runs, requested by content key). Returns (events, ``{seed: {treatment:
    summary}}``)."""
    evs = collapse_events(study, runs["main"], runs["healthy"], p.recover_frac)
    jobs, labels, tags = [], [], []
    for e in evs:
        for tname in BRANCHES:
            jobs.append(("branch", branch_job(study, e, tname)))
            labels.append(f"seed {e['seed']} {tname}")
            tags.append((e["seed"], tname))
    out = stages.run_stage(study, jobs, log, labels)
    res: dict = {}
    for (s, tname), o in zip(tags, out):
        res.setdefault(s, {})[tname] = o
    return evs, res


def branch_rows(p, evs: list[dict], res: dict) -> list[dict]:
    """Per event, each of its :data:`BRANCHES` read by the book's recovery rule (as ``repair-treatments``
    reads it, :func:`rankcollapse.repair.recovery.recovery`): steps after the switch until the
    ``recover_window``-measurement median of the last block's srank reaches the event's ``rec_threshold``
    (None: never within the branch), and the branch's final srank (median of its last ``recover_window``
    measurements)."""
    rows = []
    for e in evs:
        row = {"seed": e["seed"], "start": e["start"], "rec_threshold": e["rec_threshold"]}
        for tname in BRANCHES:
            h = res[e["seed"]][tname]["hist"]
            row[tname] = {
                "recovered_after": recovery(h, e["start"], e["rec_threshold"], p.recover_window),
                "final_srank": statistics.median(last_srank(h)[-p.recover_window :]),
                "steps": res[e["seed"]][tname]["step"] - e["start"],
            }
        rows.append(row)
    return rows


def healthy_settled(p, study: StudySpec, runs: dict) -> dict:
    """The healthy networks read by the drivers' detector (armed where the drivers' ramp starts, their
    window and settling time), replayed over each one's measurements up to the driver's last step:
    ``{seed: settled step or None}``."""
    out = {}
    end = drivers.driver_steps(study)
    for s in p.seeds:
        h = runs["healthy"][s]["hist"]
        det = tr.Detector(p.threshold, p.window, p.settle_steps, arm_step=p.ramp_start)
        for t, sr in zip(h["m_step"], last_srank(h)):
            if t > end:
                break
            det.feed(t, sr)
        out[s] = det.settled
    return out
