"""Chapter `repair-path`: force without transmission (Figures 2 and 3 of Hofmann & Mäder).

Per-block gradients at each saved collapse (task loss, hinge, healthy network), the query–key gradient after
the skip scale is switched back, switches held at several alpha, the reversed-ramp hysteresis and the loss
after recovery. The saved collapses and healthy networks come from :func:`rankcollapse.lm.runs.main_runs`;
the switches are :func:`rankcollapse.lm.training.branch` runs with a constant alpha; the reversed ramp is the
same branch ``repair-treatments`` asks for (loaded by content if it ran).
"""

from __future__ import annotations

import statistics

import numpy as np

from ..book.params import Param, Schema
from ..core.stats import spearman
from ..lm import gradpath as gp
from ..lm import model as lm
from ..lm import runs as rp
from ..lm import training as tr
from . import common

SCHEMA = Schema(
    "repair-path",
    common.DRIVER_PARAMS
    + [
        Param(
            "switch_alphas",
            "float_list",
            "alpha held after the switch (one branch per value and event)",
            [0.1, 0.3, 0.6],
            low=0.0,
            high=1.0,
        ),
        Param(
            "probe_alphas",
            "float_list",
            "alpha at which the query-key gradient is read right after the switch",
            [0.3, 1.0],
            low=0.0,
            high=1.0,
        ),
        Param(
            "after_steps",
            "int",
            "the query-key gradient is read again after this many updates at each probe alpha",
            50,
            low=1,
            high=10**6,
        ),
        *common.RECOVERY_PARAMS,  # the same recovery rule as repair-treatments
        Param(
            "delays",
            "int_list",
            "further steps held at alpha_min before a delayed switch (multiples of 10, increasing)",
            {"smoke": [100], "full": [100, 300, 500], "paper": [500, 1500, 3000]},
            low=10,
            high=10**7,
        ),
        Param(
            "delay_alphas",
            "float_list",
            "alpha switched to after each delay (each must be one of switch_alphas: "
            "the undelayed switch is the held one)",
            {"smoke": [0.3], "full": [0.1, 0.3], "paper": [0.1, 0.3]},
            low=0.0,
            high=1.0,
        ),
        Param(
            "trace_every",
            "int",
            "the weights' stable ranks are shown every this many steps through the driver (a multiple of "
            "50, the training loop's recording interval)",
            50,
            low=50,
            high=10**6,
        ),
    ],
)


def validate(p) -> None:
    """Checks across parameters, before any work (the schema checks each one alone)."""
    from ..book.params import ParameterError

    common.validate_driver(p)
    if any(d % 10 for d in p.delays) or list(p.delays) != sorted(set(p.delays)):
        raise ParameterError(f"parameter 'delays' = {p.delays} must be strictly increasing multiples of 10")
    missing = [a for a in p.delay_alphas if a not in p.switch_alphas]
    if missing:
        raise ParameterError(
            f"parameter 'delay_alphas' = {p.delay_alphas}: each must be one of "
            f"switch_alphas = {p.switch_alphas} (missing {missing})"
        )
    if p.trace_every <= 0 or p.trace_every % tr.RunSpec.weights_every:
        raise ParameterError(
            f"parameter 'trace_every' = {p.trace_every} must be a positive multiple of "
            f"{tr.RunSpec.weights_every} (the training loop records the weights' stable ranks that often)"
        )


def _probe(p, seed):
    return lm.corpus().probe(seed, 16, p.ctx)


def gradients_at_collapse(p, events: list[dict], healthy: dict) -> dict:
    """Per event: block gradient norms at the saved collapse (alpha_min; task and hinge), at the same weights
    with alpha switched to each probe alpha before any update, and of the healthy network (its final
    state)."""
    out = {}
    for e in events:
        s = e["seed"]
        x, y = _probe(p, s)
        m = tr.load_model(e["collapse"])
        hinge = tr.Term("hinge", e["betas"]["hinge"], e["s0"])
        r = {
            "collapsed": gp.block_grad_norms(m, x, y, term=hinge, alpha=p.alpha_min),
            "switched": {
                a: gp.block_grad_norms(m, x, y, alpha=a)
                for a in sorted(set(p.probe_alphas) | set(p.switch_alphas))
            },
        }
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


def untreated_spec(p, e) -> tr.RunSpec:
    return rp.branch_spec(p, e["seed"], e["start"], "untreated", {}, 0.0)


def delay_segments(p, e, d: int, a: float) -> list:
    """The chain of a switch to ``a`` after ``d`` further collapsed steps: the untreated branch for ``d``
    steps (one trajectory with the untreated branch of ``repair-treatments`` and every other delay: a held
    branch continues the longest saved shorter one and saves its state every 100 steps), then the switch
    held for ``branch_steps``."""
    return [(untreated_spec(p, e), d), (switch_spec(p, e["seed"], e["start"] + d, a), p.branch_steps)]


def run_switches(p, events: list[dict], log=print) -> tuple[dict, dict, dict, dict]:
    """Everything trained from the saved collapses, in one parallel pool: switches held at each switch alpha
    (``branch_steps``), at each probe alpha for ``after_steps`` (gradients read at their end), the reversed
    ramp of ``repair-treatments`` and the delayed switches (chains: untreated for each delay, then the
    switch). Returns (hold, after, rev, delayed)."""
    jobs, labels, tags = [], [], []
    for e in events:
        for d in p.delays:  # shortest first: each longer delay continues the untreated branch of the last
            for a in p.delay_alphas:
                jobs.append(("chain", {"parent": e["collapse"], "segments": delay_segments(p, e, d, a)}))
                labels.append(f"seed {e['seed']} switch to {a} after {d} collapsed steps")
                tags.append(("delay", e["seed"], (d, a)))
    for e in events:
        # the short runs first: a held switch at the same alpha then continues one (same trajectory)
        for a in p.probe_alphas:
            jobs.append(
                (
                    "branch",
                    {
                        "parent": e["collapse"],
                        "spec": switch_spec(p, e["seed"], e["start"], a),
                        "steps": p.after_steps,
                    },
                )
            )
            labels.append(f"seed {e['seed']} {p.after_steps} steps at {a}")
            tags.append(("after", e["seed"], a))
        for a in p.switch_alphas:
            jobs.append(
                (
                    "branch",
                    {
                        "parent": e["collapse"],
                        "spec": switch_spec(p, e["seed"], e["start"], a),
                        "steps": p.branch_steps,
                    },
                )
            )
            labels.append(f"seed {e['seed']} switch to {a}")
            tags.append(("hold", e["seed"], a))
        jobs.append(
            (
                "branch",
                {
                    "parent": e["collapse"],
                    "spec": rp.branch_spec(p, e["seed"], e["start"], "reversed-ramp", {}, 0.0),
                    "steps": p.branch_steps,
                },
            )
        )
        labels.append(f"seed {e['seed']} reversed ramp")
        tags.append(("rev", e["seed"], None))
    res = rp.run_jobs(jobs, p.workers, log, labels)
    hold, after, rev, delayed = {}, {}, {}, {}
    for (kind, s, a), o in zip(tags, res):
        if kind == "hold":
            hold.setdefault(s, {})[a] = o
        elif kind == "after":
            after.setdefault(s, {})[a] = o
        elif kind == "delay":
            delayed.setdefault(s, {})[a] = o
        else:
            rev[s] = o
    return hold, after, rev, delayed


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
            rec = rp.recovery(b["hist"], e["start"], e["rec_threshold"], p.recover_window)
            gap = b["final_probe"]["loss"] - rp.at_step(healthy[e["seed"]]["hist"], b["step"], "probe_loss")
            rows.append(
                {
                    "seed": e["seed"],
                    "recovered_after": rec,
                    "final_srank": statistics.median(rp.last_srank(b["hist"])[-p.recover_window :]),
                    "loss_gap": gap,
                }
            )
        steps = [r["recovered_after"] for r in rows if r["recovered_after"] is not None]
        out[a] = {
            "rows": rows,
            "recovered": len(steps),
            "events": len(rows),
            "median_steps": statistics.median(steps) if steps else None,
        }
    return out


