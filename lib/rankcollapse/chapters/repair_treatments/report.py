"""Chapter `repair-treatments`, report: what the page records (``record_*``: the saved collapses, the
recoveries per treatment, Table 2 with the calibration, the synthetic force; checked values and glued
numbers), the paper's numbers it quotes (:data:`PAPER_TABLE2`, :data:`PAPER_FORCE`, :func:`glue_paper`) and
its HTML tables (``table_*``).
"""

from __future__ import annotations

import statistics

import numpy as np

from ...book import checks
from ...book.html_tables import html_table
from ...repair.spec import StudySpec
from ...repair.treatments import branch_spec
from .experiments import LINE_BATCHES, loglog_slope, loss_terms
from .verdicts import CALIB_CHECK, F6M_FACTOR, RULE_F6M, literal_events, read_line

# the paper's Table 2 (median, range low, range high, clip fraction) and its outcome: 0/8 recovered for terms
PAPER_TABLE2 = {
    "penalty-1x": (0.0032, 0.0027, 0.0043, 0.22),
    "hinge-1x": (0.0887, 0.0550, 0.1630, 0.44),
    "penalty-4x": (0.0130, 0.0111, 0.0170, 0.21),
    "hinge-4x": (0.3071, 0.1942, 0.6194, 0.60),
    "cosine-1x": (0.0618, 0.0380, 0.0881, 0.40),
}


# the paper's synthetic force test: the penalty's gradient at delta = 1 and at delta = 1e-4, the hinge's
PAPER_FORCE = {"penalty_d1": 4.9e-4, "penalty_dmin": 3.5e-8, "d_min": 1e-4, "hinge": 0.022}


def glue_paper(ch) -> None:
    """Glue the paper's synthetic force numbers the page quotes (:data:`PAPER_FORCE`) as ``paper_*``."""
    for k, v in PAPER_FORCE.items():
        m, e = f"{v:e}".split("e")
        ch.glue(f"paper_{k}", f"{float(m):g}e{int(e)}" if v < 0.01 else f"{v:g}")


def record_events(ch, p, events: list[dict]) -> None:
    """Record the saved collapses (count, switch steps, healthy srank, both recovery thresholds, the solved
    betas) and glue the seed count, the ranges of healthy srank and of both thresholds, and where the
    paper's literal threshold lies against the collapse threshold; raises when no driver settled (nothing
    to treat)."""
    checks.count(
        ch,
        "events",
        len(events),
        of=len(p.seeds),
        limits=(0.5,),
        note="settled collapses among the seeds; H2 has nothing to judge without one",
    )
    ch.glue("n_seeds", len(p.seeds))
    if not events:
        raise RuntimeError(
            "no driver settled into a collapse: nothing to treat (try more seeds or a lower alpha_min)"
        )
    ch.value("switch_steps", [e["start"] for e in events], atol=200, note="steps; trained networks")
    ch.value(
        "healthy_srank",
        [e["healthy_srank"] for e in events],
        rtol=0.3,
        note="healthy last-block srank at the switch step (10-measurement median); trained",
    )
    ch.value("rec_threshold", [e["rec_threshold"] for e in events], rtol=0.3, note="follows healthy_srank")
    ch.value(
        "rec_threshold_literal",
        [e["rec_threshold_literal"] for e in events],
        rtol=0.3,
        note="the paper's literal threshold, half the healthy srank; follows healthy_srank",
    )
    ch.value(
        "beta",
        {k: [e["betas"][k] for e in events] for k in ("penalty", "hinge", "cosine")},
        rtol=0.5,
        note="beta of each 1x term, set so that it adds Lambda at the saved state (mean over the branch's "
        "first calib_steps training batches); the 4x terms use 4 beta; trained",
    )
    ch.glue("hs_lo", min(e["healthy_srank"] for e in events))
    ch.glue("hs_hi", max(e["healthy_srank"] for e in events))
    ch.glue("rt_lo", min(e["rec_threshold"] for e in events))
    ch.glue("rt_hi", max(e["rec_threshold"] for e in events))
    lit = [e["rec_threshold_literal"] for e in events]
    ch.glue("lt_lo", min(lit))
    ch.glue("lt_hi", max(lit))
    ch.glue("literal_vs_collapse", literal_position(lit, p.threshold))


