"""Chapter `repair-path`: force without transmission (Figures 2 and 3 of Hofmann & Mäder).

Per-block gradients at each saved collapse (task loss, hinge, healthy network), the query–key gradient after
the skip scale is switched back, switches held at several alpha, the reversed-ramp hysteresis and the loss
after recovery. The saved collapses and healthy networks come from :func:`rankcollapse.repair.main_runs`; the
switches are :func:`rankcollapse.train.branch` runs with a constant alpha; the reversed ramp is the same branch
``repair-treatments`` asks for (loaded by content if it ran).
"""
from __future__ import annotations

import statistics

import numpy as np

from .. import gradpath as gp
from .. import lm
from .. import repair as rp
from .. import train as tr
from ..params import Param, Schema
from . import repair_treatments as trt

SCHEMA = Schema("repair-path", rp.DRIVER_PARAMS + [
    Param("switch_alphas", "float_list", "alpha held after the switch (one branch per value and event)",
          [0.1, 0.3, 0.6], low=0.0, high=1.0),
    Param("probe_alphas", "float_list", "alpha at which the query-key gradient is read right after the switch",
          [0.3, 1.0], low=0.0, high=1.0),
    Param("after_steps", "int", "the query-key gradient is read again after this many updates at each probe alpha",
          50, low=1, high=10**6),
    Param("added_loss", "float", "Lambda: nats the hinge adds at the saved state (as in repair-treatments)", 0.1,
          low=1e-6, high=10.0),
    Param("recover_frac", "float", "recovery threshold, fraction of the way from collapse threshold to healthy "
          "srank (as in repair-treatments)", 0.5, low=0.0, high=1.0),
    Param("recover_window", "int", "measurements in the recovery median", 5, low=1, high=1000),
])


def _probe(p, seed):
    return lm.corpus().probe(seed, 16, p.ctx)


def gradients_at_collapse(p, events: list[dict], healthy: dict) -> dict:
    """Per event: block gradient norms at the saved collapse (alpha_min; task and hinge), at the same weights
    with alpha switched to each probe alpha before any update, and of the healthy network (its final state)."""
    out = {}
    for e in events:
        s = e["seed"]
        x, y = _probe(p, s)
        m = tr.load_model(e["collapse"])
        hinge = tr.Term("hinge", e["betas"]["hinge"], e["s0"])
        r = {"collapsed": gp.block_grad_norms(m, x, y, term=hinge, alpha=p.alpha_min),
             "switched": {a: gp.block_grad_norms(m, x, y, alpha=a)
                          for a in sorted(set(p.probe_alphas) | set(p.switch_alphas))}}
        hm = tr.load_model(_final_path(healthy[s]), 1.0)
        r["healthy"] = gp.block_grad_norms(hm, x, y, alpha=1.0)
        r["healthy_step"] = healthy[s]["step"]
        out[s] = r
    return out


def _final_path(summary: dict):
    from pathlib import Path
    return Path(summary["dir"]) / "driver.pt"


def switch_spec(p, seed: int, start: int, alpha: float) -> tr.RunSpec:
    base = rp.run_spec(p, seed)
    return tr.RunSpec(**{**base.__dict__, "alpha_knots": ((start, float(alpha)),)})


def run_switches(p, events: list[dict], log=print) -> tuple[dict, dict, dict]:
    """Branches from every collapse: held at each switch alpha (``branch_steps``), at each probe alpha for
    ``after_steps`` (gradients read at their end), and the reversed ramp of ``repair-treatments``."""
    jobs, labels, tags = [], [], []
    for e in events:
        for a in p.switch_alphas:
            jobs.append(("branch", {"parent": e["collapse"], "spec": switch_spec(p, e["seed"], e["start"], a),
                                    "steps": p.branch_steps}))
            labels.append(f"seed {e['seed']} switch to {a}"); tags.append(("hold", e["seed"], a))
        for a in p.probe_alphas:
            jobs.append(("branch", {"parent": e["collapse"], "spec": switch_spec(p, e["seed"], e["start"], a),
                                    "steps": p.after_steps}))
            labels.append(f"seed {e['seed']} {p.after_steps} steps at {a}"); tags.append(("after", e["seed"], a))
        jobs.append(("branch", {"parent": e["collapse"],
                                "spec": trt.branch_spec(p, e["seed"], e["start"], "reversed-ramp", {}, 0.0),
                                "steps": p.branch_steps}))
        labels.append(f"seed {e['seed']} reversed ramp"); tags.append(("rev", e["seed"], None))
    res = rp.run_jobs(jobs, p.workers, log, labels)
    hold, after, rev = {}, {}, {}
    for (kind, s, a), o in zip(tags, res):
        if kind == "hold":
            hold.setdefault(s, {})[a] = o
        elif kind == "after":
            after.setdefault(s, {})[a] = o
        else:
            rev[s] = o
    return hold, after, rev


