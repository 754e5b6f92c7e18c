"""Chapter `repair-driver`, experiments: what is computed from the parameters, as plain data: the corpus,
every driver of the chapter (main seeds, the alpha_min and depth grids) with the healthy networks, trained or
loaded by content key through :mod:`rankcollapse.repair` from the study's spec (``study``), each driver's
outcome against its healthy network (:func:`events`) and the healthy networks' early dip. Training and
caching live in :mod:`rankcollapse.lm.training`.
"""

from __future__ import annotations

import statistics

import numpy as np

from ...lm import model as lm
from ...lm import training as tr
from ...repair import drivers, stages
from ...repair.recovery import at_step, last_srank, median_around
from ...repair.spec import StudySpec


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
