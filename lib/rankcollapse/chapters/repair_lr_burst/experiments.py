"""Chapter `repair-lr-burst`, experiments: what is trained and computed, from the parameters. From each
healthy network (skip intact) the learning rate is multiplied for ``burst_steps`` updates, then training
continues untreated at the base rate (:func:`run_bursts`, with a paired control from the same state at the
base rate; the climbing ones extended by :func:`run_extensions`); pure summaries of the histories
(:func:`collapse_step`, :func:`recovery_after`, :func:`summarise`, :func:`summarise_extensions`) and the
query-key gradients on the path (:func:`qk_gradients`). Each returns plain data.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from ...lm import gradpath as gp
from ...lm import model as lm
from ...lm import training as tr
from ...repair.drivers import run_spec
from ...repair.recovery import last_srank, median_around
from ...repair.spec import StudySpec
from ...repair.stages import branch_path, run_stage

# the classes of :func:`settling`, in the order the tables give them
SETTLE_KINDS = ("settled", "transient", "open-ended", "none")

# srank units a collapsed, unrecovered burst must have regained from its minimum to count as climbing
CLIMB = 0.2


def healthy_path(summary: dict) -> Path:
    """The healthy network's final saved state."""
    return Path(summary["dir"]) / "driver.pt"


def spec_at(study: StudySpec, seed: int, lr: float) -> tr.RunSpec:
    """The driver's run spec with the skip intact (alpha = 1 throughout) and learning rate ``lr``."""
    base = run_spec(study, seed)
    return tr.RunSpec(**{**base.__dict__, "alpha_knots": ((0, 1.0),), "lr": float(lr)})


def run_bursts(p, study: StudySpec, healthy: dict, log=print) -> dict:
    """Per seed: the burst at each multiplier, the after-burst run at the base rate, and the paired control.

    Returns {seed: {"start": step of the healthy state, "parent": its path, "control": branch summary,
    "burst": {m: summary}, "after": {m: summary}, "burst_path": {m: path of the state right after the
    burst}}}."""
    jobs, labels, tags = [], [], []
    out = {}
    for s in p.seeds:
        hp = healthy_path(healthy[s])
        out[s] = {"start": healthy[s]["step"], "parent": str(hp), "burst": {}, "after": {}, "burst_path": {}}
        for m in p.multipliers:
            jobs.append(
                ("branch", {"parent": str(hp), "spec": spec_at(study, s, p.lr * m), "steps": p.burst_steps})
            )
            labels.append(f"seed {s} burst x{m:g}")
            tags.append((s, "burst", m))
        jobs.append(
            (
                "branch",
                {
                    "parent": str(hp),
                    "spec": spec_at(study, s, p.lr),
                    "steps": p.burst_steps + p.branch_steps,
                },
            )
        )
        labels.append(f"seed {s} control")
        tags.append((s, "control", None))
    for (s, kind, m), o in zip(tags, run_stage(study, jobs, log, labels)):
        if kind == "control":
            out[s]["control"] = o
        else:
            out[s]["burst"][m] = o
            out[s]["burst_path"][m] = str(tr.states_dir() / o["key"] / "branch.pt")
    jobs, labels, tags = [], [], []
    for s in p.seeds:
        for m in p.multipliers:
            jobs.append(
                (
                    "branch",
                    {
                        "parent": out[s]["burst_path"][m],
                        "spec": spec_at(study, s, p.lr),
                        "steps": p.branch_steps,
                    },
                )
            )
            labels.append(f"seed {s} after x{m:g}")
            tags.append((s, m))
    for (s, m), o in zip(tags, run_stage(study, jobs, log, labels)):
        out[s]["after"][m] = o
    return out