def gradients_after(p, events, after: dict) -> dict:
    """Per event and probe alpha: block gradients after ``after_steps`` updates at that alpha."""
    out = {}
    for e in events:
        x, y = _probe(p, e["seed"])
        out[e["seed"]] = {}
        for a, b in after[e["seed"]].items():
            m = tr.load_model(tr.states_dir() / b["key"] / "branch.pt", a)
            out[e["seed"]][a] = gp.block_grad_norms(m, x, y, alpha=a)
    return out


def summarise_switches(p, events, hold, healthy) -> dict:
    out = {}
    for a in p.switch_alphas:
        rows = []
        for e in events:
            b = hold[e["seed"]][a]
            rec = trt.recovery(b["hist"], e["start"], e["rec_threshold"], p.recover_window)
            gap = b["final_probe"]["loss"] - rp.at_step(healthy[e["seed"]]["hist"], b["step"], "probe_loss")
            rows.append({"seed": e["seed"], "recovered_after": rec,
                         "final_srank": statistics.median(rp.last_srank(b["hist"])[-p.recover_window:]),
                         "loss_gap": gap})
        steps = [r["recovered_after"] for r in rows if r["recovered_after"] is not None]
        out[a] = {"rows": rows, "recovered": len(steps), "events": len(rows),
                  "median_steps": statistics.median(steps) if steps else None}
    return out


def hysteresis(p, events, drivers, rev) -> list[dict]:
    """Per event: alpha at the driver's first crossing of the collapse threshold and alpha at which the reversed
    ramp recovered (None if it did not within the branch)."""
    out = []
    for e in events:
        d = drivers[e["seed"]]
        h = d["hist"]
        fc = d["det"]["first_cross"]
        a_col = h["alpha"][h["m_step"].index(fc)]
        spec = trt.branch_spec(p, e["seed"], e["start"], "reversed-ramp", {}, 0.0)
        rec = trt.recovery(rev[e["seed"]]["hist"], e["start"], e["rec_threshold"], p.recover_window)
        a_rec = spec.alpha(e["start"] + rec) if rec is not None else None
        out.append({"seed": e["seed"], "alpha_collapse": a_col, "alpha_recover": a_rec,
                    "ratio": (a_rec / a_col) if a_rec is not None and a_col > 0 else None})
    return out


def weight_rank_table(p, events, drivers, healthy) -> dict:
    """Stable rank of the weight matrices (median over blocks) at initialisation, at the saved collapse and at the
    healthy network's end, beside the last block's token srank."""
    out = {}
    for e in events:
        s = e["seed"]
        init = lm.build_model(rp.run_spec(p, s).model, s)
        col = tr.load_model(e["collapse"], p.alpha_min)
        hm = tr.load_model(_final_path(healthy[s]), 1.0)
        probe = _probe(p, s)
        r = {}
        for name, m in (("init", init), ("collapsed", col), ("healthy", hm)):
            ws = gp.weight_sranks(m)
            r[name] = {k: float(np.median(v)) for k, v in ws.items()}
            r[name]["token_srank"] = float(tr.probe_measure(m, probe, all_blocks=False)["srank"][-1])
        out[s] = r
    return out


def med(v) -> float:
    return float(np.median(v))


def predictor(grads: dict, alpha: float) -> dict:
    """The paper's predictor per event: median over blocks of the query-key gradient right after the switch."""
    return {s: med(g["switched"][alpha]["task_qk"]) for s, g in grads.items()}


def spearman(x, y) -> float | None:
    """Spearman rank correlation (None with fewer than 4 pairs: too few to mean anything)."""
    if len(x) < 4:
        return None
    from scipy.stats import spearmanr
    return float(spearmanr(x, y).statistic)