def hysteresis(p, events, drivers, rev) -> list[dict]:
    """Per event: alpha at the driver's first crossing of the collapse threshold and alpha at which the
    reversed ramp recovered (None if it did not within the branch)."""
    out = []
    for e in events:
        d = drivers[e["seed"]]
        h = d["hist"]
        fc = d["det"]["first_cross"]
        a_col = h["alpha"][h["m_step"].index(fc)]
        spec = rp.branch_spec(p, e["seed"], e["start"], "reversed-ramp", {}, 0.0)
        rec = rp.recovery(rev[e["seed"]]["hist"], e["start"], e["rec_threshold"], p.recover_window)
        a_rec = spec.alpha(e["start"] + rec) if rec is not None else None
        out.append(
            {
                "seed": e["seed"],
                "alpha_collapse": a_col,
                "alpha_recover": a_rec,
                "ratio": _ratio(a_rec, a_col),
            }
        )
    return out


def _ratio(a_rec: float | None, a_col: float) -> float | None:
    """alpha of recovery / alpha of collapse; None without a recovery. A collapse first crossed at alpha = 0
    (the smoke driver's floor) makes any recovery infinitely far above the collapse scale: the ratio is
    inf."""
    if a_rec is None:
        return None
    return a_rec / a_col if a_col > 0 else float("inf")


def weight_rank_table(p, events, drivers, healthy) -> dict:
    """Stable rank of the weight matrices (median over blocks) at initialisation, at the saved collapse and
    at the healthy network's end, beside the last block's token srank."""
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
    """The paper's predictor per event: median over blocks of the query-key gradient right after the
    switch."""
    return {s: med(g["switched"][alpha]["task_qk"]) for s, g in grads.items()}


