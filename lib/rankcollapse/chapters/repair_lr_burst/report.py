"""Chapter `repair-lr-burst`, report: the records (``record_*``: values, counts and glued numbers for the
prose, from the runs, the bursts, their extensions, the query-key gradients and the loss gaps), the paper's
Figure 4 numbers (:data:`PAPER_FIG4`, glued by :func:`glue_paper`), the sentences the prose quotes
(:func:`onset_text`) and the tables (``table_*``).
"""

from __future__ import annotations

import numpy as np

from ...book import checks
from ...book.html_tables import html_table
from ...core.stats import spearman
from ...repair.recovery import median_around
from .experiments import CLIMB
from .verdicts import onset_bracket

# the paper's Figure 4 (depth 24, 8 held-out networks per multiplier, bursts of 200 updates): networks that
# recovered untreated per multiplier, and the recovered networks' loss above their control (nats)
PAPER_FIG4 = {
    "depth": 24,
    "networks": 8,
    "burst_steps": 200,
    "recovered": {16.0: 8, 32.0: 0},
    "gap": (0.86, 1.04),
}


PAPER = {m: f"{k}/{PAPER_FIG4['networks']} recovered" for m, k in PAPER_FIG4["recovered"].items()}


PAPER_GAP = "{:g}–{:g} nats above control (recovered)".format(*PAPER_FIG4["gap"])


def glue_paper(ch) -> None:
    """Glue the paper's Figure 4 numbers the page quotes (:data:`PAPER_FIG4`) as ``paper_*``, for
    ``glue:md``: depth, burst length, the two multipliers (low, high) with their recoveries, the gap."""
    f = PAPER_FIG4
    (lo, k_lo), (hi, k_hi) = sorted(f["recovered"].items())
    n = f["networks"]
    for k, v in {
        "depth": f["depth"],
        "burst_steps": f["burst_steps"],
        "x_low": f"{lo:g}",
        "x_high": f"{hi:g}",
        "rec_low": f"{k_lo}/{n}",
        "rec_high": f"{k_hi}/{n}",
        "gap": "{:g}–{:g}".format(*f["gap"]),
    }.items():
        ch.glue(f"paper_{k}", str(v))


def _mults(ms) -> str:
    """Multipliers as a list for the prose, "×16, ×32"."""
    return ", ".join(f"×{m:g}" for m in ms)


def record_runs(ch, p, runs: dict) -> None:
    """Glue the run parameters for the prose: burst and branch lengths, seeds, the healthy state's step and
    the multipliers."""
    ch.glue("burst_steps_g", p.burst_steps)
    ch.glue("branch_steps_g", p.branch_steps)
    ch.glue("n_seeds", len(p.seeds))
    ch.glue("start_step", runs[p.seeds[0]]["start"])
    ch.glue("mults", _mults(p.multipliers))