def joined(burst_hist: dict, after_hist: dict, *more: dict) -> dict:
    """One history over consecutive runs (each run's first measurement repeats the previous run's last)."""
    k = (
        1
        if after_hist["m_step"]
        and burst_hist["m_step"]
        and after_hist["m_step"][0] == burst_hist["m_step"][-1]
        else 0
    )
    out = {
        "m_step": burst_hist["m_step"] + after_hist["m_step"][k:],
        "srank": burst_hist["srank"] + after_hist["srank"][k:],
        "probe_loss": burst_hist["probe_loss"] + after_hist["probe_loss"][k:],
    }
    return joined(out, *more) if more else out


def climbing(p, sm: dict) -> list[tuple[int, float]]:
    """(seed, multiplier) of the bursts that collapsed, did not recover within the branch, and ended at least
    :data:`CLIMB` above their minimum srank: the ones whose rank was still coming back when the branch
    ended."""
    return [
        (r["seed"], m)
        for m in p.multipliers
        for r in sm[m]["rows"]
        if r["collapsed"] and r["recovered_after"] is None and r["final_srank"] - r["min_srank"] >= CLIMB
    ]


def run_extensions(p, study: StudySpec, runs: dict, which: list, log=print) -> dict:
    """Continue each selected after-burst run, and its seed's control, for ``extend_steps`` more steps at the
    base rate (chained from their saved ends; cached by content).
    Returns {seed: {"control": summary, m: summary}}."""
    if not which or p.extend_steps == 0:
        return {}
    jobs, labels, tags = [], [], []
    for s in sorted({s for s, _ in which}):
        jobs.append(
            (
                "branch",
                {
                    "parent": str(branch_path(runs[s]["control"])),
                    "spec": spec_at(study, s, p.lr),
                    "steps": p.extend_steps,
                },
            )
        )
        labels.append(f"seed {s} control, extended")
        tags.append((s, "control"))
    for s, m in which:
        jobs.append(
            (
                "branch",
                {
                    "parent": str(branch_path(runs[s]["after"][m])),
                    "spec": spec_at(study, s, p.lr),
                    "steps": p.extend_steps,
                },
            )
        )
        labels.append(f"seed {s} after x{m:g}, extended")
        tags.append((s, m))
    out = {}
    for (s, k), o in zip(tags, run_stage(study, jobs, log, labels)):
        out.setdefault(s, {})[k] = o
    return out


def summarise_extensions(p, runs: dict, ext: dict) -> list[dict]:
    """Per extended burst: steps to recovery after the burst's end over burst + branch + extension (same
    threshold as in the branch), the settling class and untreated recovery over that history
    (:func:`settling`, :func:`untreated_recovery`), final srank, and loss gap to the extended control at the
    same step."""
    rows = []
    for s, e in ext.items():
        r = runs[s]
        burst_end = r["start"] + p.burst_steps
        rt = rec_threshold(r["control"]["hist"], burst_end, p.threshold, p.recover_frac, p.recover_window)
        for m, o in e.items():
            if m == "control":
                continue
            h = joined(r["burst"][m]["hist"], r["after"][m]["hist"], o["hist"])
            st = settling(h, p.threshold, p.window, p.settle_steps)
            rec_u, back = untreated_recovery(h, st["settled"], burst_end, rt, p.recover_window)
            rec_d, back_d = dip_recovery(h, st, burst_end, rt, p.recover_window)
            rows.append(
                {
                    "seed": s,
                    "multiplier": m,
                    "end_step": o["step"],
                    "settle": st["kind"],
                    "dip_recovered": rec_d,
                    "dip_back": back_d,
                    "recovered_untreated": rec_u,
                    "back_in_burst": back,
                    "recovered_after": recovery_after(h, burst_end, rt, p.threshold, p.recover_window),
                    "final_srank": float(statistics.median(last_srank(h)[-p.recover_window :])),
                    "loss_gap": float(o["final_probe"]["loss"] - e["control"]["final_probe"]["loss"]),
                }
            )
    return rows


def collapse_step(hist: dict, threshold: float, k: int) -> int | None:
    """First measurement step at which the ``k``-measurement rolling median of the last block's srank is
    below ``threshold`` (None: never)."""
    med = tr.rolling_median(last_srank(hist), k)
    for t, v in zip(hist["m_step"], med):
        if v < threshold:
            return t
    return None