# -- figures ----------------------------------------------------------------------------------------
def fig_block_grads(p, grads: dict):
    """Figure 2: per-block gradient norms, log scale; numerically zero values drawn as open markers at the
    floor."""
    import matplotlib.pyplot as plt

    seeds = list(grads)
    fig, axs = plt.subplots(1, len(seeds), figsize=(5.2 * len(seeds), 3.6), squeeze=False)
    for ax, s in zip(axs[0], seeds):
        g = grads[s]
        blocks = np.arange(1, len(g["collapsed"]["task_attn"]) + 1)
        series = [
            (
                "task, attn input (collapsed)",
                g["collapsed"]["task_attn"],
                g["collapsed"]["task_attn_zero"],
                "C0",
                "o-",
            ),
            ("task, Q/K (collapsed)", g["collapsed"]["task_qk"], g["collapsed"]["task_qk_zero"], "C1", "s-"),
            (
                "hinge, attn input (collapsed)",
                g["collapsed"]["term_attn"],
                g["collapsed"]["term_attn_zero"],
                "C3",
                "^-",
            ),
            (
                "task, attn input (healthy)",
                g["healthy"]["task_attn"],
                g["healthy"]["task_attn_zero"],
                "C2",
                "o--",
            ),
            ("task, Q/K (healthy)", g["healthy"]["task_qk"], g["healthy"]["task_qk_zero"], "C2", "s:"),
        ]
        pos = [v for _, vals, _, _, _ in series for v in vals if v > 0]
        floor = min(pos) / 10 if pos else 1e-12
        for lab, vals, zero, c, st in series:
            v = np.array([max(x, floor) for x in vals])
            ax.plot(blocks, v, st, color=c, ms=4, lw=1, label=lab, mfc="none" if st.endswith(":") else c)
            z = np.array(zero)
            if z.any():
                ax.scatter(blocks[z], v[z], s=60, facecolors="none", edgecolors="k", zorder=4)
        ax.scatter([], [], s=60, facecolors="none", edgecolors="k", label="numerically zero (float32)")
        ax.set_yscale("log")
        ax.set_xlabel("block")
        ax.set_ylabel("gradient norm")
        ax.set_title(f"seed {s}", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_switch_qk(p, grads, after):
    """The query-key gradient per block at the collapse, right after the switch, and after the first
    updates."""
    import matplotlib.pyplot as plt

    seeds = list(grads)
    fig, axs = plt.subplots(1, len(seeds), figsize=(5.2 * len(seeds), 3.4), squeeze=False)
    for ax, s in zip(axs[0], seeds):
        g = grads[s]
        b = np.arange(1, len(g["collapsed"]["task_qk"]) + 1)
        ax.plot(
            b,
            np.maximum(g["collapsed"]["task_qk"], 1e-30),
            "k-o",
            ms=3,
            lw=1,
            label=f"collapsed, alpha {p.alpha_min}",
        )
        for i, a in enumerate(p.probe_alphas):
            ax.plot(
                b,
                g["switched"][a]["task_qk"],
                "-s",
                color=f"C{i}",
                ms=3,
                lw=1,
                label=f"alpha {a}, before any update",
            )
            ax.plot(
                b,
                after[s][a]["task_qk"],
                "--^",
                color=f"C{i}",
                ms=3,
                lw=1,
                label=f"alpha {a}, after {p.after_steps} updates",
            )
        ax.plot(b, g["healthy"]["task_qk"], ":", color="C2", lw=1.2, label="healthy")
        ax.set_yscale("log")
        ax.set_xlabel("block")
        ax.set_ylabel("|grad task| on Q/K weights")
        ax.set_title(f"seed {s}", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_hysteresis(p, events, drivers, rev):
    """Figure 3: last-block srank against alpha, down the driver's ramp and back up the reversed ramp."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for i, e in enumerate(events):
        h = drivers[e["seed"]]["hist"]
        k = [j for j, t in enumerate(h["m_step"]) if t >= p.ramp_start]
        ax.plot(
            [h["alpha"][j] for j in k],
            tr.rolling_median([h["srank"][j][-1] for j in k], p.recover_window),
            "-",
            color=f"C{i}",
            lw=1,
            label=f"seed {e['seed']}: ramp down",
        )
        r = rev[e["seed"]]["hist"]
        ax.plot(
            r["alpha"],
            tr.rolling_median(rp.last_srank(r), p.recover_window),
            "--",
            color=f"C{i}",
            lw=1,
            label=f"seed {e['seed']}: ramp back up",
        )
    ax.axhline(p.threshold, color="gray", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("alpha (skip scale)")
    ax.set_ylabel("srank, last block (median)")
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
            ax.plot(
                np.array(h["m_step"]) - e["start"],
                tr.rolling_median(rp.last_srank(h), p.recover_window),
                color=f"C{i}",
                lw=1,
                label=f"seed {e['seed']}",
            )
            ax.axhline(e["rec_threshold"], color=f"C{i}", ls=":", lw=0.8)
        ax.axhline(p.threshold, color="gray", lw=0.6)
        ax.set_title(f"alpha held at {a}", fontsize=9)
        ax.set_xlabel("steps after switch", fontsize=8)
    axs[0, 0].set_ylabel("srank, last block (median)")
    axs[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


# -- delayed switches and the predictor ---------------------------------------------------------------
CENSOR = 10  # a switch that never recovers is counted as branch_steps + CENSOR steps where a time is needed


def delayed_points(p, events, hold, delayed, healthy) -> list[dict]:
    """One row per (event, delay, alpha), delay 0 being the held switch: the predictor (median over blocks of
    the query-key gradient right after the switch, before any update), the last block's srank just before the
    switch, steps to recovery (None: not within ``branch_steps``), final srank, and the loss gap to the
    healthy network at the same step (None past the healthy run's end)."""
    rows = []
    for e in events:
        s = e["seed"]
        probe = _probe(p, s)
        hh = healthy[s]["hist"]
        for a in p.delay_alphas:
            pts = [(0, e["collapse"], hold[s][a])]
            pts += [(d, rp.branch_path(delayed[s][(d, a)][-2]), delayed[s][(d, a)][-1]) for d in p.delays]
            for d, state, b in pts:
                m = tr.load_model(state, p.alpha_min)
                s_at = float(tr.probe_measure(m, probe, all_blocks=False)["srank"][-1])
                q = med(gp.block_grad_norms(m, *probe, alpha=a)["task_qk"])
                rec = rp.recovery(b["hist"], e["start"] + d, e["rec_threshold"], p.recover_window)
                gap = (
                    b["final_probe"]["loss"] - rp.at_step(hh, b["step"], "probe_loss")
                    if b["step"] in hh["m_step"]
                    else None
                )
                rows.append(
                    {
                        "seed": s,
                        "delay": d,
                        "alpha": a,
                        "predictor": q,
                        "srank_at_switch": s_at,
                        "recovered_after": rec,
                        "final_srank": statistics.median(rp.last_srank(b["hist"])[-p.recover_window :]),
                        "loss_gap": gap,
                    }
                )
    return rows


def censored(rec, branch_steps: int) -> int:
    return branch_steps + CENSOR if rec is None else rec


def h5_alpha(p) -> float:
    """The switch scale H5 is judged at: 0.3 (the paper's Figure 7) if delayed switches use it, else the
    largest."""
    return 0.3 if 0.3 in p.delay_alphas else max(p.delay_alphas)


def delay_effect(p, rows) -> dict:
    """Per event at :func:`h5_alpha`: steps to recovery undelayed and after the longest delay (censored at
    branch_steps + 10 when it never recovered), and the Spearman correlation of delay and censored recovery
    time over all points at that alpha (None with fewer than 4 points)."""
    a = h5_alpha(p)
    pts = [r for r in rows if r["alpha"] == a]
    per = {}
    for r in pts:
        per.setdefault(r["seed"], {})[r["delay"]] = r["recovered_after"]
    dmax = max(p.delays)
    ev = [
        {
            "seed": s,
            "t0": v[0],
            "tmax": v[dmax],
            "diff": censored(v[dmax], p.branch_steps) - censored(v[0], p.branch_steps),
        }
        for s, v in per.items()
    ]
    rho = spearman([r["delay"] for r in pts], [censored(r["recovered_after"], p.branch_steps) for r in pts])
    return {
        "alpha": a,
        "events": ev,
        "spearman": rho,
        "any_recovered": any(r["recovered_after"] is not None for r in pts),
    }


def h5_verdict(eff: dict, margin: int = 20) -> str:
    """supported: no event recovers faster (by ``margin`` steps) after the longest delay than undelayed, and
    more than half the events recover slower by ``margin`` or not at all; refuted: more than half recover
    faster by ``margin``; inconclusive: otherwise, or when nothing recovered at any delay."""
    ev = eff["events"]
    if not ev or not eff["any_recovered"]:
        return "inconclusive"
    slower = sum(e["diff"] >= margin for e in ev)
    faster = sum(e["diff"] <= -margin for e in ev)
    if faster == 0 and 2 * slower > len(ev):
        return "supported"
    if 2 * faster > len(ev):
        return "refuted"
    return "inconclusive"


def fit_threshold(points: list[tuple[float, bool]]) -> float | None:
    """The predictor's threshold as the paper registered it: recovery predicted when the predictor is at
    least the threshold. Candidates are geometric midpoints between neighbouring predictor values; the one
    with the best accuracy on ``points`` wins (ties: the lowest). None when the points show only one outcome
    (nothing to fit)."""
    if len({o for _, o in points}) < 2:
        return None
    qs = sorted({q for q, _ in points})
    cands = [(a * b) ** 0.5 for a, b in zip(qs, qs[1:])] + [qs[0] / 2, qs[-1] * 2]
    best = max(sorted(cands), key=lambda t: (accuracy(t, points), -t))
    return best


def accuracy(t: float, points: list[tuple[float, bool]]) -> float:
    return sum((q >= t) == o for q, o in points) / len(points)


def split_test(rows, dev: list, test: list) -> dict:
    """Fit the threshold on the rows of the development seeds, freeze it, and score it on the held-out
    seeds."""
    dev_pts = [(r["predictor"], r["recovered_after"] is not None) for r in rows if r["seed"] in dev]
    test_pts = [(r["predictor"], r["recovered_after"] is not None) for r in rows if r["seed"] in test]
    t = fit_threshold(dev_pts)
    return {
        "threshold": t,
        "dev_accuracy": accuracy(t, dev_pts) if t is not None else None,
        "test_accuracy": accuracy(t, test_pts) if t is not None and test_pts else None,
        "dev_points": len(dev_pts),
        "test_points": len(test_pts),
    }


def predictor_split(p, rows) -> dict:
    """The registered test, twice: (a) as the paper ran it, the outcome of the switch to the lowest delayed
    alpha; (b) pooled over every delayed switch alpha (recovered within the branch or not). Each time the
    threshold is fitted on the development events (the first half of the settled seeds, in order), frozen,
    and tested on the held-out events. Also the Spearman correlations of the predictor with recovery (lowest
    alpha) and with recovery time among recovered switches (at :func:`h5_alpha`)."""
    a_lo = min(p.delay_alphas)
    seeds = sorted({r["seed"] for r in rows})
    dev = seeds[: (len(seeds) + 1) // 2]
    test = seeds[len(dev) :]
    pts = [r for r in rows if r["alpha"] == a_lo]
    outcome = [int(r["recovered_after"] is not None) for r in pts]
    rec_h = [r for r in rows if r["alpha"] == h5_alpha(p) and r["recovered_after"] is not None]
    lo = split_test(pts, dev, test)
    return {
        "alpha": a_lo,
        "dev_seeds": dev,
        "test_seeds": test,
        **lo,
        "pooled": split_test(rows, dev, test),
        "spearman_recovery": spearman([r["predictor"] for r in pts], outcome)
        if len(set(outcome)) > 1
        else None,
        "spearman_time": spearman([r["predictor"] for r in rec_h], [r["recovered_after"] for r in rec_h]),
    }


def driver_traces(p, events: list[dict], drivers: dict) -> dict:
    """Per event's driver, every ``trace_every`` steps: the step, alpha, the last block's token srank and
    each weight kind's stable rank (median over blocks), read from what the training loop recorded."""
    out = {}
    for e in events:
        h = drivers[e["seed"]]["hist"]
        t = {"step": [], "alpha": [], "token_srank": [], **{k: [] for k in WEIGHT_KINDS}}
        for step, ws in zip(h["w_step"], h["wsrank"]):
            if step % p.trace_every:
                continue
            i = h["m_step"].index(step)
            t["step"].append(step)
            t["alpha"].append(h["alpha"][i])
            t["token_srank"].append(h["srank"][i][-1])
            for k in WEIGHT_KINDS:
                t[k].append(float(np.median(ws[k])))
        out[e["seed"]] = t
    return out


def trace_summary(p, trace: dict) -> dict:
    """Per traced driver, from the ramp's start to the driver's end: the ratio of the token srank and of each
    weight kind's stable rank."""
    out = {}
    for s, t in trace.items():
        i0 = t["step"].index(max(x for x in t["step"] if x <= p.ramp_start))
        kinds = ("query", "key", "value", "mlp_in", "mlp_out")
        out[s] = {
            "token_ratio": t["token_srank"][-1] / t["token_srank"][i0],
            "weight_ratio": {k: t[k][-1] / t[k][i0] for k in kinds},
        }
    return out


def fig_delays(p, rows):
    """Figure 7: steps to recovery after the switch against the further collapsed steps before it; crosses at
    the top: no recovery within the branch."""
    import matplotlib.pyplot as plt

    A = list(p.delay_alphas)
    seeds = sorted({r["seed"] for r in rows})
    fig, axs = plt.subplots(1, len(A), figsize=(3.8 * len(A), 3.0), sharey=True, squeeze=False)
    top = p.branch_steps + CENSOR
    for ax, a in zip(axs[0], A):
        for i, s in enumerate(seeds):
            rs = sorted((r for r in rows if r["alpha"] == a and r["seed"] == s), key=lambda r: r["delay"])
            d = [r["delay"] for r in rs]
            t = [censored(r["recovered_after"], p.branch_steps) for r in rs]
            ax.plot(d, t, "-", color=f"C{i}", lw=0.8, alpha=0.6)
            for dd, r in zip(d, rs):
                if r["recovered_after"] is None:
                    ax.scatter([dd], [top], marker="x", color=f"C{i}", s=40)
                else:
                    ax.scatter([dd], [r["recovered_after"]], color=f"C{i}", s=25)
        ax.axhline(top, color="gray", lw=0.5, ls=":")
        ax.set_ylim(0, top * 1.08)
        ax.set_title(f"switch to alpha = {a}", fontsize=9)
        ax.set_xlabel(f"further steps at alpha = {p.alpha_min} before the switch", fontsize=8)
    axs[0, 0].set_ylabel("steps to recovery")
    from matplotlib.lines import Line2D

    axs[0, 0].legend(
        [Line2D([], [], color=f"C{i}", marker="o", lw=0.8) for i in range(len(seeds))],
        [f"seed {s}" for s in seeds],
        fontsize=7,
    )
    fig.tight_layout()
    return fig


def fig_predictor(p, rows, split):
    """Figure 8: outcome of every switch against the predictor, one colour per switch alpha (filled:
    development seeds, open: held-out seeds; dashed: the threshold fitted at the lowest alpha, dash-dotted:
    pooled over alphas), and steps to recovery against the predictor at the H5 alpha."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axs = plt.subplots(1, 2, figsize=(9.5, 3.2))
    A = sorted({r["alpha"] for r in rows})
    for r in rows:
        c = f"C{A.index(r['alpha'])}"
        dev = r["seed"] in split["dev_seeds"]
        y = (1 if r["recovered_after"] is not None else 0) + 0.06 * (A.index(r["alpha"]) - (len(A) - 1) / 2)
        axs[0].scatter([r["predictor"]], [y], s=30, facecolors=c if dev else "none", edgecolors=c)
    handles = [Line2D([], [], color=f"C{i}", marker="o", ls="none") for i in range(len(A))]
    labels = [f"switch to {a:g}" for a in A]
    if split["threshold"] is not None:
        axs[0].axvline(split["threshold"], color="k", ls="--", lw=0.8)
        handles.append(Line2D([], [], color="k", ls="--", lw=0.8))
        labels.append(f"threshold at {split['alpha']:g}")
    if split["pooled"]["threshold"] is not None:
        axs[0].axvline(split["pooled"]["threshold"], color="k", ls="-.", lw=0.8)
        handles.append(Line2D([], [], color="k", ls="-.", lw=0.8))
        labels.append("threshold, pooled")
    axs[0].legend(handles, labels, fontsize=7)
    axs[0].set_yticks([0, 1], ["not recovered", "recovered"])
    axs[0].set_ylim(-0.5, 1.5)
    axs[0].set_xscale("log")
    axs[0].set_xlabel("predictor: median Q/K gradient right after the switch")
    a_h = h5_alpha(p)
    for r in (r for r in rows if r["alpha"] == a_h):
        t = censored(r["recovered_after"], p.branch_steps)
        axs[1].scatter(
            [r["predictor"]],
            [t],
            marker="o" if r["recovered_after"] is not None else "x",
            color=f"C{A.index(a_h)}",
            s=30,
        )
    axs[1].set_xscale("log")
    axs[1].set_xlabel(f"predictor after the switch to {a_h:g}")
    axs[1].set_ylabel("steps to recovery (x: none)")
    fig.tight_layout()
    return fig


def fig_weight_trace(p, trace: dict):
    """Through each driver: the last block's token srank (top) and the weights' stable rank per kind (median
    over blocks; bottom), against the step; the shaded band is the alpha ramp."""
    import matplotlib.pyplot as plt

    seeds = list(trace)
    fig, axs = plt.subplots(2, len(seeds), figsize=(4.6 * len(seeds), 4.6), sharex=True, squeeze=False)
    for j, s in enumerate(seeds):
        t = trace[s]
        for ax in axs[:, j]:
            ax.axvspan(p.ramp_start, p.ramp_end, color="0.92")
        axs[0, j].plot(t["step"], t["token_srank"], "k-", lw=1)
        axs[0, j].axhline(p.threshold, color="gray", lw=0.6)
        axs[0, j].set_title(f"seed {s}", fontsize=9)
        for i, k in enumerate(("query", "key", "value", "mlp_in", "mlp_out")):
            axs[1, j].plot(t["step"], t[k], color=f"C{i}", lw=1, label=k)
        axs[1, j].set_xlabel("step")
    axs[0, 0].set_ylabel("token srank, last block")
    axs[1, 0].set_ylabel("weight stable rank")
    axs[1, 0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return fig


# -- what the chapter records, judges and shows: one function per section -----------------------------------
WEIGHT_KINDS = ("query", "key", "value", "mlp_in", "mlp_out")


def _fmt_list(xs) -> str:
    """A glued list of numbers or short words, comma-separated."""
    return ", ".join(map(str, xs))


def record_events(ch, p, events: list[dict]) -> None:
    """Record the number of settled collapses among the seeds (an error when there is none: nothing to
    trace) and glue the number of seeds."""
    if not events:
        raise RuntimeError(
            "no driver settled into a collapse: nothing to trace (try more seeds or a lower alpha_min)"
        )
    ch.value("events", len(events), note="settled collapses among the seeds; trained networks")
    ch.glue("n_seeds", len(p.seeds))


def record_block_grads(ch, p, events: list[dict], grads: dict) -> dict:
    """Record Figure 2: the per-block gradient norms (collapsed task Q/K, hinge, healthy task Q/K), the
    medians over blocks and events of the Q/K task gradient, collapsed and healthy, and their ratio, the
    blocks with a numerically zero Q/K gradient, and the first and last block's hinge and task gradients.
    Returns those summaries, which the reopening factor and the H3 verdict read."""
    col = {s: g["collapsed"] for s, g in grads.items()}
    hea = {s: g["healthy"] for s, g in grads.items()}
    ch.value(
        "task_qk_collapsed",
        {s: c["task_qk"] for s, c in col.items()},
        rtol=1.0,
        glue=False,
        note="per-block gradient norms of trained float32 networks: order of magnitude only",
    )
    ch.value(
        "hinge_attn_collapsed",
        {s: c["term_attn"] for s, c in col.items()},
        rtol=1.0,
        glue=False,
        note="per-block hinge gradient norms; order of magnitude only",
    )
    ch.value(
        "task_qk_healthy",
        {s: h["task_qk"] for s, h in hea.items()},
        rtol=1.0,
        glue=False,
        note="per-block gradient norms of the healthy networks; order of magnitude only",
    )
    qk_col = float(np.median([med(c["task_qk"]) for c in col.values()]))
    qk_hea = float(np.median([med(h["task_qk"]) for h in hea.values()]))
    qk_ratio = qk_col / qk_hea
    n_zero = int(sum(sum(c["task_qk_zero"]) for c in col.values()))
    hinge_first = float(np.median([c["term_attn"][0] for c in col.values()]))
    hinge_last = float(np.median([c["term_attn"][-1] for c in col.values()]))
    task_first = float(np.median([c["task_attn"][0] for c in col.values()]))
    task_last = float(np.median([c["task_attn"][-1] for c in col.values()]))
    ch.value(
        "qk_collapsed_median", qk_col, rtol=1.0, note="median over blocks, then events; order of magnitude"
    )
    ch.value(
        "qk_healthy_median", qk_hea, rtol=1.0, note="median over blocks, then seeds; order of magnitude"
    )
    ch.value("qk_ratio", qk_ratio, rtol=1.0, note="collapsed / healthy; order of magnitude")
    ch.value(
        "qk_numerically_zero",
        n_zero,
        atol=12,
        note="blocks (over all events) with a numerically zero Q/K gradient",
    )
    ch.value("hinge_first", hinge_first, rtol=1.0, note="hinge gradient, first block (median over events)")
    ch.value("hinge_last", hinge_last, rtol=1.0, note="hinge gradient, last block")
    ch.value("task_first", task_first, rtol=1.0, note="task gradient on attention input, first block")
    ch.value("task_last", task_last, rtol=1.0, note="task gradient on attention input, last block")
    ch.glue("n_blocks_total", p.depth * len(events))
    return {
        "qk_ratio": qk_ratio,
        "qk_collapsed": qk_col,
        "qk_healthy": qk_hea,
        "numerically_zero_blocks": n_zero,
        "hinge_first": hinge_first,
        "hinge_last": hinge_last,
    }


def record_reopening(ch, p, grads: dict, after_grads: dict, at_collapse: dict) -> dict:
    """Record the median Q/K gradient at each probe alpha right after the switch and after ``after_steps``
    updates there, and the reopening factor (first probe alpha against the collapse); glue the first probe
    alpha's gradients and whether the later one is below a tenth of the reopened one (``"below"`` or
    ``"still above"``). Returns the gradients by alpha (``reopen``, ``later``) and ``reopen_factor``, which
    the table and the H4 verdict read."""
    reopen = {
        a: float(np.median([med(g["switched"][a]["task_qk"]) for g in grads.values()]))
        for a in p.probe_alphas
    }
    later = {
        a: float(np.median([med(after_grads[s][a]["task_qk"]) for s in after_grads])) for a in p.probe_alphas
    }
    ch.value(
        "qk_after_switch",
        {str(a): v for a, v in reopen.items()},
        rtol=1.0,
        glue=False,
        note="median Q/K gradient right after the switch; order of magnitude",
    )
    ch.value(
        "qk_after_updates",
        {str(a): v for a, v in later.items()},
        rtol=1.0,
        glue=False,
        note="median Q/K gradient after after_steps updates at that alpha; order of magnitude",
    )
    a0 = p.probe_alphas[0]
    reopen_factor = reopen[a0] / at_collapse["qk_collapsed"]
    ch.value(
        "reopen_factor",
        reopen_factor,
        rtol=1.0,
        note="median Q/K gradient at the first probe alpha / at the collapse",
    )
    ch.glue("a0", a0)
    ch.glue("qk_a0", reopen[a0])
    ch.glue("qk_a0_later", later[a0])
    ch.glue("after_steps_g", p.after_steps)
    ch.glue("path_after", "below" if later[a0] < reopen[a0] / 10 else "still above")
    return {"reopen": reopen, "later": later, "reopen_factor": reopen_factor}


def table_reopening(p, at_collapse: dict, reopening: dict) -> str:
    """HTML table: the median Q/K gradient at the collapse and at each probe alpha, before any update and
    after ``after_steps`` updates."""
    reopen, later = reopening["reopen"], reopening["later"]
    return rp.html_table(
        ["alpha", "median Q/K gradient, before any update", f"after {p.after_steps} updates"],
        [[f"{p.alpha_min} (collapsed)", f"{at_collapse['qk_collapsed']:.2e}", "–"]]
        + [[a, f"{reopen[a]:.2e}", f"{later[a]:.2e}"] for a in p.probe_alphas],
    )


def record_switches(ch, p, sw: dict) -> None:
    """Record the switches held at each alpha: events recovered, steps to recovery, final srank and loss
    gap to the healthy network, per event."""
    ch.value(
        "switch_recovered",
        {str(a): sw[a]["recovered"] for a in p.switch_alphas},
        note="events recovered per held alpha (integers); trained networks",
    )
    ch.value(
        "switch_steps",
        {str(a): [r["recovered_after"] for r in sw[a]["rows"]] for a in p.switch_alphas},
        glue=False,
        atol=100,
        note="steps to recovery (None: not within the branch); trained",
    )
    ch.value(
        "switch_final_srank",
        {str(a): [r["final_srank"] for r in sw[a]["rows"]] for a in p.switch_alphas},
        glue=False,
        rtol=0.3,
        note="last-block srank at the end of each switch branch; trained",
    )
    ch.value(
        "switch_loss_gap",
        {str(a): [r["loss_gap"] for r in sw[a]["rows"]] for a in p.switch_alphas},
        glue=False,
        atol=0.15,
        note="nats, probe loss minus healthy at the same step; trained",
    )


def record_hysteresis(ch, p, events: list[dict], drivers: dict, hy: list[dict]) -> None:
    """Record the alpha of collapse and of recovery on the reversed ramp per event, and the driver's srank
    at the start of the ramp; glue those alphas and their ratios as lists ("not recovered", "not measured":
    no recovery; "unbounded": collapse first crossed at alpha = 0), and whether the srank before the ramp
    was ``"well above"`` the threshold (by more than 0.5) or ``"close to"`` it."""
    ch.value(
        "alpha_at_collapse",
        [h["alpha_collapse"] for h in hy],
        atol=0.1,
        note="alpha at the driver's first crossing of the threshold; trained",
    )
    ch.value(
        "alpha_at_recovery",
        [h["alpha_recover"] for h in hy],
        atol=0.1,
        note="alpha at the reversed ramp's recovery (None: not within the branch); trained",
    )
    ch.glue("a_col", _fmt_list(f"{h['alpha_collapse']:.3g}" for h in hy))
    ch.glue(
        "a_rec",
        _fmt_list(
            "not recovered" if h["alpha_recover"] is None else f"{h['alpha_recover']:.3g}" for h in hy
        ),
    )
    ch.glue("branch_steps_g", p.branch_steps)
    ch.glue(
        "hyst_ratio_text",
        _fmt_list(
            "not measured"
            if h["ratio"] is None
            else "unbounded"
            if h["ratio"] == float("inf")
            else f"{h['ratio']:.3g}"
            for h in hy
        ),
    )
    sbr = float(np.median([rp.median_around(drivers[e["seed"]]["hist"], p.ramp_start) for e in events]))
    ch.value(
        "srank_before_ramp",
        sbr,
        rtol=0.3,
        note="driver's last-block srank (10-measurement median, median over events) at the start of the "
        "ramp; trained",
    )
    ch.glue("before_ramp", "well above" if sbr > p.threshold + 0.5 else "close to")


def table_switches(p, sw: dict) -> str:
    """HTML table: per held alpha, events recovered, median steps to recovery, final srank and loss gap,
    beside the paper's recovered counts and median steps."""
    paper_recovered = {0.1: "2/8", 0.3: "7/8", 0.6: "8/8"}
    paper_steps = {0.1: 94, 0.3: 71, 0.6: 50}
    return rp.html_table(
        [
            "alpha held",
            "recovered / events",
            "median steps to recovery",
            "final srank (median)",
            "loss minus healthy (median, nats)",
            "paper recovered",
            "paper median steps",
        ],
        [
            [
                a,
                f"{sw[a]['recovered']} / {sw[a]['events']}",
                "–" if sw[a]["median_steps"] is None else sw[a]["median_steps"],
                f"{np.median([r['final_srank'] for r in sw[a]['rows']]):.2f}",
                f"{np.median([r['loss_gap'] for r in sw[a]['rows']]):.3f}",
                paper_recovered.get(a, "–"),
                paper_steps.get(a, "–"),
            ]
            for a in p.switch_alphas
        ],
    )


def record_delays(ch, p, rows: list[dict], eff: dict) -> None:
    """Record the delayed switches: steps to recovery and srank before each switch, the per-event change of
    the recovery time after the longest delay and the Spearman correlation of delay and recovery time; glue
    the delays and delayed alphas, and per event (as lists) the steps to recovery undelayed and after the
    longest delay ("no recovery": none within the branch)."""
    ch.value(
        "delayed_recovered_after",
        {f"seed {r['seed']} alpha {r['alpha']} delay {r['delay']}": r["recovered_after"] for r in rows},
        atol=100,
        glue=False,
        note="steps to recovery after each (delayed) switch; None: not within the branch; trained",
    )
    ch.value(
        "delayed_srank_at_switch",
        [r["srank_at_switch"] for r in rows],
        rtol=0.3,
        glue=False,
        note="last-block srank just before each switch (still collapsed?); trained",
    )
    ch.value(
        "delay_diff",
        {str(e["seed"]): e["diff"] for e in eff["events"]},
        atol=100,
        glue=False,
        note="steps to recovery after the longest delay minus undelayed (no recovery counted as branch + "
        "10); trained",
    )
    ch.value(
        "delay_spearman", eff["spearman"], atol=0.5, note="delay vs censored recovery time; None: < 4 points"
    )
    ch.glue("delays_text", _fmt_list(p.delays))
    ch.glue("delay_alphas_text", _fmt_list(f"{a:g}" for a in p.delay_alphas))
    ch.glue("h5_alpha", eff["alpha"])
    ch.glue("max_delay", max(p.delays))
    ch.glue("delay_seeds", _fmt_list(e["seed"] for e in eff["events"]))
    ch.glue("delay_t0", _fmt_list("no recovery" if e["t0"] is None else e["t0"] for e in eff["events"]))
    ch.glue(
        "delay_tmax", _fmt_list("no recovery" if e["tmax"] is None else e["tmax"] for e in eff["events"])
    )
    ch.glue("delay_spearman_text", "not computed" if eff["spearman"] is None else f"{eff['spearman']:.2f}")


def table_delayed(rows: list[dict]) -> str:
    """HTML table: one row per (event, alpha, delay) with the srank before the switch, the predictor, steps
    to recovery, final srank and loss gap to the healthy network."""
    return rp.html_table(
        [
            "seed",
            "alpha",
            "further collapsed steps",
            "srank before the switch",
            "predictor (median Q/K gradient)",
            "steps to recovery",
            "final srank",
            "loss minus healthy (nats)",
        ],
        [
            [
                r["seed"],
                r["alpha"],
                r["delay"],
                f"{r['srank_at_switch']:.2f}",
                f"{r['predictor']:.2e}",
                "–" if r["recovered_after"] is None else r["recovered_after"],
                f"{r['final_srank']:.2f}",
                "past the healthy run" if r["loss_gap"] is None else f"{r['loss_gap']:.3f}",
            ]
            for r in rows
        ],
    )


def record_predictor(ch, rows: list[dict], split: dict) -> None:
    """Record the predictor per switch, the thresholds fitted on the development seeds (at the lowest delayed
    alpha and pooled) with their held-out accuracy, and the predictor's Spearman correlations with recovery
    and recovery time; glue those correlations (``"not computed"`` where too few points)."""
    ch.value(
        "predictor_values",
        [r["predictor"] for r in rows],
        rtol=1.0,
        glue=False,
        note="median Q/K gradient right after each switch; order of magnitude",
    )
    ch.value(
        "predictor_threshold",
        split["threshold"],
        rtol=1.0,
        note="fitted on the development seeds; None: one outcome only there; order of magnitude",
    )
    ch.value(
        "predictor_test_accuracy",
        split["test_accuracy"],
        atol=0.34,
        note="held-out accuracy of the frozen threshold; None: nothing to test",
    )
    ch.value(
        "predictor_spearman_recovery",
        split["spearman_recovery"],
        atol=0.5,
        note="predictor vs recovered (lowest delayed alpha); None: < 4 points or one outcome",
    )
    ch.value(
        "predictor_spearman_time",
        split["spearman_time"],
        atol=0.5,
        note="predictor vs steps to recovery among recovered switches; None: < 4 points",
    )
    pool = split["pooled"]
    ch.value(
        "predictor_pooled_threshold",
        pool["threshold"],
        rtol=1.0,
        note="pooled over switch scales, fitted on the development seeds; None: one outcome only; "
        "order of magnitude",
    )
    ch.value(
        "predictor_pooled_test_accuracy",
        pool["test_accuracy"],
        atol=0.34,
        note="held-out accuracy of the frozen pooled threshold; None: nothing to test",
    )
    for key in ("spearman_recovery", "spearman_time"):
        ch.glue(f"pred_{key}", "not computed" if split[key] is None else f"{split[key]:.2f}")


def table_predictor(split: dict) -> str:
    """HTML table: the registered test at the lowest delayed alpha and the pooled one, each with the
    threshold fitted on the development seeds (none where they showed one outcome), its development
    accuracy, and the frozen threshold's accuracy on the held-out seeds."""
    dev, test = _fmt_list(split["dev_seeds"]), _fmt_list(split["test_seeds"])

    def row(label, s):
        if s["threshold"] is None:
            return [label, dev, "none (one outcome only)", "–", test, "nothing tested"]
        held = (
            "no held-out events"
            if s["test_accuracy"] is None
            else f"{s['test_accuracy']:.2f} of {s['test_points']} switches"
        )
        return [
            label,
            dev,
            f"{s['threshold']:.2e}",
            f"{s['dev_accuracy']:.2f} of {s['dev_points']} switches",
            test,
            held,
        ]

    return rp.html_table(
        [
            "switches",
            "development seeds",
            "threshold",
            "development accuracy",
            "held-out seeds",
            "held-out accuracy (frozen)",
        ],
        [
            row(f"alpha = {split['alpha']:g} (registered)", split),
            row("every alpha, pooled", split["pooled"]),
        ],
    )


def record_weight_ranks(ch, wr: dict) -> dict:
    """Record the weight-matrix and token stable ranks per seed and state, and their median ratios (healthy
    over initial weights, collapsed over healthy weights, collapsed over healthy tokens); returns the ratios,
    which the W1 verdict reads."""
    ch.value(
        "weight_srank",
        {str(s): v for s, v in wr.items()},
        rtol=0.3,
        glue=False,
        note="weight-matrix stable ranks (median over blocks) and token srank; trained",
    )
    kinds = WEIGHT_KINDS
    w_heal_vs_init = float(np.median([wr[s]["healthy"][k] / wr[s]["init"][k] for s in wr for k in kinds]))
    w_col_vs_heal = float(
        np.median([wr[s]["collapsed"][k] / wr[s]["healthy"][k] for s in wr for k in kinds])
    )
    t_col_vs_heal = float(
        np.median([wr[s]["collapsed"]["token_srank"] / wr[s]["healthy"]["token_srank"] for s in wr])
    )
    ch.value(
        "w_healthy_vs_init", w_heal_vs_init, rtol=0.3, note="median ratio of weight stable ranks; trained"
    )
    ch.value(
        "w_collapsed_vs_healthy",
        w_col_vs_heal,
        rtol=0.3,
        note="median ratio of weight stable ranks; trained",
    )
    ch.value(
        "token_collapsed_vs_healthy",
        t_col_vs_heal,
        rtol=0.3,
        note="ratio of last-block token sranks; trained",
    )
    return {
        "w_healthy_vs_init": w_heal_vs_init,
        "w_collapsed_vs_healthy": w_col_vs_heal,
        "token_collapsed_vs_healthy": t_col_vs_heal,
    }


def table_weight_ranks(wr: dict) -> str:
    """HTML table: per seed and state (init, collapsed, healthy), each weight kind's stable rank and the last
    block's token srank."""
    kinds = WEIGHT_KINDS
    return rp.html_table(
        ["seed", "state"] + list(kinds) + ["token srank (last block)"],
        [
            [s, st] + [f"{wr[s][st][k]:.2f}" for k in kinds] + [f"{wr[s][st]['token_srank']:.2f}"]
            for s in wr
            for st in ("init", "collapsed", "healthy")
        ],
    )


def record_trace(ch, p, ts: dict) -> dict:
    """Record the token and weight stable rank ratios from the ramp's start to the driver's end; returns the
    two medians, which the W1 verdict reads."""
    ch.glue("trace_every_g", p.trace_every)
    tok_ramp = float(np.median([t["token_ratio"] for t in ts.values()]))
    w_ramp = float(np.median([v for t in ts.values() for v in t["weight_ratio"].values()]))
    ch.value(
        "trace_token_ratio",
        tok_ramp,
        rtol=0.3,
        note="token srank at the driver's end / at the ramp's start (median over events); trained",
    )
    ch.value(
        "trace_weight_ratio",
        w_ramp,
        rtol=0.3,
        note="weight stable rank at the driver's end / at the ramp's start (median over kinds and events); "
        "trained",
    )
    ch.value(
        "trace_weight_ratio_by_kind",
        {str(s): t["weight_ratio"] for s, t in ts.items()},
        rtol=0.3,
        glue=False,
        note="per weight kind; trained",
    )
    return {"trace_token_ratio": tok_ramp, "trace_weight_ratio": w_ramp}


# -- verdicts ----------------------------------------------------------------------------------------------
def judge_h3(ch, at_collapse: dict) -> str:
    """H3: the task gradient no longer reaches Q/K; the hinge's gradient fades before the collapsing (late)
    blocks. Reads :func:`record_block_grads`' summaries."""
    qk_ratio = at_collapse["qk_ratio"]
    hinge_first, hinge_last = at_collapse["hinge_first"], at_collapse["hinge_last"]
    hinge_fade = hinge_first / max(hinge_last, 1e-300)
    if qk_ratio < 0.01 and hinge_fade >= 10:
        v = "supported"
    elif qk_ratio >= 1 / 3 or hinge_fade < 1:
        v = "refuted"
    else:
        v = "inconclusive"
    return ch.verdict(
        "H3",
        v,
        claim="the task gradient no longer reaches query and key; the term's gradient fades before "
        "the collapsing blocks",
        rule="supported if the collapsed networks' median Q/K task gradient is below 1/100 of the healthy "
        "one's and the hinge's gradient is at least 10x larger in the first block than in the last; refuted "
        "if the Q/K ratio is at least 1/3 or the hinge's gradient grows towards the last block; else "
        "inconclusive",
        evidence={
            "qk_ratio": qk_ratio,
            "qk_collapsed": at_collapse["qk_collapsed"],
            "qk_healthy": at_collapse["qk_healthy"],
            "numerically_zero_blocks": at_collapse["numerically_zero_blocks"],
            "hinge_first": hinge_first,
            "hinge_last": hinge_last,
        },
    )


def judge_h4(ch, p, events: list[dict], reopening: dict, hy: list[dict], sw: dict) -> str:
    """H4: the switch reopens the path at once; rank recovers only far above the collapse scale. Reads the
    reopening factor, the hysteresis ratios and the held switches' recoveries."""
    reopen_factor = reopening["reopen_factor"]
    ratios = [h["ratio"] for h in hy if h["ratio"] is not None]
    if reopen_factor < 2:
        v = "refuted"
    elif ratios and min(ratios) < 1.5:
        v = "refuted"
    elif reopen_factor >= 5 and len(ratios) * 2 >= len(events) and min(ratios) >= 3:
        v = "supported"
    else:
        v = "inconclusive"
    return ch.verdict(
        "H4",
        v,
        claim="restoring the skip reopens the path at once; rank recovers only far above the collapse scale",
        rule="supported if switching to the first probe alpha raises the median Q/K gradient at least 5x "
        "before any update and the reversed ramp recovers in at least half the events, every one at an "
        "alpha at least 3x the alpha of collapse; refuted if the rise is under 2x or some recovery happens "
        "below 1.5x the alpha of collapse; else inconclusive (e.g. no recovery within the branch)",
        evidence={
            "reopen_factor": reopen_factor,
            "alpha_collapse": [h["alpha_collapse"] for h in hy],
            "alpha_recover": [h["alpha_recover"] for h in hy],
            "recovered_by_held_alpha": {str(a): sw[a]["recovered"] for a in p.switch_alphas},
        },
    )


def judge_h7(ch, p, sw: dict, rows: list[dict]) -> str:
    """H7: the loss after recovery stays above a healthy network's, over the held and delayed switches that
    recovered."""
    held = [
        r["loss_gap"] for a in p.switch_alphas for r in sw[a]["rows"] if r["recovered_after"] is not None
    ]
    later = [
        r["loss_gap"]
        for r in rows
        if r["delay"] > 0 and r["recovered_after"] is not None and r["loss_gap"] is not None
    ]
    gaps = held + later
    if not gaps:
        v = "inconclusive"
    elif float(np.median(gaps)) > 0.05:
        v = "supported"
    elif float(np.median(gaps)) < 0.01:
        v = "refuted"
    else:
        v = "inconclusive"
    return ch.verdict(
        "H7",
        v,
        claim="the loss stays above a healthy network's after the rank recovers",
        rule="over the switch branches (held and delayed) that recovered: supported if the median final "
        "probe-loss gap to the healthy network at the same step exceeds 0.05 nats, refuted if below 0.01; "
        "inconclusive if none recovered",
        evidence={
            "recovered_gaps": gaps,
            "all_gaps": {str(a): [r["loss_gap"] for r in sw[a]["rows"]] for a in p.switch_alphas},
        },
    )


def judge_h5(ch, eff: dict) -> str:
    """H5: the longer a network stays collapsed, the slower or rarer its recovery (the rule is
    :func:`h5_verdict` on :func:`delay_effect`)."""
    return ch.verdict(
        "H5",
        h5_verdict(eff),
        claim="the longer a network stays collapsed, the slower or rarer its recovery",
        rule=f"at alpha = {eff['alpha']:g}, per event: steps to recovery after the longest delay minus "
        "undelayed (no recovery = branch length + 10); supported if no event recovers 20 or more steps "
        "faster after the delay and at least half recover 20 or more steps slower (or not at all); refuted "
        "if at least half recover 20 or more steps faster; inconclusive otherwise or if no switch at that "
        "alpha recovered",
        evidence={"events": eff["events"], "spearman_delay_time": eff["spearman"]},
    )


def judge_w1(ch, weights: dict, trace_ratios: dict) -> str:
    """W1: weight-matrix rank and token rank do not move together. Reads :func:`record_weight_ranks`' ratios
    and :func:`record_trace`'s."""
    w_heal_vs_init = weights["w_healthy_vs_init"]
    w_col_vs_heal = weights["w_collapsed_vs_healthy"]
    t_col_vs_heal = weights["token_collapsed_vs_healthy"]
    if w_heal_vs_init < 0.7 and t_col_vs_heal < 0.7 and 0.5 <= w_col_vs_heal <= 2.0:
        v = "supported"
    elif t_col_vs_heal < 0.7 and w_col_vs_heal < 0.5:
        v = "refuted"
    else:
        v = "inconclusive"
    return ch.verdict(
        "W1",
        v,
        claim="weight-matrix rank collapse and token rank collapse are different phenomena",
        rule="supported if training lowers the healthy network's weight stable rank below 0.7 of initial "
        "(median over matrices) while the collapsed network's token srank is below 0.7 of the healthy one's "
        "but its weight stable rank stays within 0.5-2x the healthy one's; refuted if the collapsed "
        "network's weight stable rank is also below 0.5 of the healthy one's; else inconclusive",
        evidence={
            "w_healthy_vs_init": w_heal_vs_init,
            "w_collapsed_vs_healthy": w_col_vs_heal,
            "token_collapsed_vs_healthy": t_col_vs_heal,
            "trace_token_ratio": trace_ratios["trace_token_ratio"],
            "trace_weight_ratio": trace_ratios["trace_weight_ratio"],
        },
    )