def record_bursts(ch, p, runs: dict, sm: dict, which: list) -> None:
    """Record per multiplier the collapsed and recovered bursts, steps to recovery, minimum and final srank
    and loss gap; the control's srank at the burst's end; the totals and the climbing count (``which``,
    from :func:`climbing`). Glue the collapsing multipliers (in some seed, in every seed, the lowest; "none"
    where there are none) and :data:`CLIMB`."""
    checks.count(
        ch,
        "collapsed",
        {f"{m:g}": sm[m]["collapsed"] for m in p.multipliers},
        of=len(p.seeds),
        note="seeds whose burst collapsed the rank, per multiplier",
    )
    checks.count(
        ch,
        "recovered",
        {f"{m:g}": sm[m]["recovered"] for m in p.multipliers},
        of={f"{m:g}": sm[m]["collapsed"] for m in p.multipliers},
        note="collapsed bursts that recovered untreated within the branch, per multiplier",
    )
    ch.value(
        "steps_to_recovery",
        {f"{m:g}": [r["recovered_after"] for r in sm[m]["rows"]] for m in p.multipliers},
        glue=False,
        atol=100,
        note="steps after the burst's end (None: no collapse or no recovery); trained",
    )
    ch.value(
        "min_srank",
        {f"{m:g}": [r["min_srank"] for r in sm[m]["rows"]] for m in p.multipliers},
        glue=False,
        rtol=0.3,
        note="minimum of the rolling-median last-block srank, per seed; trained",
    )
    ch.value(
        "final_srank",
        {f"{m:g}": [r["final_srank"] for r in sm[m]["rows"]] for m in p.multipliers},
        glue=False,
        rtol=0.3,
        note="last-block srank at the end (median of the last recover_window measurements); trained",
    )
    ch.value(
        "loss_gap",
        {f"{m:g}": [r["loss_gap"] for r in sm[m]["rows"]] for m in p.multipliers},
        glue=False,
        atol=0.15,
        note="nats, final probe loss minus the control's at the same step; trained",
    )
    control_srank = float(
        np.median(
            [
                median_around(runs[s]["control"]["hist"], runs[s]["start"] + p.burst_steps, p.recover_window)
                for s in p.seeds
            ]
        )
    )
    ch.value(
        "control_srank",
        control_srank,
        rtol=0.3,
        note="control's last-block srank at the burst's end (median over seeds); trained",
    )
    coll_m = [m for m in p.multipliers if sm[m]["collapsed"] > 0]
    all_m = [m for m in p.multipliers if sm[m]["collapsed"] == len(p.seeds)]
    ch.glue("collapsing", _mults(coll_m) or "none")
    ch.glue("collapsing_all", _mults(all_m) or "none")
    ch.glue("lowest_collapsing", f"×{min(coll_m):g}" if coll_m else "none")
    lo, hi = onset_bracket(p.multipliers, {m: sm[m]["collapsed"] for m in p.multipliers})
    ch.value(
        "onset_bracket",
        [lo, hi],
        note="the grid's multipliers around the collapse onset: the highest below the lowest collapsing one "
        "(no seed collapsed; None: the lowest tried already collapses) and that one (None: none "
        "collapsed); trained",
    )
    ch.glue("onset_txt", onset_text(p.multipliers, sm, len(p.seeds)))
    n_col = sum(sm[m]["collapsed"] for m in p.multipliers)
    n_rec = sum(sm[m]["recovered"] for m in p.multipliers)
    n_bursts = len(p.seeds) * len(p.multipliers)
    checks.count(
        ch, "n_collapsed", n_col, of=n_bursts, note="collapsed bursts over all seeds and multipliers"
    )
    checks.count(ch, "n_recovered", n_rec, of=n_col, note="of those, recovered untreated")
    ch.glue("collapsed_text", checks.count_text(n_col, n_bursts))
    ch.glue("climb", CLIMB)
    checks.count(
        ch,
        "n_climbing",
        len(which),
        of=n_col - n_rec,
        note="collapsed, not recovered, final srank at least CLIMB above its minimum",
    )


def onset_text(multipliers, sm: dict, n_seeds: int) -> str:
    """The onset bracket for the prose: "between ×10 (0 of 3 seeds collapsed) and ×12 (2 of 3)", or where
    the grid does not bracket it."""
    lo, hi = onset_bracket(multipliers, {m: sm[m]["collapsed"] for m in multipliers})
    if hi is None:
        return f"above the grid (0 of {n_seeds} seeds collapsed at ×{lo:g}, the highest tried)"
    if lo is None:
        return (
            f"below the grid (×{hi:g}, the lowest tried, collapsed {sm[hi]['collapsed']} of {n_seeds} seeds)"
        )
    return (
        f"between ×{lo:g} (0 of {n_seeds} seeds collapsed) and ×{hi:g} ({sm[hi]['collapsed']} of "
        f"{n_seeds}), a step of {hi / lo:.2g}x"
    )


def table_bursts(p, sm: dict) -> str:
    """HTML tables, two so that each fits the page's column: per multiplier, collapses and recoveries and
    the steps to recovery beside the paper's outcome; then srank and the loss gap."""

    def _f(v, fmt):
        return "–" if v is None else format(v, fmt)

    outcome = html_table(
        [
            "multiplier",
            "collapsed / seeds",
            "recovered / collapsed",
            "median steps to recovery",
            "the paper's (depth 24, 8 networks)",
        ],
        [
            [
                f"×{m:g}",
                f"{sm[m]['collapsed']} / {sm[m]['seeds']}",
                f"{sm[m]['recovered']} / {sm[m]['collapsed']}",
                _f(sm[m]["median_steps"], "g"),
                PAPER.get(m, "–") + ("; " + PAPER_GAP if m == 16.0 else ""),
            ]
            for m in p.multipliers
        ],
    )
    rank_loss = html_table(
        [
            "multiplier",
            "min srank (median)",
            "final srank (median)",
            "loss minus control (median, nats)",
            "... recovered only",
        ],
        [
            [
                f"×{m:g}",
                f"{sm[m]['min_srank']:.2f}",
                f"{sm[m]['final_srank']:.2f}",
                f"{sm[m]['loss_gap']:.3f}",
                _f(sm[m]["loss_gap_recovered"], ".3f"),
            ]
            for m in p.multipliers
        ],
    )
    return (
        "<p><em>Collapse and recovery, per multiplier:</em></p>"
        + outcome
        + "<p><em>Stable rank and loss, per multiplier:</em></p>"
        + rank_loss
    )


def record_extensions(ch, p, ext_rows: list[dict]) -> dict:
    """Record the extended bursts (steps to recovery, final srank, loss gap; how many, how many recovered)
    and glue ``extend_steps``; returns the recovered ones by (seed, multiplier), which the path section and
    the verdicts read."""
    ch.glue("extend_steps_g", p.extend_steps)
    ch.value(
        "extended_recovered_after",
        {f"seed {r['seed']} x{r['multiplier']:g}": r["recovered_after"] for r in ext_rows},
        atol=100,
        glue=False,
        note="steps after the burst's end, over branch + extension (None: not recovered); trained",
    )
    ch.value(
        "extended_final_srank",
        [r["final_srank"] for r in ext_rows],
        rtol=0.3,
        glue=False,
        note="last-block srank at the extension's end; trained",
    )
    ch.value(
        "extended_loss_gap",
        [r["loss_gap"] for r in ext_rows],
        atol=0.15,
        glue=False,
        note="nats above the extended control at the same step; trained",
    )
    ext_rec = {(r["seed"], r["multiplier"]): r for r in ext_rows if r["recovered_after"] is not None}
    checks.count(ch, "n_extended", len(ext_rows), of=None, note="bursts extended (the climbing ones)")
    checks.count(
        ch,
        "n_recovered_extended",
        len(ext_rec),
        of=len(ext_rows),
        note="of those, recovered in the extension",
    )
    return ext_rec


def table_extensions(ext_rows: list[dict]) -> str:
    """HTML table of the extended bursts (header only when none was extended)."""
    return html_table(
        [
            "seed",
            "multiplier",
            "steps to recovery after the burst",
            "final srank",
            "loss minus control (nats)",
        ],
        [
            [
                r["seed"],
                f"×{r['multiplier']:g}",
                "–" if r["recovered_after"] is None else r["recovered_after"],
                f"{r['final_srank']:.2f}",
                f"{r['loss_gap']:.3f}",
            ]
            for r in ext_rows
        ],
    )


def record_qk(ch, p, qk: dict, sm: dict, ext_rec: dict) -> dict:
    """Record the query-key gradients (after each burst, the skip collapses per seed and their median, the
    healthy median, the collapsed bursts' median, its Spearman correlation with the final srank) and glue
    them and their ratios as numbers ("–" where one side is missing) for the prose. Returns the skip
    collapses' median and per-seed values, the healthy median, the collapsed bursts' (multiplier, row)
    pairs, their Q/K gradients and whether each recovered (in the branch or its extension), which the
    verdicts read."""
    qk_skip = float(np.median(list(qk["skip"].values()))) if qk["skip"] else None
    qk_healthy = float(np.median(list(qk["healthy"].values())))
    col_rows = [(m, r) for m in p.multipliers for r in sm[m]["rows"] if r["collapsed"]]
    col_qk = [qk["burst"][r["seed"]][m] for m, r in col_rows]
    col_rec = [r["recovered_after"] is not None or (r["seed"], m) in ext_rec for m, r in col_rows]
    checks.in_decades(
        ch,
        "qk_burst",
        {f"{m:g}": [qk["burst"][s][m] for s in p.seeds] for m in p.multipliers},
        decades=1.0,
        glue=False,
        note="median Q/K gradient right after each burst; read in decades",
    )
    if qk_skip is None:
        ch.value("qk_skip_median", qk_skip, note="skip-collapsed networks: none settled")
    else:
        checks.in_decades(
            ch, "qk_skip_median", qk_skip, decades=1.0, note="skip-collapsed networks; round-off-sized"
        )
    checks.in_decades(
        ch,
        "qk_skip_by_seed",
        {str(s): v for s, v in qk["skip"].items()},
        decades=1.0,
        glue=False,
        note="each settled skip collapse (the closed reference), per seed; round-off-sized",
    )
    ch.glue(
        "qk_skip_spread",
        "–" if len(qk["skip"]) < 2 else f"{max(qk['skip'].values()) / min(qk['skip'].values()):.2g}",
    )
    ch.glue("n_skip", len(qk["skip"]))
    ch.value("qk_healthy_median", qk_healthy, rtol=1.0, note="healthy parents; order of magnitude")
    qk_col_med = float(np.median(col_qk)) if col_qk else None
    ch.value(
        "qk_collapsed_burst_median",
        qk_col_med,
        rtol=1.0,
        note="collapsed bursts only (None: none collapsed); order of magnitude",
    )
    ch.glue("qk_col_txt", "–" if qk_col_med is None else f"{qk_col_med:.2e}")
    ch.glue("qk_skip_txt", "–" if qk_skip is None else f"{qk_skip:.2e}")
    ch.glue("qk_vs_skip", "–" if qk_col_med is None or qk_skip is None else f"{qk_col_med / qk_skip:.3g}")
    ch.glue("qk_vs_healthy", "–" if qk_col_med is None else f"{qk_col_med / qk_healthy:.3g}")
    ch.glue("skip_vs_healthy", "–" if qk_skip is None else f"{qk_skip / qk_healthy:.3g}")
    ch.glue(
        "qk_by_mult",
        "; ".join(f"×{m:g}: {np.median([qk['burst'][s][m] for s in p.seeds]):.2e}" for m in p.multipliers),
    )
    rho_qk = spearman(col_qk, [r["final_srank"] for m, r in col_rows])
    ch.value(
        "qk_final_spearman",
        rho_qk,
        atol=0.3,
        note="collapsed bursts: Q/K gradient after the burst vs srank at the branch's end; "
        "None: < 4 or constant",
    )
    ch.glue("qk_spearman_txt", "–" if rho_qk is None else f"{rho_qk:.2f}")
    ch.glue("qk_spearman_within", within_multiplier_spearman(col_rows, col_qk))
    return {
        "skip": qk_skip,
        "skip_by_seed": {str(s): v for s, v in qk["skip"].items()},
        "healthy": qk_healthy,
        "col_rows": col_rows,
        "col_qk": col_qk,
        "col_rec": col_rec,
    }


def record_loss_gaps(ch, p, sm: dict, path: dict, ext_rec: dict) -> list:
    """Record the loss gaps of the bursts that collapsed and recovered (in the branch, then the extension);
    glue their count and median ("–" where none recovered), the range over every burst and the median per
    multiplier. Returns the recovered gaps, which H7 reads."""
    rec_gaps = [r["loss_gap"] for m, r in path["col_rows"] if r["recovered_after"] is not None] + [
        r["loss_gap"] for r in ext_rec.values()
    ]
    all_gaps = [r["loss_gap"] for m in p.multipliers for r in sm[m]["rows"]]
    ch.value(
        "loss_gap_recovered",
        rec_gaps,
        atol=0.15,
        glue=False,
        note="nats above the control, bursts that collapsed and recovered; trained",
    )
    ch.glue("n_gap_recovered", len(rec_gaps))
    ch.glue("gap_rec_med", "–" if not rec_gaps else f"{np.median(rec_gaps):.3f}")
    ch.glue("gap_all_lo", float(min(all_gaps)))
    ch.glue("gap_all_hi", float(max(all_gaps)))
    ch.glue("gap_by_mult", "; ".join(f"×{m:g}: {sm[m]['loss_gap']:.3f}" for m in p.multipliers))
    return rec_gaps


def within_multiplier_spearman(col_rows: list, col_qk: list) -> str:
    """The Spearman correlation of the Q/K gradient after the burst with the final srank within each
    multiplier (the pooled one mixes multipliers, which move both), as a phrase: per multiplier with at
    least four collapsed bursts and neither side constant, else why not."""
    parts = []
    for m in dict.fromkeys(m for m, _ in col_rows):
        idx = [i for i, (mm, _) in enumerate(col_rows) if mm == m]
        rho = spearman([col_qk[i] for i in idx], [col_rows[i][1]["final_srank"] for i in idx])
        parts.append(f"×{m:g} {'–' if rho is None else f'{rho:.2f}'} ({len(idx)} collapsed)")
    if not parts:
        return "not computed: no burst collapsed"
    return "; ".join(parts) + " (a dash: fewer than four collapsed bursts, or a constant side)"


