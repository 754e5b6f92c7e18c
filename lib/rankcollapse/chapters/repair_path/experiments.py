"""Chapter `repair-path`, experiments: what is computed from the parameters and the study's spec
(``study``, :func:`rankcollapse.book.repair_params.study_spec`), as plain data. Per-block gradients at each
saved collapse (task loss, hinge, healthy network) and after the skip scale is switched back; the switches
held at several alpha (:func:`rankcollapse.lm.training.branch` runs with a constant alpha), their controls,
the slow ramp and the reversed-ramp hysteresis; the delayed switches, the paper's predictor and its split;
the weight ranks and the traced drivers. The saved collapses and healthy networks come from
:func:`rankcollapse.repair.drivers.main_runs`.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from fractions import Fraction

import numpy as np
import torch

from ...core.stats import spearman
from ...lm import gradpath as gp
from ...lm import model as lm
from ...lm import training as tr
from ...repair.controls import (
    control_chain_job,
    control_collapsed,
    control_summary,
    held_control_job,
    prefix_path,
)
from ...repair.drivers import driver_job, run_spec
from ...repair.recovery import at_step, last_srank, median_around, q_of, recovery
from ...repair.spec import StudySpec
from ...repair.stages import branch_path, run_stage
from ...repair.treatments import branch_spec


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


def switch_spec(study: StudySpec, seed: int, start: int, alpha: float) -> tr.RunSpec:
    base = run_spec(study, seed)
    return tr.RunSpec(**{**base.__dict__, "alpha_knots": ((start, float(alpha)),)})


def untreated_spec(study: StudySpec, e) -> tr.RunSpec:
    return branch_spec(study, e["seed"], e["start"], "untreated", {}, 0.0)


def delay_segments(study: StudySpec, e, d: int, a: float) -> list:
    """The chain of a switch to ``a`` after ``d`` further collapsed steps: the untreated branch for ``d``
    steps (one trajectory with the untreated branch of ``repair-treatments`` and every other delay: a held
    branch continues the longest saved shorter one and saves its state every 100 steps), then the switch
    held for ``branch_steps``."""
    return [
        (untreated_spec(study, e), d),
        (switch_spec(study, e["seed"], e["start"] + d, a), study.branch.steps),
    ]


def control_steps(p, e, alpha: float) -> int:
    """How far H7's control at ``alpha`` for event ``e`` runs: as far as the switches at ``alpha`` reach (the
    held one, and the delayed ones when ``alpha`` is a delay alpha)."""
    reach = p.branch_steps + (max(p.delays) if alpha in p.delay_alphas else 0)
    return e["start"] + reach


def run_switches(
    p, study: StudySpec, events: list[dict], log=print, healthy: dict | None = None
) -> tuple[dict, dict, dict, dict, dict]:
    """Everything trained from the saved collapses, in one parallel pool: switches held at each switch alpha
    (``branch_steps``), at each probe alpha for ``after_steps`` (gradients read at their end), the reversed
    ramp of ``repair-treatments`` and the delayed switches (chains: untreated for each delay, then the
    switch); and the controls: per event seed, H3's driver of depth ``control_depth`` through the same ramp
    to the same alpha_min, and H7's never-collapsed drivers held at each ``h7_control_alphas`` value
    (:func:`rankcollapse.repair.controls.held_control_job`, as far as :func:`control_steps`; at alpha = 1
    that control is the healthy network, taken from ``healthy``); and the slow reversed ramp
    (:func:`slow_ramp_spec`, ``slow_ramp_steps``; none when ``slow_ramp_factor`` is 1) and the reversed
    ramp's control matched in training time (:func:`ramp_control_spec`). Returns (hold, after, rev, slow,
    delayed, controls) with ``controls = {"h3": {seed: summary}, "h7": {seed: {alpha: summary}}, "ramp":
    {seed: summary}}`` and ``slow`` empty without a slow ramp."""
    jobs, labels, tags = [], [], []
    for e in events:
        for d in p.delays:  # shortest first: each longer delay continues the untreated branch of the last
            for a in p.delay_alphas:
                jobs.append(("chain", {"parent": e["collapse"], "segments": delay_segments(study, e, d, a)}))
                labels.append(f"seed {e['seed']} switch to {a} after {d} collapsed steps")
                tags.append(("delay", e["seed"], (d, a)))
    for e in events:
        s = e["seed"]
        jobs.append(("driver", driver_job(study, s, depth=p.control_depth)))
        labels.append(f"seed {s} control: depth {p.control_depth} to alpha {p.alpha_min:g}")
        tags.append(("h3", s, None))
        for a in p.h7_control_alphas:
            if a == 1.0 and healthy is not None:  # ramped "down" to 1: the healthy network itself
                continue
            if a == ramp_control_alpha(p):  # the reversed ramp's control follows it until ramp_split
                jobs.append(
                    ("chain", control_chain_job(study, s, a, ramp_split(p, e), control_steps(p, e, a)))
                )
            else:
                jobs.append(("driver", held_control_job(study, s, a, control_steps(p, e, a))))
            labels.append(f"seed {s} control: ramp to alpha {a:g} and held")
            tags.append(("h7", s, a))
    for e in events:
        # the short runs first: a held switch at the same alpha then continues one (same trajectory)
        for a in p.probe_alphas:
            jobs.append(
                (
                    "branch",
                    {
                        "parent": e["collapse"],
                        "spec": switch_spec(study, e["seed"], e["start"], a),
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
                        "spec": switch_spec(study, e["seed"], e["start"], a),
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
                    "spec": branch_spec(study, e["seed"], e["start"], "reversed-ramp", {}, 0.0),
                    "steps": p.branch_steps,
                },
            )
        )
        labels.append(f"seed {e['seed']} reversed ramp")
        tags.append(("rev", e["seed"], None))
        if p.slow_ramp_factor > 1:
            jobs.append(
                (
                    "branch",
                    {
                        "parent": e["collapse"],
                        "spec": slow_ramp_spec(p, study, e["seed"], e["start"]),
                        "steps": p.slow_ramp_steps,
                    },
                )
            )
            labels.append(f"seed {e['seed']} reversed ramp, {p.slow_ramp_factor}x slower")
            tags.append(("slow", e["seed"], None))
        if ramp_control_alpha(p) < 1.0:
            # H7's control at the same alpha until ramp_split (its saved state there), then ramped back up
            spec = ramp_control_spec(p, study, e["seed"], e["start"])
            a = ramp_control_alpha(p)
            end = e["start"] + p.branch_steps
            jobs.append(("chain", control_chain_job(study, e["seed"], a, ramp_split(p, e), end, spec)))
            labels.append(f"seed {e['seed']} control: down to {ramp_control_alpha(p):g} and back up")
            tags.append(("rampctl", e["seed"], None))
    res = run_stage(study, jobs, log, labels)
    hold, after, rev, slow, delayed = {}, {}, {}, {}, {}
    controls = {"h3": {}, "h7": {}, "ramp": {}}
    for (kind, s, a), (jk, job), o in zip(tags, jobs, res):
        if jk == "chain" and kind in ("h7", "rampctl"):  # a control as two legs: summarised as its driver
            o = control_summary(study.driver, job, o)
        if kind == "hold":
            hold.setdefault(s, {})[a] = o
        elif kind == "after":
            after.setdefault(s, {})[a] = o
        elif kind == "delay":
            delayed.setdefault(s, {})[a] = o
        elif kind == "h3":
            controls["h3"][s] = o
        elif kind == "h7":
            controls["h7"].setdefault(s, {})[a] = o
        elif kind == "slow":
            slow[s] = o
        elif kind == "rampctl":
            controls["ramp"][s] = o
        else:
            rev[s] = o
    if healthy is not None and 1.0 in p.h7_control_alphas:
        for e in events:
            controls["h7"].setdefault(e["seed"], {})[1.0] = healthy[e["seed"]]
    return hold, after, rev, slow, delayed, controls


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


def reopen_control_rows(
    p, study: StudySpec, events, drivers: dict, healthy: dict, controls: dict
) -> list[dict]:
    """H4's control (issue #42): the networks driven through the same ramp to the same alpha_min that did not
    collapse, switched to the first probe alpha as the collapsed ones are: per event seed H3's shallower
    control (``kind = "shallower"``, depth ``control_depth``) and each same-depth driver that did not settle
    (``"same depth"``); beside them the final healthy network of each event's seed (``"healthy"``, trained
    at alpha 1). Per network (its final state): the median-over-blocks Q/K task gradient on its seed's probe
    batch at alpha_min (``qk_min``) and at the first probe alpha before any update (``qk_switched``), and
    whether it collapsed (:func:`rankcollapse.repair.controls.control_collapsed`; a healthy network: no).

    The healthy networks are shown, not the control: issue #42 proposed them first, but they never sat at
    alpha_min, where a trained network of the driver's depth closes much of its own path (smoke, alpha 0:
    median Q/K gradient 4.6e-4 and 1.9e-3 against 0.028 and 0.025 at alpha 1, seeds 0 and 1), so the switch
    raised theirs 141-fold without any collapse."""
    a0 = p.probe_alphas[0]
    nets = [(e["seed"], "shallower", p.control_depth, controls["h3"][e["seed"]]) for e in events]
    nets += [
        (s, "same depth", p.depth, drivers[s]) for s in study.driver.seeds if drivers[s]["collapse"] is None
    ]
    nets += [(e["seed"], "healthy", p.depth, healthy[e["seed"]]) for e in events]
    rows = []
    for s, kind, depth, c in nets:
        x, y = _probe(p, s)
        m = tr.load_model(_final_path(c), p.alpha_min)
        qk = {a: med(gp.block_grad_norms(m, x, y, alpha=a)["task_qk"]) for a in (p.alpha_min, a0)}
        rows.append(
            {
                "seed": s,
                "kind": kind,
                "depth": depth,
                "collapsed": kind != "healthy" and control_collapsed(c, p.threshold),
                "qk_min": qk[p.alpha_min],
                "qk_switched": qk[a0],
            }
        )
    return rows


def control_gap(b: dict, control: dict | None) -> float | None:
    """A switch branch's final probe loss minus its never-collapsed control's at the same step (None: no
    control at that alpha, or the control does not reach that step)."""
    if control is None or b["step"] not in control["hist"]["m_step"]:
        return None
    return b["final_probe"]["loss"] - at_step(control["hist"], b["step"], "probe_loss")


def state_path(summary: dict):
    """The saved end state of a run's summary: a driver's (``dir``) or a chain's last branch (``key``)."""
    return _final_path(summary) if "dir" in summary else branch_path(summary)