def literal_position(literal: list[float], threshold: float) -> str:
    """Where the paper's literal thresholds lie against the collapse threshold, as a phrase for the page."""
    lo, hi, t = min(literal), max(literal), threshold
    if lo > t:
        return f"barely above the collapse threshold {t:g} (by {lo - t:.2f} to {hi - t:.2f})"
    if hi <= t:
        return f"at or below the collapse threshold {t:g} (by {t - hi:.2f} to {t - lo:.2f})"
    below = sum(x <= t for x in literal)
    return (
        f"on both sides of the collapse threshold {t:g} ({below} of {len(literal)} events at or below it, "
        "the others barely above)"
    )


def record_recovery(ch, p, study: StudySpec, summary: dict) -> None:
    """Record recoveries (under the book's stricter threshold and under the paper's literal one), steps to
    recovery and final srank per treatment (Figure 1); glue the loss terms' recoveries under both, the
    untreated and reversed-ramp recoveries (with the reversed ramp's steps, or "–" where it was not run),
    and the reversed ramp's length and end value for the prose."""
    checks.count(
        ch,
        "recovered",
        {t: summary[t]["recovered"] for t in p.treatments},
        of={t: summary[t]["events"] for t in p.treatments},
        note="events recovered per treatment, the book's stricter threshold",
    )
    checks.count(
        ch,
        "recovered_literal",
        {t: summary[t]["recovered_literal"] for t in p.treatments},
        of={t: summary[t]["events"] for t in p.treatments},
        note="events recovered per treatment, the paper's literal threshold (half the healthy srank); "
        "trained",
    )
    ch.value(
        "recovery_steps",
        {t: [r["recovered_after"] for r in summary[t]["rows"]] for t in p.treatments},
        glue=False,
        atol=100,
        note="steps after the switch (None: not recovered), stricter threshold; trained",
    )
    ch.value(
        "recovery_steps_literal",
        {t: [r["recovered_after_literal"] for r in summary[t]["rows"]] for t in p.treatments},
        glue=False,
        atol=100,
        note="steps after the switch (None: not recovered), the paper's literal threshold; trained",
    )
    ch.value(
        "final_srank",
        {t: [r["final_srank"] for r in summary[t]["rows"]] for t in p.treatments},
        glue=False,
        rtol=0.3,
        note="last-block srank at the end of each branch; trained",
    )
    terms = loss_terms(p)
    ch.glue("terms_recovered", sum(summary[t]["recovered"] for t in terms))
    ch.glue("terms_recovered_literal", sum(summary[t]["recovered_literal"] for t in terms))
    ch.glue("terms_tried", sum(summary[t]["events"] for t in terms))
    rr = summary.get("reversed-ramp")
    ch.glue("rev_recovered", rr["recovered"] if rr else 0)
    ch.glue("rev_steps", ", ".join(str(r["recovered_after"]) for r in rr["rows"]) if rr else "–")
    rev_end = branch_spec(study, 0, 0, "reversed-ramp", {}, 0.0).alpha(p.branch_steps)
    ch.glue("rev_alpha_end", rev_end)
    ch.glue("rev_ramp_steps", p.ramp_end - p.ramp_start)
    ch.glue("branch_ramp_lengths", p.branch_steps / (p.ramp_end - p.ramp_start))
    un = summary.get("untreated")
    ch.glue("untreated_recovered", un["recovered"] if un else 0)
    ch.glue("untreated_recovered_literal", un["recovered_literal"] if un else 0)


def term_recoveries(p, events: list[dict], summary: dict) -> str:
    """The loss-term branches that recovered under the stricter threshold, each with its event's numbers
    (steps to recovery, final srank against the healthy srank and the recovery threshold, what the same
    event's untreated branch and other loss terms did), as a phrase for the page."""
    terms = loss_terms(p)
    found = []
    for i, e in enumerate(events):
        for t in terms:
            r = summary[t]["rows"][i]
            if r["recovered_after"] is None:
                continue
            others = [summary[o]["rows"][i] for o in terms if o != t]
            n_other = sum(o["recovered_after"] is not None for o in others)
            fin = [o["final_srank"] for o in others]
            un = summary.get("untreated")
            side = "above" if r["final_srank"] > e["healthy_srank"] else "below"
            txt = (
                f"seed {e['seed']}'s {t} branch, {r['recovered_after']} steps after the switch, ending at "
                f"srank {r['final_srank']:.2f} ({side} its healthy network's {e['healthy_srank']:.2f} "
                f"at the switch; recovery threshold {e['rec_threshold']:.2f})"
            )
            if un:
                txt += (
                    f"; in the same event the untreated branch ended at {un['rows'][i]['final_srank']:.2f}"
                )
            if others:
                txt += f" and the other {len(others)} loss terms at {min(fin):.2f}–{max(fin):.2f}, " + (
                    f"{n_other} of them recovered" if n_other else "none of them recovered"
                )
            found.append(txt)
    if not found:
        return "no loss-term branch recovered under the stricter threshold"
    head = (
        "one loss-term branch recovered" if len(found) == 1 else f"{len(found)} loss-term branches recovered"
    )
    return f"{head}: " + "; ".join(found)


def record_term_recoveries(ch, p, events: list[dict], summary: dict) -> None:
    """Glue the loss-term branches that recovered, with their events' numbers (:func:`term_recoveries`), as
    ``h2_recoveries``."""
    ch.glue("h2_recoveries", term_recoveries(p, events, summary))


def table_recovery(p, summary: dict, events: list[dict] | None = None) -> str:
    """HTML table: events recovered per treatment under the book's stricter threshold (which decides H2)
    and under the paper's literal one (half the healthy srank; with ``events``, also over the events whose
    literal threshold lies above the collapse threshold, the ones H2 is judged on under it), with the
    final srank."""

    def _steps(rows, key):
        return ", ".join("–" if r[key] is None else str(r[key]) for r in rows)

    keep = literal_events(p, events)[0] if events else None

    def _literal(t):
        s = summary[t]
        text = f"{s['recovered_literal']} of {s['events']}"
        if keep is not None:
            k = sum(s["rows"][i]["recovered_after_literal"] is not None for i in keep)
            text += f" ({k} of {len(keep)} above the collapse line)"
        return text

    return html_table(
        [
            "treatment",
            "recovered, stricter threshold (decides)",
            "steps to recovery",
            "recovered, paper's literal threshold",
            "steps to recovery",
            "final srank per event",
        ],
        [
            [
                t,
                f"{summary[t]['recovered']} of {summary[t]['events']}",
                _steps(summary[t]["rows"], "recovered_after"),
                _literal(t),
                _steps(summary[t]["rows"], "recovered_after_literal"),
                ", ".join(f"{r['final_srank']:.2f}" for r in summary[t]["rows"]),
            ]
            for t in p.treatments
        ],
    )


def record_table2(ch, p, summary: dict) -> None:
    """Record Table 2 (rho median and range, clip fraction, added loss over the first updates per loss term),
    the calibration (per treatment the target, what the term adds at the switch, what the former probe-batch
    setting would have added there, what it added over the first updates) with its two checks (every term
    within :data:`CALIB_CHECK` of its target at the switch; the branches' first recorded term equal to the
    calibration's first batch) and the loss gap per treatment; glue the mean added loss at 1x and at 4x
    over the first updates, the largest relative miss at the switch and of the former setting, and the
    range of the response (added over the first updates / target)."""
    terms = loss_terms(p)
    t2 = {
        t: {
            "rho_median": summary[t]["rho_median"],
            "rho_low": summary[t]["rho_low"],
            "rho_high": summary[t]["rho_high"],
            "clip_fraction": summary[t]["clip_fraction"],
            "added_loss": summary[t]["added_loss"],
        }
        for t in terms
    }
    ch.value(
        "table2",
        t2,
        rtol=0.5,
        atol=0.05,
        glue=False,
        note="gradient ratios and clip fractions of trained networks; loose: they drift across machines",
    )
    ch.value(
        "calibration",
        {
            t: {
                "target": summary[t]["target"],
                "at_switch": [r["at_switch"] for r in summary[t]["rows"]],
                "probe_set": [r["probe_set"] for r in summary[t]["rows"]],
                "first_steps": [r["added_loss"] for r in summary[t]["rows"]],
            }
            for t in terms
        },
        rtol=0.05,
        atol=0.01,
        glue=False,
        note="nats: each term's target; what it adds at the switch (mean over the first calib_steps "
        "training batches at the saved state, the target by construction); what the former calibration on "
        "the probe batch would have added there; and what it added over the branch's first calib_steps "
        "updates (its response, not its setting); trained",
    )
    worst = max((summary[t]["calib_error"] for t in terms), default=0.0)
    ch.value(
        "calibration_within_5pct",
        bool(worst <= CALIB_CHECK),
        note="every loss term adds its target within 5% at the switch (saved state, calibration batches)",
    )
    check = max((r["first_step_check"] for t in terms for r in summary[t]["rows"]), default=0.0)
    ch.value(
        "calibration_batches_aligned",
        bool(check < 1e-3),
        note="each branch's first recorded term equals beta x raw on the first calibration batch (rel 1e-3)",
    )
    probe = [abs(r["probe_set"] / r["target"] - 1) for t in terms for r in summary[t]["rows"] if r["target"]]
    ch.glue("calib_probe_worst_pct", 100 * max(probe, default=0.0))
    ch.glue("calib_worst_pct", 100 * worst)
    ch.glue("calib_steps", p.calib_steps)
    ch.glue("calib_check_pct", 100 * CALIB_CHECK)
    resp = [r["added_loss"] / r["target"] for t in terms for r in summary[t]["rows"] if r["target"]]
    ch.glue("calib_resp_lo", min(resp, default=float("nan")))
    ch.glue("calib_resp_hi", max(resp, default=float("nan")))
    ch.value(
        "loss_gap",
        {t: summary[t]["loss_gap"] for t in p.treatments},
        atol=0.15,
        glue=False,
        note="nats, probe loss minus the healthy network's at the same step (median over events); trained",
    )
    ch.glue("added_1x", float(np.mean([summary[t]["added_loss"] for t in terms if t.endswith("1x")])))
    ch.glue(
        "added_4x", float(np.mean([summary[t]["added_loss"] for t in terms if t.endswith("4x")] or [np.nan]))
    )


def table_rho(p, summary: dict) -> str:
    """HTML Table 2, as two tables so that each fits the page's column: per loss term rho and the clip
    fraction beside the paper's; then its beta and the added loss (target, at the switch, over the first
    updates)."""

    def _f(x):
        return "–" if x is None else f"{x:.4f}"

    terms = loss_terms(p)
    rho = html_table(
        [
            "treatment",
            "ρ median",
            "ρ range",
            "clip fraction",
            "paper ρ median",
            "paper ρ range",
            "paper clip fraction",
        ],
        [
            [
                t,
                _f(summary[t]["rho_median"]),
                f"{_f(summary[t]['rho_low'])}–{_f(summary[t]['rho_high'])}",
                f"{summary[t]['clip_fraction']:.2f}",
                f"{PAPER_TABLE2[t][0]:.4f}",
                f"{PAPER_TABLE2[t][1]:.4f}–{PAPER_TABLE2[t][2]:.4f}",
                f"{PAPER_TABLE2[t][3]:.2f}",
            ]
            for t in terms
        ],
    )
    added = html_table(
        [
            "treatment",
            "events",
            "β per event",
            "target added loss",
            "added at the switch, per event",
            f"added over the first {p.calib_steps} updates, per event",
        ],
        [
            [
                t,
                summary[t]["events"],
                ", ".join(f"{r['beta']:.4g}" for r in summary[t]["rows"]),
                f"{summary[t]['target']:.3f}",
                ", ".join(f"{r['at_switch']:.3f}" for r in summary[t]["rows"]),
                ", ".join(f"{r['added_loss']:.3f}" for r in summary[t]["rows"]),
            ]
            for t in terms
        ],
    )
    return (
        "<p><em>ρ and the clip fraction, beside the paper's Table 2:</em></p>"
        + rho
        + "<p><em>The loss each term adds, with its β:</em></p>"
        + added
    )


def table_loss_gap(p, summary: dict) -> str:
    """HTML table: final srank (median over events) and loss gap to the healthy network per treatment."""
    return html_table(
        [
            "treatment",
            "final srank (median over events)",
            "probe loss minus healthy, same seed and step (nats)",
        ],
        [
            [
                t,
                f"{statistics.median(r['final_srank'] for r in summary[t]['rows']):.2f}",
                f"{summary[t]['loss_gap']:.3f}",
            ]
            for t in p.treatments
        ],
    )


def record_synthetic(ch, force: dict) -> None:
    """Record the synthetic force (Figure 6 left): gradients, the log-log slopes of penalty and hinge, the
    penalty's force at the largest and smallest delta and the hinge's at the smallest; glue the delta
    range."""
    slopes = {k: loglog_slope(force["delta"], force[k]) for k in ("penalty", "hinge", "cosine")}
    ch.value(
        "synth_grad",
        {k: force[k] for k in ("penalty", "hinge", "cosine")},
        rtol=1e-6,
        glue=False,
        note="float64 gradients of closed-form terms; round-off only",
    )
    ch.value("synth_slope_penalty", slopes["penalty"], rtol=1e-6, note="log-log slope; float64")
    ch.value("synth_slope_hinge", slopes["hinge"], atol=1e-6, note="log-log slope; float64")
    ch.value("synth_pen_d1", force["penalty"][0], rtol=1e-6, note="float64")
    ch.value("synth_pen_dmin", force["penalty"][-1], rtol=1e-6, note="float64")
    ch.value("synth_hinge", force["hinge"][-1], rtol=1e-6, note="float64")
    ch.glue("d_hi", force["delta"][0])
    ch.glue("d_lo", force["delta"][-1])


# -- Figure 6 middle ----------------------------------------------------------------------------------------
T0_CHECK = 0.01  # rho at t = 0 on the first batch must equal the branch's first recorded rho within this


def line_text(summary: dict, reading: dict) -> str:
    """:data:`RULE_F6M`'s readings as a phrase for the page: per term, along each direction, the reading with
    its median change factor and the events' range; then the terms where the line differs from the random
    direction."""

    def one(label, t):
        s = summary[label][t]
        lo, hi = min(s["factors"]), max(s["factors"])
        return f"{reading[t][label]} (×{s['factor']:.3g}; events ×{lo:.3g} to ×{hi:.3g})"

    parts = [
        f"{t}: towards the healthy network {one('line', t)}, along the random direction {one('random', t)}"
        for t in reading
    ]
    diff = [t for t in reading if reading[t]["differs"]]
    tail = (
        f"the line reads otherwise than the random direction for {len(diff)} of {len(reading)} terms ("
        + ", ".join(diff)
        + ")"
        if diff
        else f"the line reads as the random direction does for each of the {len(reading)} terms"
    )
    return "; ".join(parts) + "; " + tail