def _txt(v, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def record_open_path(ch, p, qk: dict, bursts: list, R: float | None, open_factor: float) -> None:
    """The open-path lines on the skip collapses' own distribution: each settled skip collapse's Q/K as a
    fraction of its own seed's healthy parent (recorded in decades), against the old rule's line (1/10 of
    healthy) and the rule's (``open_factor`` R); the settled bursts' fractions beside, and how many reach
    1/10. Glued for the page as ``skip_frac_*``, ``line_100r_frac``, ``settled_frac_*`` and
    ``n_settled_tenth``."""
    fr = {str(s): v / qk["healthy"][s] for s, v in qk["skip"].items()}
    if fr:
        checks.in_decades(
            ch,
            "qk_skip_vs_healthy",
            fr,
            decades=1.0,
            glue=False,
            note="each settled skip collapse's Q/K over its own seed's healthy parent's; read in decades",
        )
    hmed = float(np.median(list(qk["healthy"].values())))
    ch.glue("skip_frac_lo", _txt(min(fr.values()) if fr else None, ".1e"))
    ch.glue("skip_frac_hi", _txt(max(fr.values()) if fr else None, ".1e"))
    ch.glue("skip_tenth_decades", _txt(np.log10(0.1 / max(fr.values())) if fr else None, ".1f"))
    ch.glue("line_100r_frac", _txt(None if R is None else open_factor * R / hmed, ".1e"))
    sf = [b["qk"] / qk["healthy"][b["seed"]] for b in bursts if b["settle"] == "settled"]
    ch.glue("settled_frac_lo", _txt(min(sf) if sf else None, ".2g"))
    ch.glue("settled_frac_hi", _txt(max(sf) if sf else None, ".2g"))
    checks.count(
        ch,
        "n_settled_tenth",
        sum(f >= 0.1 for f in sf),
        of=len(sf),
        note="settled bursts whose Q/K right after the burst reaches 1/10 of their own parent's (the old "
        "rule's open line)",
    )


def record_settling(ch, p, bursts: list, ev6: dict) -> None:
    """Record the bursts' classes by the settling rule (per multiplier, and in all) and the settled ones'
    untreated recoveries, as counts; glue them for the page."""
    n, n_st = len(bursts), len(ev6["qk_collapsed"])
    by = ev6["settle_by_multiplier"]
    for k in ("settled", "transient"):
        checks.count(
            ch,
            f"{k}_by_multiplier",
            {m: c[k] for m, c in by.items()},
            of=len(p.seeds),
            note=f"bursts {k} by the skip drivers' settling rule, per multiplier",
        )
    checks.count(
        ch, "n_settled", n_st, of=n, limits=(0.5,), note="bursts settled into a collapse (H6 needs one)"
    )
    checks.count(ch, "n_transient", ev6["n_transient"], of=n, note="bursts that only dipped (transient)")
    checks.count(ch, "n_open_ended", ev6["n_open_ended"], of=n, note="crossed too late to tell")
    n_rec = sum(ev6["recovered"])
    checks.count(
        ch,
        "n_settled_recovered",
        n_rec,
        of=n_st,
        limits=(0.5,),
        note="settled bursts that recovered untreated, branch or extension (H6 needs one)",
    )
    checks.count(
        ch,
        "n_back_in_burst",
        ev6["n_back_in_burst"],
        of=n_st,
        note="settled bursts back above the recovery threshold by the burst's end (not untreated)",
    )
    ch.value(
        "settled_recovered_after",
        {b["label"]: b["recovered_branch"] for b in bursts if b["settle"] == "settled"},
        atol=100,
        glue=False,
        note="settled bursts: steps after the burst to an untreated recovery within the branch (None: "
        "none there); trained",
    )
    ch.glue("settle_txt", checks.count_text(n_st, n) if n else "–")
    ch.glue(
        "transient_list",
        ", ".join(ev6["transient"]) if ev6["transient"] else "none",
    )
    ch.glue(
        "settle_by_mult",
        "; ".join(f"×{m}: {c['settled']} settled, {c['transient']} transient" for m, c in by.items()),
    )