def recovery_after(hist: dict, burst_end: int, rec_threshold: float, threshold: float, k: int) -> int | None:
    """Steps after ``burst_end`` until the rolling median, once it has fallen below ``threshold``, reaches
    ``rec_threshold`` again (searching from the later of the collapse and the burst's end; None: no collapse,
    or no recovery within the history)."""
    tc = collapse_step(hist, threshold, k)
    if tc is None:
        return None
    med = tr.rolling_median(last_srank(hist), k)
    for t, v in zip(hist["m_step"], med):
        if t >= max(tc, burst_end) and v >= rec_threshold:
            return t - burst_end
    return None


def rec_threshold(control_hist: dict, burst_end: int, threshold: float, frac: float, k: int) -> float:
    """``threshold + frac (control srank at the burst's end - threshold)``; the control's srank is its
    ``k``-measurement median ending there."""
    cs = median_around(control_hist, burst_end, k)
    return threshold + frac * (cs - threshold)


def settling(hist: dict, threshold: float, window: int, settle_steps: int) -> dict:
    """The skip drivers' settling rule (:class:`rankcollapse.lm.training.Detector`, the rule that saves
    `repair-driver`'s collapses) over a burst's history: the last block's srank first below ``threshold``,
    then, ``settle_steps`` later, the median of the last ``window`` measurements still below it. ``kind``:
    "settled" (a collapse: ``settled`` is the step), "transient" (every crossing climbed back within
    ``settle_steps``: a dip, not a collapse; ``dips`` lists them as (first crossing, step declared back)),
    "open-ended" (the last crossing came too close to the history's end to be told either way), or "none"
    (never below the threshold)."""
    det = tr.Detector(threshold, window, settle_steps)
    for t, s in zip(hist["m_step"], last_srank(hist)):
        det.feed(t, s)
    if det.settled is not None:
        kind = "settled"
    elif det.first_cross is not None:
        kind = "open-ended"
    elif det.heals:
        kind = "transient"
    else:
        kind = "none"
    return {"kind": kind, "settled": det.settled, "dips": [list(h) for h in det.heals]}


def untreated_recovery(
    hist: dict, settled: int | None, burst_end: int, rec_threshold: float, k: int
) -> tuple[int | None, bool]:
    """Whether a settled collapse recovered untreated: (steps after ``burst_end`` until the ``k``-measurement
    rolling median, below ``rec_threshold`` at the later of the settling and the burst's end, reaches it, or
    None; whether it was already at or above it there, that is, back while the rate was still raised: not an
    untreated recovery). (None, False) where nothing settled."""
    if settled is None:
        return None, False
    t0 = max(settled, burst_end)
    med = tr.rolling_median(last_srank(hist), k)
    steps = hist["m_step"]
    i0 = steps.index(t0)
    if med[i0] >= rec_threshold:
        return None, True
    for t, v in zip(steps[i0 + 1 :], med[i0 + 1 :]):
        if v >= rec_threshold:
            return t - burst_end, False
    return None, False


def dip_recovery(
    hist: dict, st: dict, burst_end: int, rec_threshold: float, k: int
) -> tuple[int | None, bool]:
    """:func:`untreated_recovery` of a transient burst (:func:`settling`'s "transient"), taken as a collapse
    at its first crossing of the threshold: H6's open-path control reads the dips by the rule that reads the
    settled collapses. (None, False) for any other class."""
    first = st["dips"][0][0] if st["kind"] == "transient" and st["dips"] else None
    return untreated_recovery(hist, first, burst_end, rec_threshold, k)


def summarise_run(
    p, hist: dict, start: int, control_hist: dict, final_loss: float, control_final_loss: float
) -> dict:
    burst_end = start + p.burst_steps
    rt = rec_threshold(control_hist, burst_end, p.threshold, p.recover_frac, p.recover_window)
    med = tr.rolling_median(last_srank(hist), p.recover_window)
    tc = collapse_step(hist, p.threshold, p.recover_window)
    st = settling(hist, p.threshold, p.window, p.settle_steps)
    rec_u, back = untreated_recovery(hist, st["settled"], burst_end, rt, p.recover_window)
    rec_d, back_d = dip_recovery(hist, st, burst_end, rt, p.recover_window)
    return {
        "settle": st["kind"],
        "dip_recovered": rec_d,
        "dip_back": back_d,
        "settled_after": None if st["settled"] is None else st["settled"] - start,
        "dips": st["dips"],
        "recovered_untreated": rec_u,
        "back_in_burst": back,
        "collapsed": tc is not None,
        "collapse_after": None if tc is None else tc - start,
        "min_srank": float(min(med)),
        "rec_threshold": rt,
        "recovered_after": recovery_after(hist, burst_end, rt, p.threshold, p.recover_window),
        "final_srank": float(statistics.median(last_srank(hist)[-p.recover_window :])),
        "loss_gap": float(final_loss - control_final_loss),
    }


def summarise(p, runs: dict) -> dict:
    """Per multiplier: one row per seed (:func:`summarise_run`: the rolling-median dip the earlier rules
    called a collapse, ``collapsed``, and the skip drivers' settling rule, ``settle``, beside it), and the
    counts and medians of the table (``settle``: bursts per class of :func:`settling`;
    ``recovered_untreated``: settled bursts that recovered untreated within the branch)."""
    out = {}
    for m in p.multipliers:
        rows = []
        for s in p.seeds:
            r = runs[s]
            h = joined(r["burst"][m]["hist"], r["after"][m]["hist"])
            row = summarise_run(
                p,
                h,
                r["start"],
                r["control"]["hist"],
                r["after"][m]["final_probe"]["loss"],
                r["control"]["final_probe"]["loss"],
            )
            rows.append({"seed": s, **row})
        col = [x for x in rows if x["collapsed"]]
        rec = [x for x in col if x["recovered_after"] is not None]
        out[m] = {
            "rows": rows,
            "seeds": len(rows),
            "settle": {k: sum(x["settle"] == k for x in rows) for k in SETTLE_KINDS},
            "recovered_untreated": sum(x["recovered_untreated"] is not None for x in rows),
            "collapsed": len(col),
            "recovered": len(rec),
            "median_steps": statistics.median([x["recovered_after"] for x in rec]) if rec else None,
            "min_srank": float(np.median([x["min_srank"] for x in rows])),
            "final_srank": float(np.median([x["final_srank"] for x in rows])),
            "loss_gap": float(np.median([x["loss_gap"] for x in rows])),
            "loss_gap_recovered": float(np.median([x["loss_gap"] for x in rec])) if rec else None,
        }
    return out


def qk_median(path, seed: int, ctx: int, alpha: float) -> float:
    """Median over blocks of the task gradient's norm on the query-key weights, at the saved state ``path``
    on the probe batch of ``seed`` with skip scale ``alpha``."""
    m = tr.load_model(path)
    x, y = lm.corpus().probe(seed, 16, ctx)
    return float(np.median(gp.block_grad_norms(m, x, y, alpha=alpha)["task_qk"]))


def qk_gradients(p, runs: dict, drivers: dict) -> dict:
    """Median Q/K gradient right after each burst (alpha 1), at each healthy parent (alpha 1), and at each
    settled skip collapse of the drivers (alpha = alpha_min)."""
    return {
        "burst": {
            s: {m: qk_median(runs[s]["burst_path"][m], s, p.ctx, 1.0) for m in p.multipliers}
            for s in p.seeds
        },
        "healthy": {s: qk_median(runs[s]["parent"], s, p.ctx, 1.0) for s in p.seeds},
        "skip": {
            s: qk_median(drivers[s]["collapse"], s, p.ctx, p.alpha_min)
            for s in p.seeds
            if drivers[s]["collapse"] is not None
        },
    }