def h7_null_rows(p, events, controls: dict, healthy: dict) -> list[dict]:
    """H7's null pairing (issue #42), with no collapse history: per control alpha and event seed ``s`` (in
    order), the never-collapsed control of the next event seed ``other`` (cyclically) at the same alpha, at
    its end (``step``), measured on seed ``s``'s probe batch in place of a recovered switch: its loss minus
    seed ``s``'s own control's at that step (``excess``; None where that control does not reach it) and minus
    seed ``s``'s healthy network's (``gap_healthy``; None past its end)."""
    h7, rows = controls["h7"], []
    seeds = [e["seed"] for e in events]
    for a in p.h7_control_alphas:
        have = [s for s in seeds if a in h7.get(s, {})]
        for i, s in enumerate(have):
            o = have[(i + 1) % len(have)]
            if o == s:
                continue
            c, oc = h7[s][a], h7[o][a]
            loss = tr.probe_measure(tr.load_model(state_path(oc), a), _probe(p, s), all_blocks=False)["loss"]
            t, hh = oc["step"], healthy[s]["hist"]
            rows.append(
                {
                    "seed": s,
                    "other": o,
                    "alpha": a,
                    "step": t,
                    "loss": loss,
                    "excess": loss - at_step(c["hist"], t, "probe_loss")
                    if t in c["hist"]["m_step"]
                    else None,
                    "gap_healthy": loss - at_step(hh, t, "probe_loss") if t in hh["m_step"] else None,
                }
            )
    return rows


def summarise_switches(p, events, hold, healthy, controls: dict | None = None) -> dict:
    """Per held alpha: per event, steps to recovery (None: not within the branch), final srank, the loss gap
    to the healthy network at the same step and, at the ``h7_control_alphas``, to the never-collapsed
    control held at the same alpha (``control_gap``; None elsewhere); the count recovered and the median
    steps."""
    h7 = (controls or {}).get("h7", {})
    out = {}
    for a in p.switch_alphas:
        rows = []
        for e in events:
            b = hold[e["seed"]][a]
            rec = recovery(b["hist"], e["start"], e["rec_threshold"], p.recover_window)
            gap = b["final_probe"]["loss"] - at_step(healthy[e["seed"]]["hist"], b["step"], "probe_loss")
            rows.append(
                {
                    "seed": e["seed"],
                    "recovered_after": rec,
                    "final_srank": statistics.median(last_srank(b["hist"])[-p.recover_window :]),
                    "loss_gap": gap,
                    "control_gap": control_gap(b, h7.get(e["seed"], {}).get(a)),
                    "step": b["step"],
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


def slow_ramp_spec(p, study: StudySpec, seed: int, start: int) -> tr.RunSpec:
    """The slow reversed ramp from the saved collapse of ``seed`` at step ``start``: alpha from alpha_min
    back to 1 over ``slow_ramp_factor`` times the driver's ramp length (:func:`slow_ramp_rate` per step)."""
    base = run_spec(study, seed)
    length = p.slow_ramp_factor * (p.ramp_end - p.ramp_start)
    return tr.RunSpec(**{**base.__dict__, "alpha_knots": ((start, p.alpha_min), (start + length, 1.0))})


def slow_ramp_rate(p) -> float:
    """The slow reversed ramp's change of alpha per step."""
    return ramp_rate(p) / p.slow_ramp_factor


def ramp_control_alpha(p) -> float:
    """The level the reversed ramp's control goes down to: the lowest of H7's never-collapsed control
    alphas (``h7_control_alphas``)."""
    return float(min(p.h7_control_alphas))


def ramp_control_spec(p, study: StudySpec, seed: int, start: int) -> tr.RunSpec:
    """The reversed ramp's control, matched in training time: the model and seed of the event ramped down
    only to :func:`ramp_control_alpha` (where it does not collapse), held there until the switch step
    ``start``, then ramped back up to 1 over the same steps as the reversed ramp (reaching 1 at the same
    step). It differs from the reversed ramp by the collapse alone, not by the time spent at a small
    alpha or the steps trained."""
    base = run_spec(study, seed)
    a = ramp_control_alpha(p)
    down = tr.driver_knots(p.ramp_start, p.ramp_end, a)
    held = ((start, a),) if start > p.ramp_end else ()
    knots = down + held + ((start + p.ramp_end - p.ramp_start, 1.0),)
    return tr.RunSpec(**{**base.__dict__, "alpha_knots": knots})


def ramp_split(p, e: dict) -> int:
    """The first step at which the reversed ramp's control (:func:`ramp_control_spec`) and H7's control at
    the same alpha differ: the one after the switch step (or after the end of the driver's ramp, when the
    event collapsed before it), where the ramp back up begins. Until there the two are one run, trained
    once."""
    return max(int(e["start"]), p.ramp_end) + 1


def ramp_control_rows(p, events, rev: dict, controls: dict, healthy: dict) -> list[dict]:
    """Per event with a reversed ramp and a control (:func:`ramp_control_spec`; at a control alpha of 1, the
    healthy network): the reversed ramp's final probe loss minus the control's at the same step
    (``excess``, None where the control collapsed), minus the healthy network's (``gap_healthy``), and
    whether the ramp recovered."""
    out = []
    for e in events:
        s = e["seed"]
        b = rev.get(s)
        if b is None:
            continue
        c = controls.get("ramp", {}).get(s) if ramp_control_alpha(p) < 1.0 else healthy[s]
        collapsed = c is not None and ramp_control_alpha(p) < 1.0 and control_collapsed(c, p.threshold)
        gap = control_gap(b, c)
        out.append(
            {
                "seed": s,
                "excess": None if collapsed else gap,
                "control_collapsed": collapsed,
                "gap_healthy": b["final_probe"]["loss"]
                - at_step(healthy[s]["hist"], b["step"], "probe_loss"),
                "recovered": recovery(b["hist"], e["start"], e["rec_threshold"], p.recover_window)
                is not None,
            }
        )
    return out


def _alpha_recovered(e: dict, run: dict, spec, p) -> float | None:
    rec = recovery(run["hist"], e["start"], e["rec_threshold"], p.recover_window)
    return spec.alpha(e["start"] + rec) if rec is not None else None


def hysteresis(p, study: StudySpec, events, drivers, rev, slow: dict | None = None) -> list[dict]:
    """Per event: alpha at the driver's first crossing of the collapse threshold, alpha at which the
    reversed ramp recovered (None if it did not within the branch), and the same on the slow reversed ramp
    (``slow``: :func:`run_switches`'s; ``alpha_recover_slow`` is left out without it)."""
    out = []
    for e in events:
        d = drivers[e["seed"]]
        h = d["hist"]
        fc = d["det"]["first_cross"]
        a_col = h["alpha"][h["m_step"].index(fc)]
        spec = branch_spec(study, e["seed"], e["start"], "reversed-ramp", {}, 0.0)
        a_rec = _alpha_recovered(e, rev[e["seed"]], spec, p)
        row = {"seed": e["seed"], "alpha_collapse": a_col, "alpha_recover": a_rec}
        row["ratio"] = _ratio(a_rec, a_col)
        if slow:
            row["alpha_recover_slow"] = _alpha_recovered(
                e, slow[e["seed"]], slow_ramp_spec(p, study, e["seed"], e["start"]), p
            )
        out.append(row)
    return out


def _ratio(a_rec: float | None, a_col: float) -> float | None:
    """alpha of recovery / alpha of collapse; None without a recovery. A collapse first crossed at alpha = 0
    (the smoke driver's floor) makes any recovery infinitely far above the collapse scale: the ratio is
    inf."""
    if a_rec is None:
        return None
    return a_rec / a_col if a_col > 0 else float("inf")


def control_rows(p, events: list[dict], grads: dict, controls: dict) -> list[dict]:
    """H3's shallower control per event seed (``kind = "shallower"``; the same-depth drivers that did not
    settle are the other kind, :func:`same_depth_controls`): the driver of depth ``control_depth`` through
    the same ramp to the same alpha_min (its final state, at alpha_min), whether it collapsed
    (:func:`rankcollapse.repair.controls.control_collapsed`), its final srank (10-measurement median), its
    median-over-blocks Q/K task gradient at alpha_min on the probe batch, and that over the healthy
    network's of the same seed (:func:`gradients_at_collapse`)."""
    out = []
    for e in events:
        s = e["seed"]
        c = controls["h3"][s]
        m = tr.load_model(_final_path(c), p.alpha_min)
        g = gp.block_grad_norms(m, *_probe(p, s), alpha=p.alpha_min)
        qk, qh = med(g["task_qk"]), med(grads[s]["healthy"]["task_qk"])
        out.append(
            {
                "seed": s,
                "kind": "shallower",
                "depth": p.control_depth,
                "collapsed": control_collapsed(c, p.threshold),
                "final_srank": median_around(c["hist"], c["hist"]["m_step"][-1]),
                "qk": qk,
                "qk_healthy": qh,
                "qk_ratio": qk / qh,
                "task_qk": g["task_qk"],
            }
        )
    return out


# -- H3's open path: the hinge's fade on networks whose path is open ----------------------------------------
def healthy_at_spec(study: StudySpec, seed: int) -> tr.RunSpec:
    """The healthy run's spec for ``seed`` (alpha = 1 throughout, no term), as
    :func:`rankcollapse.lm.training.healthy` trains it."""
    return replace(run_spec(study, seed), alpha_knots=((0, 1.0),), term=None)


def healthy_at_jobs(study: StudySpec, events: list[dict]) -> tuple[list, list]:
    """Per event: the healthy network of its seed at the event's step, as a branch of the healthy spec from
    the seed's saved shared prefix (:func:`rankcollapse.repair.controls.prefix_path`) to the step of the
    saved collapse. The healthy run trains the same updates from the same state (its first
    :func:`rankcollapse.lm.training.prefix_end` come from that prefix) but saves no state before its end, so
    the branch trains those steps again, bit for bit (:func:`open_path_rows` checks its measurement against
    the healthy run's history); a held branch, saved by content, trained once."""
    jobs, labels = [], []
    for e in events:
        s = e["seed"]
        spec = healthy_at_spec(study, s)
        P = tr.prefix_end(run_spec(study, s))
        jobs.append(("branch", {"parent": prefix_path(study, s), "spec": spec, "steps": e["start"] - P}))
        labels.append(f"seed {s} healthy network to step {e['start']}")
    return jobs, labels


def _hinge_row(g: dict) -> dict:
    first, last = g["term_attn"][0], g["term_attn"][-1]
    return {"hinge_first": first, "hinge_last": last, "fade": first / last if last > 0 else float("inf")}


def open_path_rows(p, study: StudySpec, events, drivers, healthy, grads: dict, log=print) -> list[dict]:
    """H3's networks with the path open, with the hinge's first-to-last gradient ratio (on the attention
    input weights, as at the collapse) and the median-over-blocks Q/K task gradient over the final healthy
    network's of the same seed (``qk_ratio``):

    - ``kind = "healthy"``, per event: the healthy network of the event's seed at the event's step
      (:func:`healthy_at_jobs`, alpha = 1) under the event's own hinge (its beta and s0);
      ``matches_healthy``: whether its last measurement equals the healthy run's at that step;
      ``collapsed``: whether the healthy run's 10-measurement median srank there lies below the threshold
      (then it is no open path);
    - ``kind = "unsettled"``, per seed whose driver did not settle: the driver's final state (alpha_min)
      under the hinge with beta = 1 (the ratio does not depend on beta) and s0 = the healthy network's Q at
      that step; ``collapsed`` by :func:`rankcollapse.repair.controls.control_collapsed`; ``qk_control``:
      its row as a Q/K control of H3 (kind ``"same depth"``, the form of :func:`control_rows`).

    The saved collapses' and healthy networks' gradients come from ``grads``
    (:func:`gradients_at_collapse`)."""
    jobs, labels = healthy_at_jobs(study, events)
    res = run_stage(study, jobs, log, labels)
    rows = []
    for e, b in zip(events, res):
        s = e["seed"]
        x, y = _probe(p, s)
        m = tr.load_model(branch_path(b), 1.0)
        g = gp.block_grad_norms(m, x, y, term=tr.Term("hinge", e["betas"]["hinge"], e["s0"]), alpha=1.0)
        hh = healthy[s]["hist"]
        i, j = b["hist"]["m_step"].index(b["step"]), hh["m_step"].index(b["step"])
        same = b["hist"]["srank"][i] == hh["srank"][j] and b["hist"]["probe_loss"][i] == hh["probe_loss"][j]
        srank = median_around(hh, b["step"])
        rows.append(
            {
                "seed": s,
                "kind": "healthy",
                "step": b["step"],
                "alpha": 1.0,
                **_hinge_row(g),
                "qk_ratio": med(g["task_qk"]) / med(grads[s]["healthy"]["task_qk"]),
                "srank": srank,
                "collapsed": srank < p.threshold,
                "matches_healthy": bool(same),
            }
        )
    for s in study.driver.seeds:
        d = drivers[s]
        if d["collapse"] is not None:
            continue
        x, y = _probe(p, s)
        s0 = q_of(median_around(healthy[s]["hist"], d["step"]))
        m = tr.load_model(_final_path(d), p.alpha_min)
        g = gp.block_grad_norms(m, x, y, term=tr.Term("hinge", 1.0, s0), alpha=p.alpha_min)
        gh = grads[s]["healthy"] if s in grads else None
        if gh is None:
            gh = gp.block_grad_norms(tr.load_model(_final_path(healthy[s]), 1.0), x, y, alpha=1.0)
        qk, qh = med(g["task_qk"]), med(gh["task_qk"])
        collapsed = control_collapsed(d, p.threshold)
        srank = median_around(d["hist"], d["hist"]["m_step"][-1])
        rows.append(
            {
                "seed": s,
                "kind": "unsettled",
                "step": d["step"],
                "alpha": p.alpha_min,
                **_hinge_row(g),
                "qk_ratio": qk / qh,
                "srank": srank,
                "collapsed": collapsed,
                "qk_control": {
                    "seed": s,
                    "kind": "same depth",
                    "depth": p.depth,
                    "collapsed": collapsed,
                    "final_srank": srank,
                    "qk": qk,
                    "qk_healthy": qh,
                    "qk_ratio": qk / qh,
                    "task_qk": g["task_qk"],
                },
            }
        )
    return rows


def same_depth_controls(rows: list[dict]) -> list[dict]:
    """The Q/K control rows of the same-depth drivers that did not settle (:func:`open_path_rows`)."""
    return [o["qk_control"] for o in rows if o["kind"] == "unsettled"]


def ramp_rate(p) -> float:
    """The driver's (and the reversed ramp's) change of alpha per step."""
    return (1.0 - p.alpha_min) / (p.ramp_end - p.ramp_start)


def detection_lag_alpha(p) -> float:
    """The reversed ramp's detection lag in alpha: the recovery median over ``recover_window`` measurements
    (10 steps apart) answers about half its span late, ``recover_window * 10 / 2`` steps, at
    :func:`ramp_rate` per step. The network's own response (the held switches take tens to hundreds of steps
    to recover) comes on top."""
    return p.recover_window * tr.RunSpec.measure_every / 2 * ramp_rate(p)


def weight_rank_table(p, study: StudySpec, events, drivers, healthy) -> dict:
    """Stable rank of the weight matrices (median over blocks) at initialisation, at the saved collapse and
    at the healthy network's end, beside the last block's token srank."""
    out = {}
    for e in events:
        s = e["seed"]
        init = lm.build_model(run_spec(study, s).model, s)
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


def rank_one(w):
    """The best rank-one approximation of a matrix (the leading term of its SVD)."""
    u, sv, vh = torch.linalg.svd(w, full_matrices=False)
    return sv[0] * torch.outer(u[:, 0], vh[0])


def rank_one_table(p, events, healthy) -> dict:
    """W1's constructed positive control (issue #42): per event seed, the final healthy network with every
    weight matrix of every block (the query, key and value rows of the attention input each, the attention
    output, the MLP's input and output) cut to rank one by its SVD (:func:`rank_one`; biases, embeddings,
    LayerNorms and head kept), at alpha = 1: each weight kind's stable rank (median over blocks) and the last
    block's token srank on the probe batch, measured as :func:`weight_rank_table` measures.

    The MLP's matrices are cut too: with the attention's alone (query, key, value and output) the smoke
    networks' tokens stayed spread at alpha 1 (last-block token srank 0.74 and 0.82 of the healthy one's,
    seeds 0 and 1, native kernels), which would make no case of a token collapse at all."""
    out = {}
    for e in events:
        s = e["seed"]
        m = tr.load_model(_final_path(healthy[s]), 1.0)
        d = m.cfg.d_model
        with torch.no_grad():
            for b in m.blocks:
                for i in range(3):
                    b.qkv.weight[i * d : (i + 1) * d] = rank_one(b.qkv.weight[i * d : (i + 1) * d])
                for lin in (b.proj, b.fc, b.out):
                    lin.weight.copy_(rank_one(lin.weight))
        r = {k: float(np.median(v)) for k, v in gp.weight_sranks(m).items()}
        r["token_srank"] = float(tr.probe_measure(m, _probe(p, s), all_blocks=False)["srank"][-1])
        out[s] = r
    return out


def med(v) -> float:
    return float(np.median(v))


def predictor(grads: dict, alpha: float) -> dict:
    """The paper's predictor per event: median over blocks of the query-key gradient right after the
    switch."""
    return {s: med(g["switched"][alpha]["task_qk"]) for s, g in grads.items()}


# -- delayed switches and the predictor ---------------------------------------------------------------
CENSOR = 10  # a switch that never recovers is counted as branch_steps + CENSOR steps where a time is needed


def delayed_points(p, events, hold, delayed, healthy, controls: dict | None = None) -> list[dict]:
    """One row per (event, delay, alpha), delay 0 being the held switch: the predictor (median over blocks of
    the query-key gradient right after the switch, before any update), the last block's srank just before the
    switch, steps to recovery (None: not within ``branch_steps``), final srank, the loss gap to the healthy
    network at the same step (None past the healthy run's end) and to H7's never-collapsed control at the
    same alpha (None: no control there, or past its end)."""
    h7 = (controls or {}).get("h7", {})
    rows = []
    for e in events:
        s = e["seed"]
        probe = _probe(p, s)
        hh = healthy[s]["hist"]
        for a in p.delay_alphas:
            pts = [(0, e["collapse"], hold[s][a])]
            pts += [(d, branch_path(delayed[s][(d, a)][-2]), delayed[s][(d, a)][-1]) for d in p.delays]
            for d, state, b in pts:
                m = tr.load_model(state, p.alpha_min)
                s_at = float(tr.probe_measure(m, probe, all_blocks=False)["srank"][-1])
                q = med(gp.block_grad_norms(m, *probe, alpha=a)["task_qk"])
                rec = recovery(b["hist"], e["start"] + d, e["rec_threshold"], p.recover_window)
                gap = (
                    b["final_probe"]["loss"] - at_step(hh, b["step"], "probe_loss")
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
                        "final_srank": statistics.median(last_srank(b["hist"])[-p.recover_window :]),
                        "loss_gap": gap,
                        "control_gap": control_gap(b, h7.get(s, {}).get(a)),
                    }
                )
    return rows


def censored(rec, branch_steps: int) -> int:
    return branch_steps + CENSOR if rec is None else rec


def h5_alpha(p) -> float:
    """The switch scale the first H5 rule (``first_verdict_h5`` in the chapter's verdicts) was judged at:
    0.3 (the paper's Figure 7) if delayed switches use it, else the largest delayed alpha."""
    return 0.3 if 0.3 in p.delay_alphas else max(p.delay_alphas)


def recovered_fractions(p, sw: dict) -> dict:
    """Per delay alpha: (events whose undelayed held switch recovered, events)."""
    return {a: (sw[a]["recovered"], sw[a]["events"]) for a in p.delay_alphas}


def choose_h5_alpha(fractions: dict) -> float | None:
    """The previous H5 rule's alpha (fixed before the results of issue #17's runs): among the delay alphas,
    the one whose undelayed held switch recovered in a share of events strictly between 0 and 1 and closest
    to 1/2 (ties: the lower alpha); None when recovery is certain or impossible at every delay alpha."""
    cands = [(Fraction(abs(2 * r - n), 2 * n), a) for a, (r, n) in fractions.items() if n and 0 < r < n]
    return min(cands)[1] if cands else None


def uncertain_alphas(fractions: dict) -> list[float]:
    """H5's alphas (issue #42): every delay alpha whose undelayed held switch recovered in a share of events
    strictly between 0 and 1 (recovery uncertain), in increasing order."""
    return sorted(a for a, (r, n) in fractions.items() if n and 0 < r < n)


# H5's replicate: the undelayed switch again, from the saved collapse continued untreated for one
# measurement interval more (the data then meet the switch shifted by these steps, as they meet a delayed
# switch shifted by its delay); the spread of its steps to recovery against the original's sets H5's margin
REPLICATE_SHIFT = tr.RunSpec.measure_every


def h5_replicates(p, study: StudySpec, events: list[dict], sw: dict, log=print) -> list[dict]:
    """H5's replicates, one per event and :func:`uncertain_alphas` value (none where recovery is certain or
    impossible at every delay alpha): the held switch to that alpha after :data:`REPLICATE_SHIFT` further
    collapsed steps (the chain of :func:`delay_segments`: the untreated branch, then the switch held for
    ``branch_steps``). Per replicate: ``seed``, ``alpha``, the original held switch's steps to recovery
    (``t0``) and the replicate's (``trep``; None: not within the branch), and the replicate's final
    srank."""
    alphas = uncertain_alphas(recovered_fractions(p, sw))
    jobs, labels, keys = [], [], []
    for e in events:
        for a in alphas:
            segs = delay_segments(study, e, REPLICATE_SHIFT, a)
            jobs.append(("chain", {"parent": e["collapse"], "segments": segs}))
            labels.append(
                f"seed {e['seed']} switch to {a} again, {REPLICATE_SHIFT} steps later (H5 replicate)"
            )
            keys.append((e, a))
    res = run_stage(study, jobs, log, labels) if jobs else []
    out = []
    for (e, a), chain in zip(keys, res):
        b = chain[-1]
        t0 = next(r["recovered_after"] for r in sw[a]["rows"] if r["seed"] == e["seed"])
        out.append(
            {
                "seed": e["seed"],
                "alpha": a,
                "t0": t0,
                "trep": recovery(
                    b["hist"], e["start"] + REPLICATE_SHIFT, e["rec_threshold"], p.recover_window
                ),
                "final_srank": statistics.median(last_srank(b["hist"])[-p.recover_window :]),
            }
        )
    return out


def delay_effect(p, rows, alpha: float | None = None) -> dict:
    """Per event at ``alpha`` (default :func:`h5_alpha`): steps to recovery undelayed (``t0``) and after the
    longest delay (``tmax``; None: no recovery within the branch), their difference with a switch that never
    recovered counted as branch_steps + 10 (``diff``, the first rule's reading), and the Spearman
    correlation of delay and censored recovery time over all points at that alpha (None with fewer than 4
    points)."""
    a = h5_alpha(p) if alpha is None else alpha
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
        "longest_delay": dmax,
        "events": ev,
        "spearman": rho,
        "any_recovered": any(r["recovered_after"] is not None for r in pts),
    }