# -- figures ----------------------------------------------------------------------------------------
def fig_block_grads(p, grads: dict):
    """Figure 2: per-block gradient norms, log scale; numerically zero values drawn as open markers at the floor."""
    import matplotlib.pyplot as plt
    seeds = list(grads)
    fig, axs = plt.subplots(1, len(seeds), figsize=(5.2 * len(seeds), 3.6), squeeze=False)
    for ax, s in zip(axs[0], seeds):
        g = grads[s]
        blocks = np.arange(1, len(g["collapsed"]["task_attn"]) + 1)
        series = [("task, attn input (collapsed)", g["collapsed"]["task_attn"], g["collapsed"]["task_attn_zero"], "C0", "o-"),
                  ("task, Q/K (collapsed)", g["collapsed"]["task_qk"], g["collapsed"]["task_qk_zero"], "C1", "s-"),
                  ("hinge, attn input (collapsed)", g["collapsed"]["term_attn"], g["collapsed"]["term_attn_zero"], "C3", "^-"),
                  ("task, attn input (healthy)", g["healthy"]["task_attn"], g["healthy"]["task_attn_zero"], "C2", "o--"),
                  ("task, Q/K (healthy)", g["healthy"]["task_qk"], g["healthy"]["task_qk_zero"], "C2", "s:")]
        pos = [v for _, vals, _, _, _ in series for v in vals if v > 0]
        floor = min(pos) / 10 if pos else 1e-12
        for lab, vals, zero, c, st in series:
            v = np.array([max(x, floor) for x in vals])
            ax.plot(blocks, v, st, color=c, ms=4, lw=1, label=lab, mfc="none" if st.endswith(":") else c)
            z = np.array(zero)
            if z.any():
                ax.scatter(blocks[z], v[z], s=60, facecolors="none", edgecolors="k", zorder=4)
        ax.scatter([], [], s=60, facecolors="none", edgecolors="k", label="numerically zero (float32)")
        ax.set_yscale("log"); ax.set_xlabel("block"); ax.set_ylabel("gradient norm"); ax.set_title(f"seed {s}", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_switch_qk(p, grads, after):
    """The query-key gradient per block at the collapse, right after the switch, and after the first updates."""
    import matplotlib.pyplot as plt
    seeds = list(grads)
    fig, axs = plt.subplots(1, len(seeds), figsize=(5.2 * len(seeds), 3.4), squeeze=False)
    for ax, s in zip(axs[0], seeds):
        g = grads[s]
        b = np.arange(1, len(g["collapsed"]["task_qk"]) + 1)
        ax.plot(b, np.maximum(g["collapsed"]["task_qk"], 1e-30), "k-o", ms=3, lw=1, label=f"collapsed, alpha {p.alpha_min}")
        for i, a in enumerate(p.probe_alphas):
            ax.plot(b, g["switched"][a]["task_qk"], "-s", color=f"C{i}", ms=3, lw=1, label=f"alpha {a}, before any update")
            ax.plot(b, after[s][a]["task_qk"], "--^", color=f"C{i}", ms=3, lw=1, label=f"alpha {a}, after {p.after_steps} updates")
        ax.plot(b, g["healthy"]["task_qk"], ":", color="C2", lw=1.2, label="healthy")
        ax.set_yscale("log"); ax.set_xlabel("block"); ax.set_ylabel("|grad task| on Q/K weights")
        ax.set_title(f"seed {s}", fontsize=9); ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_hysteresis(p, events, drivers, rev):
    """Figure 3: last-block srank against alpha, down the driver's ramp and back up the reversed ramp."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for i, e in enumerate(events):
        h = drivers[e["seed"]]["hist"]
        k = [j for j, t in enumerate(h["m_step"]) if t >= p.ramp_start]
        ax.plot([h["alpha"][j] for j in k], tr.rolling_median([h["srank"][j][-1] for j in k], p.recover_window),
                "-", color=f"C{i}", lw=1, label=f"seed {e['seed']}: ramp down")
        r = rev[e["seed"]]["hist"]
        ax.plot(r["alpha"], tr.rolling_median(rp.last_srank(r), p.recover_window), "--", color=f"C{i}", lw=1,
                label=f"seed {e['seed']}: ramp back up")
    ax.axhline(p.threshold, color="gray", lw=0.6)
    ax.set_xscale("log"); ax.set_xlabel("alpha (skip scale)"); ax.set_ylabel("srank, last block (median)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_switches(p, events, hold):
    """Last-block srank after switches held at each alpha."""
    import matplotlib.pyplot as plt
    A = list(p.switch_alphas)
    fig, axs = plt.subplots(1, len(A), figsize=(3.3 * len(A), 2.8), sharey=True, squeeze=False)
    for ax, a in zip(axs[0], A):
        for i, e in enumerate(events):
            h = hold[e["seed"]][a]["hist"]
            ax.plot(np.array(h["m_step"]) - e["start"], tr.rolling_median(rp.last_srank(h), p.recover_window),
                    color=f"C{i}", lw=1, label=f"seed {e['seed']}")
            ax.axhline(e["rec_threshold"], color=f"C{i}", ls=":", lw=0.8)
        ax.axhline(p.threshold, color="gray", lw=0.6)
        ax.set_title(f"alpha held at {a}", fontsize=9); ax.set_xlabel("steps after switch", fontsize=8)
    axs[0, 0].set_ylabel("srank, last block (median)"); axs[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig
