"""Chapter `repair-driver`: collapse a small LM by weakening its skip, and show the knife-edge.

Experiments return plain data; ``fig_*`` return matplotlib figures. Training and caching live in
:mod:`rankcollapse.lm.training`; the driver parameters shared with the other repair chapters in
:mod:`rankcollapse.lm.runs`.
"""

from __future__ import annotations

import statistics

import numpy as np

from ..book.params import Param, Schema
from ..lm import model as lm
from ..lm import runs as rp
from ..lm import training as tr
from . import common

SCHEMA = Schema(
    "repair-driver",
    common.DRIVER_PARAMS
    + [
        Param(
            "alpha_grid",
            "float_list",
            "alpha_min values of the knife-edge (first seed)",
            {
                "smoke": [0.02, 0.3],
                "full": [0.02, 0.05, 0.1, 0.2, 0.4],
                "paper": [0.01, 0.02, 0.05, 0.1, 0.2],
            },
            low=0.0,
            high=1.0,
        ),
        Param(
            "depth_grid",
            "int_list",
            "depths of the knife-edge at alpha_min (first seed)",
            {"smoke": [6, 12], "full": [4, 6, 8, 12], "paper": [6, 12, 24]},
            low=1,
            high=96,
        ),
    ],
)


def corpus_info() -> dict:
    c = lm.corpus()
    return {
        "files": len(c.files),
        "bytes": c.n_bytes,
        "sha256": c.sha256,
        "files_sha256": c.files_sha256,
        "unigram": c.unigram_loss(),
    }


def all_runs(p, log=print) -> dict:
    """Every driver of the chapter (main seeds, alpha_min grid, depth grid) and the healthy networks,
    trained or loaded by content key, in parallel."""
    s0 = p.seeds[0]
    jobs, labels, tags = [], [], []
    for s in p.seeds:
        jobs.append(("driver", rp.driver_job(p, s)))
        labels.append(f"driver seed {s}")
        tags.append(("main", s))
        jobs.append(("healthy", rp.healthy_job(p, s)))
        labels.append(f"healthy seed {s}")
        tags.append(("healthy", s))
    for a in p.alpha_grid:
        if a != p.alpha_min:
            jobs.append(("driver", rp.driver_job(p, s0, alpha_min=a)))
            labels.append(f"alpha_min {a}")
            tags.append(("alpha", a))
    for dpt in p.depth_grid:
        if dpt != p.depth:
            jobs.append(("driver", rp.driver_job(p, s0, depth=dpt)))
            labels.append(f"depth {dpt}")
            tags.append(("depth", dpt))
    out = rp.run_jobs(jobs, p.workers, log, labels)
    runs = {"main": {}, "healthy": {}, "alpha": {}, "depth": {}}
    for (kind, k), o in zip(tags, out):
        runs[kind][k] = o
    runs["alpha"][p.alpha_min] = runs["main"][s0]
    runs["depth"][p.depth] = runs["main"][s0]
    return runs


def final_srank(run: dict, k: int = 10) -> float:
    """Median of the last block's srank over the last ``k`` measurements of a run."""
    s = rp.last_srank(run["hist"])
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
                healthy_loss_same_step=rp.at_step(h["hist"], t, "probe_loss"),
                healthy_srank_same_step=rp.median_around(h["hist"], t),
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
        sr = rp.last_srank(h)
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


# -- figures ----------------------------------------------------------------------------------------
def _plain_log(ax) -> None:
    """Log y-axis with plain tick labels (srank lives between 1 and a few)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ax.yaxis.set_major_locator(FixedLocator([1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32]))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def fig_drivers(p, runs: dict):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    for s in p.seeds:
        h = runs["main"][s]["hist"]
        ax[0].plot(h["m_step"], rp.last_srank(h), lw=1, label=f"driver seed {s}")
        hh = runs["healthy"][s]["hist"]
        ax[0].plot(
            hh["m_step"],
            rp.last_srank(hh),
            lw=1,
            ls="--",
            color="k",
            alpha=0.5,
            label="healthy (alpha = 1)" if s == p.seeds[0] else None,
        )
        det = runs["main"][s]["det"]
        if det.get("settled") is not None:
            ax[0].axvline(det["settled"], color="r", lw=0.6, ls=":")
        ax[1].plot(h["m_step"], h["probe_loss"], lw=1, label=f"driver seed {s}")
        ax[1].plot(hh["m_step"], hh["probe_loss"], lw=1, ls="--", color="k", alpha=0.5)
    ax[0].axhline(p.threshold, color="gray", ls=":", lw=1)
    ax[0].set_yscale("log")
    _plain_log(ax[0])
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("srank of the last block (probe)")
    ax2 = ax[0].twinx()
    t = np.arange(0, rp.driver_steps(p) + 1, 10)
    ax2.plot(t, [rp.run_spec(p, 0).alpha(int(x)) for x in t], color="C7", lw=0.8, alpha=0.6)
    ax2.set_ylabel("skip scale alpha (grey)")
    ax[0].legend(fontsize=7, loc="upper right")
    ax[1].axhline(lm.corpus().unigram_loss(), color="gray", ls=":", lw=1, label="unigram (frequency table)")
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("probe loss (nats)")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_knife_edge(p, runs: dict):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    for a in sorted(runs["alpha"]):
        h = runs["alpha"][a]["hist"]
        ax[0].plot(h["m_step"], rp.last_srank(h), lw=1, label=f"alpha_min {a:g}")
    ax[0].axhline(p.threshold, color="gray", ls=":")
    ax[0].set_yscale("log")
    _plain_log(ax[0])
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("srank, last block")
    ax[0].legend(fontsize=7)
    al = sorted(runs["alpha"])
    ax[1].plot(al, [final_srank(runs["alpha"][a]) for a in al], "o-")
    ax[1].axhline(p.threshold, color="gray", ls=":")
    ax[1].set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ax[1].xaxis.set_major_locator(FixedLocator(al))
    ax[1].xaxis.set_major_formatter(ScalarFormatter())
    ax[1].xaxis.set_minor_formatter(NullFormatter())
    ax[1].set_xlabel("alpha_min")
    ax[1].set_ylabel("final srank (median of last 10)")
    dp = sorted(runs["depth"])
    ax[2].plot(dp, [final_srank(runs["depth"][d]) for d in dp], "s-")
    ax[2].axhline(p.threshold, color="gray", ls=":")
    ax[2].set_xlabel(f"depth (alpha_min = {p.alpha_min:g})")
    ax[2].set_ylabel("final srank")
    fig.tight_layout()
    return fig


def validate(p) -> None:
    """Checks across parameters, before any work (the runner calls it before a kernel starts; the chapter
    again)."""
    common.validate_driver(p)