def record_line(ch, p, line: dict, summary: dict, branches: dict) -> dict:
    """Record Figure 6 middle: rho along the line and the random direction (median over events per t, read
    in decades), each event's change factor rho(1) / rho(0) (read against :data:`F6M_FACTOR` and its
    inverse by :data:`RULE_F6M`), the readings, the distances, and the check that rho at t = 0 on the first
    batch is the branch's first recorded rho (the same measurement as Table 2). Glues the readings as a
    phrase (``f6m_reading``), the rule, the grid, the distances and the healthy state's step. Returns the
    readings."""
    terms, ev = line["terms"], line["events"]
    checks.in_decades(
        ch,
        "f6m_rho",
        {lab: {t: summary[lab][t]["median"] for t in terms} for lab in ("line", "random")},
        decades=0.3,
        glue=False,
        note="rho of each 1x term at t along the line to the healthy network and along a random direction "
        "of the same length (median over events); trained networks, read in decades",
    )
    factors = {lab: {t: summary[lab][t]["factor"] for t in terms} for lab in ("line", "random")}
    checks.in_decades(
        ch,
        "f6m_factor",
        factors,
        decades=0.3,
        glue=False,
        note="median over events of rho(t = 1) / rho(t = 0) per direction and term, read in decades (the "
        "random direction's lie near RULE_F6M's lines and crossed them between kernel variants at smoke)",
    )
    checks.in_decades(
        ch,
        "f6m_line_factor",
        factors["line"],
        decades=0.3,
        limits=(1.0 / F6M_FACTOR, F6M_FACTOR),
        glue=False,
        note="median over events of rho(t = 1) / rho(t = 0) along the line, per term; RULE_F6M reads it "
        f"against {F6M_FACTOR:g} and 1/{F6M_FACTOR:g}",
    )
    checks.fragile_text(ch, "f6m_line_factor")
    checks.in_decades(
        ch,
        "f6m_task_factor",
        {lab: summary[lab]["task"]["factor"] for lab in ("line", "random")},
        decades=0.3,
        glue=False,
        note="median over events of the task gradient's norm at t = 1 over t = 0 per direction (rho's "
        "denominator); trained networks, read in decades",
    )
    reading = read_line(factors)
    # the line's reading only: the random direction's factors sit near the rule's lines at smoke and its
    # reading moved between kernel variants there (a non-numeric result cannot carry a tolerance); its
    # factors are checked in decades (f6m_factor), and the page says its reading is fragile
    ch.value(
        "f6m_reading",
        {t: {"line": r["line"]} for t, r in reading.items()},
        glue=False,
        note="RULE_F6M's reading along the line per term (the random direction's: from f6m_factor)",
    )
    ch.value(
        "f6m_distance",
        [r["distance"] for r in ev],
        rtol=0.2,
        glue=False,
        note="|theta_healthy - theta_collapse| over all parameters, per event; trained networks",
    )
    worst = 0.0
    for r in ev:
        for t in terms:
            h = branches[r["seed"]][t]["hist"]
            if h["rho_step"] and h["rho_step"][0] == r["batch_steps"][0]:
                worst = max(worst, abs(r["first_batch"][t] / h["rho"][0] - 1))
            else:
                worst = float("inf")
    ch.value(
        "f6m_t0_is_table2",
        bool(worst <= T0_CHECK),
        note="rho at t = 0 on the first batch equals each 1x branch's first recorded rho (the Table 2 "
        f"measurement) within {T0_CHECK:g} relative",
    )
    ch.glue("f6m_t0_worst", worst)
    ch.glue("f6m_reading", line_text(summary, reading))
    ch.glue("f6m_rule", RULE_F6M)
    for lab in ("line", "random"):
        ch.glue(f"f6m_task_{lab}", summary[lab]["task"]["factor"])
    ch.glue("f6m_ts", ", ".join(f"{t:g}" for t in line["t"]))
    ch.glue("f6m_batches", LINE_BATCHES)
    ch.glue("f6m_dist_lo", min(r["distance"] for r in ev))
    ch.glue("f6m_dist_hi", max(r["distance"] for r in ev))
    rel = [r["distance"] / r["theta_norm"] for r in ev]
    ch.glue("f6m_rel_lo", min(rel))
    ch.glue("f6m_rel_hi", max(rel))
    ch.glue("f6m_healthy_step", ", ".join(str(r["healthy_step"]) for r in ev))
    ch.glue("f6m_start", ", ".join(str(r["start"]) for r in ev))
    ch.glue("f6m_differs", sum(x["differs"] for x in reading.values()))
    ch.glue("f6m_terms", len(terms))
    return reading