def h5_effects(p, sw: dict, rows: list[dict], replicates: list[dict] | None = None) -> dict:
    """What H5 reads: the undelayed switches' recovered shares per delay alpha; the rule's alphas
    (:func:`uncertain_alphas`) with the pairs it pools there (``pairs``: per alpha and event, ``t0``
    undelayed and ``tmax`` after the longest delay) and the replicates (:func:`h5_replicates`); the previous
    rule's alpha (:func:`choose_h5_alpha`, None: none neither certain nor impossible) and its per-event
    effect of the longest delay (``previous``; None without that alpha); the first rule's (``first``, at
    :func:`h5_alpha`)."""
    fr = recovered_fractions(p, sw)
    alphas = uncertain_alphas(fr)
    a = choose_h5_alpha(fr)
    pairs = [
        {"seed": e["seed"], "alpha": b, "t0": e["t0"], "tmax": e["tmax"]}
        for b in alphas
        for e in delay_effect(p, rows, b)["events"]
    ]
    return {
        "fractions": fr,
        "alphas": alphas,
        "longest_delay": max(p.delays),
        "pairs": pairs,
        "replicates": list(replicates or []),
        "replicate_shift": REPLICATE_SHIFT,
        "alpha": a,
        "previous": delay_effect(p, rows, a) if a is not None else None,
        "first": delay_effect(p, rows, h5_alpha(p)),
    }


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


WEIGHT_KINDS = ("query", "key", "value", "mlp_in", "mlp_out")
