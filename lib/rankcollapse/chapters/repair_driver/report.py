"""Chapter `repair-driver`, report: what the page records (``record_*``: the corpus, the drivers' outcomes,
the loss and attention entropy at the collapse, the healthy networks' early dip, the knife-edge, the
branches from each collapse; checked values and glued numbers) and the HTML tables of the drivers and the
branches (``table_*``).
"""

from __future__ import annotations

from ...book import checks
from ...book.html_tables import html_table
from ...repair import drivers
from .experiments import BRANCHES, final_srank


def record_corpus(ch, p, info: dict) -> None:
    """Record the corpus (files, bytes, sha256 prefix) and its frequency-table loss; glue the sha prefix and
    the number of seeds for the prose."""
    checks.exact(
        ch,
        "corpus_files",
        info["files"],
        why="this Python's standard library sets it (another Python version differs)",
        note="top-level stdlib .py files of this Python",
    )
    checks.exact(ch, "corpus_bytes", info["bytes"], why="this Python's standard library sets it")
    ch.value(
        "corpus_sha256",
        info["sha256"][:16],
        glue=False,
        note="sha256 of the concatenated bytes (first 16 hex)",
    )
    ch.glue("corpus_sha", info["sha256"][:16])
    ch.value(
        "unigram_loss",
        info["unigram"],
        rtol=1e-9,
        note="entropy of the byte frequency table; exact arithmetic",
    )
    ch.glue("n_seeds", len(p.seeds))


def record_events(ch, ev: list[dict]) -> list[dict]:
    """Record the drivers' outcomes (settled count and steps, self-heals, final srank of drivers and healthy
    networks); returns the settled events, which the collapse section and the H1 verdict read."""
    settled = [e for e in ev if e["settled"] is not None]
    checks.count(
        ch,
        "settled_count",
        len(settled),
        of=len(ev),
        limits=(0.5, len(ev) // 2 + 0.5),
        note="drivers whose collapse settled; H1 reads it against none and more than half",
    )
    ch.value(
        "settled_steps",
        [e["settled"] for e in ev],
        atol=200,
        note="steps; trained networks drift on other machines, the ramp fixes them to within ~200",
    )
    checks.count(
        ch,
        "heal_events",
        sum(len(e["heals"]) for e in ev),
        of=None,
        note="self-healing crossings during the drivers",
    )
    ch.value(
        "final_srank_driver",
        [e["final_srank"] for e in ev],
        rtol=0.3,
        note="trained networks; srank is noisy",
    )
    ch.value(
        "final_srank_healthy", [e["healthy_final_srank"] for e in ev], rtol=0.3, note="trained networks"
    )
    return settled


def table_events(ev: list[dict]) -> str:
    """HTML table of the drivers, one row per seed (loss columns only for a settled collapse)."""
    rows = [
        [
            e["seed"],
            e["first_cross"],
            e["settled"],
            len(e["heals"]),
            f"{e['final_srank']:.2f}",
            f"{e['healthy_final_srank']:.2f}",
        ]
        + (
            [f"{e['collapse_loss']:.3f}", f"{e['healthy_loss_same_step']:.3f}"]
            if e["settled"] is not None
            else ["–", "–"]
        )
        for e in ev
    ]
    return html_table(
        [
            "seed",
            "first crossing",
            "settled (saved)",
            "self-heals",
            "final srank",
            "healthy final srank",
            "loss at collapse",
            "healthy loss, same step",
        ],
        rows,
    )


def record_collapse(ch, settled: list[dict], ev: list[dict], info: dict) -> None:
    """Record the probe loss and attention entropy at the saved collapses (when any settled) and of the
    healthy networks at their last step; glue their ranges (NaN where nothing settled) for the prose."""
    if settled:
        cl = [e["collapse_loss"] for e in settled]
        ch.value("collapse_loss", cl, rtol=0.05, note="probe loss at the saved collapse; trained networks")
        ch.value(
            "collapse_minus_unigram",
            [x - info["unigram"] for x in cl],
            atol=0.15,
            note="nats; trained networks",
        )
        ch.value(
            "healthy_loss_at_collapse",
            [e["healthy_loss_same_step"] for e in settled],
            rtol=0.05,
            note="healthy network, same seed and step",
        )
        ch.value(
            "collapse_entropy",
            [e["collapse_entropy"] for e in settled],
            atol=0.1,
            note="normalised attention entropy, mean over blocks; trained networks",
        )
        ch.value(
            "collapse_entropy_last",
            [e["collapse_entropy_last"] for e in settled],
            atol=0.1,
            note="normalised attention entropy of the last block; trained networks",
        )
        ch.glue("entl_lo", min(e["collapse_entropy_last"] for e in settled))
        ch.glue("entl_hi", max(e["collapse_entropy_last"] for e in settled))
        ch.glue("cl_lo", min(cl))
        ch.glue("cl_hi", max(cl))
        ch.glue("ent_lo", min(e["collapse_entropy"] for e in settled))
        ch.glue("ent_hi", max(e["collapse_entropy"] for e in settled))
    else:
        for k in ("cl_lo", "cl_hi", "ent_lo", "ent_hi", "entl_lo", "entl_hi"):
            ch.glue(k, float("nan"))
    he = [e["healthy_final_entropy"] for e in ev]
    ch.value(
        "healthy_entropy",
        he,
        atol=0.1,
        note="normalised attention entropy of the healthy networks at their last step",
    )
    ch.glue("hent_lo", min(he))
    ch.glue("hent_hi", max(he))
    hel = [e["healthy_final_entropy_last"] for e in ev]
    ch.value("healthy_entropy_last", hel, atol=0.1, note="last block, healthy networks at their last step")
    ch.glue("hentl_lo", min(hel))
    ch.glue("hentl_hi", max(hel))
    ch.glue("hloss_lo", min(e["healthy_final_loss"] for e in ev))


def record_dips(ch, dips: list[dict]) -> None:
    """Record the healthy networks' early dip (lowest srank, its step, runs below the threshold); glue the
    lowest dip, the first seed's step and the lowest final srank for the prose."""
    ch.value("healthy_min_srank", [d["min_srank"] for d in dips], rtol=0.3, note="trained networks")
    ch.value("healthy_min_step", [d["min_step"] for d in dips], atol=100, note="steps; trained networks")
    checks.count(
        ch,
        "healthy_dips_below",
        {str(i): len(d["below"]) for i, d in enumerate(dips)},
        of=None,
        note="per healthy run: stretches of measurements below the threshold; trained networks",
    )
    ch.glue("dip_min", min(d["min_srank"] for d in dips))
    ch.glue("dip_step", dips[0]["min_step"])
    ch.glue("healthy_final_min", min(d["final"] for d in dips))


def record_knife_edge(ch, p, runs: dict) -> None:
    """Record the final srank per floor alpha_min and per depth; glue the collapsed floors and depths
    (lists, or "none") and the depth-6 outcome ("collapsed" or "not collapsed" with its final srank, or
    "not run"). Which side of the threshold a depth lands on is prose, not a recorded value: at smoke it
    changes with the floating-point kernels (depth 6 ended at 1.03 under the native kernels and 1.58 under
    avx2 when this was written), so the record holds the sranks, within their measured spread."""
    fa = {a: final_srank(runs["alpha"][a]) for a in sorted(runs["alpha"])}
    fd = {d: final_srank(runs["depth"][d]) for d in sorted(runs["depth"])}
    ch.value(
        "knife_alpha",
        {f"{a:g}": v for a, v in fa.items()},
        rtol=0.3,
        note="final srank per alpha_min; trained",
    )
    ch.value(
        "knife_depth", {str(d): v for d, v in fd.items()}, rtol=0.3, note="final srank per depth; trained"
    )
    col_a = [a for a, v in fa.items() if v < p.threshold]
    col_d = [d for d, v in fd.items() if v < p.threshold]
    ch.glue("alpha_collapsed", ", ".join(f"{a:g}" for a in col_a) or "none")
    ch.glue("depth_collapsed", ", ".join(str(d) for d in col_d) or "none")
    ch.glue("depth_healthy", ", ".join(str(d) for d in fd if d not in col_d) or "none")
    ch.glue(
        "depth6_md",
        "not run"
        if 6 not in fd
        else ("collapsed" if fd[6] < p.threshold else "not collapsed") + f" (final srank {fd[6]:.2f})",
    )


def record_branches(ch, p, study, settled: list[dict], rows: list[dict], healthy_settled: dict) -> None:
    """Record the branches without a loss term from each saved collapse, read by the recovery rule (per
    :data:`~rankcollapse.chapters.repair_driver.experiments.BRANCHES`: events recovered, and the final
    srank), and the healthy networks the drivers' detector settled on; glue the ranges the prose quotes: the
    recovery thresholds, the untreated branches' final srank, the steps from each settled collapse to the
    driver's end (where the previous rule read the heal) and the branch's length."""
    n = len(rows)
    checks.count(
        ch,
        "branch_recovered",
        {t: sum(r[t]["recovered_after"] is not None for r in rows) for t in BRANCHES},
        of=n,
        limits=(0.5, n // 2 + 0.5),
        note="settled collapses whose branch recovered by the recovery rule (the stricter threshold); H1 "
        "(and its control, on the reversed ramp) reads it against none and more than half",
    )
    ch.value(
        "branch_final_srank",
        {t: [r[t]["final_srank"] for r in rows] for t in BRANCHES},
        rtol=0.3,
        note="median of each branch's last recover_window measurements; trained networks",
    )
    checks.count(
        ch,
        "healthy_settled",
        sum(v is not None for v in healthy_settled.values()),
        of=len(healthy_settled),
        limits=(0.5,),
        note="H1's second control reads it against none: healthy networks on which the drivers' detector "
        "(armed at ramp_start) settled by the driver's end",
    )
    for t, key in (("untreated", "untreated"), ("reversed-ramp", "reversed")):
        ch.glue(f"{key}_recovered", sum(r[t]["recovered_after"] is not None for r in rows))
    ch.glue("branch_steps", p.branch_steps)
    ch.glue("recover_span", p.recover_window * drivers.run_spec(study, p.seeds[0]).measure_every)
    end = drivers.driver_steps(study)
    nan = float("nan")
    ch.glue("rt_lo", min((r["rec_threshold"] for r in rows), default=nan))
    ch.glue("rt_hi", max((r["rec_threshold"] for r in rows), default=nan))
    uf = [r["untreated"]["final_srank"] for r in rows]
    ch.glue("untreated_final_lo", min(uf, default=nan))
    ch.glue("untreated_final_hi", max(uf, default=nan))
    gaps = [end - e["settled"] for e in settled]
    ch.glue("driver_after_lo", min(gaps, default=nan))
    ch.glue("driver_after_hi", max(gaps, default=nan))


def table_branches(rows: list[dict]) -> str:
    """HTML table of the branches from each saved collapse, one row per event: its recovery threshold, and
    per branch its final srank and the steps after the switch until it recovered ("–": never)."""

    def rec(x):
        return "–" if x is None else x

    body = [
        [
            r["seed"],
            r["start"],
            f"{r['rec_threshold']:.2f}",
            f"{r['untreated']['final_srank']:.2f}",
            rec(r["untreated"]["recovered_after"]),
            f"{r['reversed-ramp']['final_srank']:.2f}",
            rec(r["reversed-ramp"]["recovered_after"]),
        ]
        for r in rows
    ]
    return html_table(
        [
            "seed",
            "switch step",
            "recovery threshold",
            "untreated: final srank",
            "untreated: recovered after",
            "reversed ramp: final srank",
            "reversed ramp: recovered after",
        ],
        body,
    )
