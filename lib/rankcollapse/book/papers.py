"""The papers' numbers beside this build's: every number the two papers report that the book measures (from
the specification: Figure 2's approximate layer values, the toy tasks' accuracies, the collapse loss and
entropies, Table 2, the force figures, the switch recoveries and times, the hysteresis, the burst outcomes),
each with the value this build measured, read from the chapters' results files, their ratio where both are
numbers, and how the setups differ.

The runner's side (no chapter imports it): the book's staging (:mod:`rankcollapse.book.build`) writes the
page *The papers' numbers beside ours* from :func:`page` and appends each chapter's rows to its page
(:func:`chapter_markdown`). A number this build did not measure says so; nothing is typed in but the
papers' own numbers, which are quoted from the specification.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .results import load

Ours = tuple[str, float | None]  # (as shown, the number the ratio uses)


@dataclass(frozen=True)
class PaperNumber:
    chapter: str
    source: str  # figure / table / section of the paper
    what: str
    paper: str  # as the paper (or the spec, reading the paper's figure) states it
    paper_value: float | None  # the number the ratio uses; None: not a single number
    ours: Callable[[dict], Ours | None]  # from the chapter's results values; None: not measured here
    setup: str  # how this build's setup differs


def _v(values: dict, key: str) -> Any:
    e = values.get(key)
    return e.get("value") if isinstance(e, dict) else None


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def scalar(key: str, fmt: str = ".3g") -> Callable[[dict], Ours | None]:
    def f(values):
        x = _v(values, key)
        return (format(x, fmt), float(x)) if _num(x) else None

    return f


def mean_of(key: str) -> Callable[[dict], Ours | None]:
    """Mean over a per-seed list, shown with its range."""

    def f(values):
        xs = [x for x in (_v(values, key) or []) if _num(x)]
        if not xs:
            return None
        m = statistics.fmean(xs)
        return (f"{m:.3g} (mean of {len(xs)}; {min(xs):.3g}–{max(xs):.3g})", m)

    return f


def range_of(key: str, sub: str | None = None) -> Callable[[dict], Ours | None]:
    """Range and median over a per-event list (or over ``value[sub]``)."""

    def f(values):
        v = _v(values, key)
        if sub is not None:
            v = v.get(sub) if isinstance(v, dict) else None
        xs = [x for x in (v or []) if _num(x)]
        if not xs:
            return None
        med = statistics.median(xs)
        return (f"{min(xs):.3g} to {max(xs):.3g} (median {med:.3g}, {len(xs)} events)", med)

    return f


def first_collapse_layer(key: str) -> Callable[[dict], Ours | None]:
    def f(values):
        x = _v(values, key)
        if not _num(x):
            return None
        return ("never" if x < 0 else f"layer {int(x)}", None)

    return f


def table2(treatment: str, field_: str) -> Callable[[dict], Ours | None]:
    def f(values):
        t = (_v(values, "table2") or {}).get(treatment) or {}
        x = t.get(field_)
        return (f"{x:.3g}", float(x)) if _num(x) else None

    return f


def count_of(key: str, sub: str, events_key: str = "events") -> Callable[[dict], Ours | None]:
    """``value[sub]`` out of the number of events (``events_key``, a count or a list per event)."""

    def f(values):
        k = (_v(values, key) or {}).get(sub)
        n = _v(values, events_key)
        n = len(n) if isinstance(n, list) else n
        if not _num(k) or not _num(n) or n == 0:
            return None
        return (f"{int(k)} of {int(n)}", k / n)

    return f


def loss_terms_recovered(values) -> Ours | None:
    rec, n = _v(values, "recovered") or {}, _v(values, "events")
    terms = [t for t in rec if t not in ("untreated", "reversed-ramp")]
    if not terms or not _num(n) or n == 0:
        return None
    k = sum(rec[t] for t in terms)
    return (f"{k} of {int(n) * len(terms)} ({len(terms)} terms × {int(n)} events)", k / (n * len(terms)))


def median_steps(alpha: str) -> Callable[[dict], Ours | None]:
    def f(values):
        xs = [x for x in ((_v(values, "switch_steps") or {}).get(alpha) or []) if _num(x)]
        if not xs:
            return None
        m = statistics.median(xs)
        return (f"{m:.0f} (median of {len(xs)} recovered)", m)

    return f


def burst(mult: str) -> Callable[[dict], Ours | None]:
    def f(values):
        col = (_v(values, "collapsed") or {}).get(mult)
        rec = (_v(values, "recovered") or {}).get(mult)
        if not _num(col):
            return None
        if col == 0:
            return ("no burst collapsed", None)
        return (f"{int(rec)} of {int(col)} collapsed bursts recovered", rec / col)

    return f


def hysteresis(values) -> Ours | None:
    col = [x for x in (_v(values, "alpha_at_collapse") or []) if _num(x) and x > 0]
    rec = [x for x in (_v(values, "alpha_at_recovery") or []) if _num(x)]
    if not col or not rec:
        return None
    r = statistics.median(rec) / statistics.median(col)
    return (f"{r:.3g}× (α {statistics.median(col):.3g} → {statistics.median(rec):.3g}, medians)", r)


def ratio_of(a: str, b: str) -> Callable[[dict], Ours | None]:
    def f(values):
        x, y = _v(values, a), _v(values, b)
        if not (_num(x) and _num(y)) or y == 0:
            return None
        return (f"{x / y:.3g} ({x:.3g} / {y:.3g})", x / y)

    return f


def open_fade(values) -> Ours | None:
    """The hinge's first-to-last gradient ratio on networks with the path open (repair-path's baseline for
    H3's fade), with the collapsed networks' median ratio over it."""
    x, m = _v(values, "h3_fade_open"), _v(values, "h3_fade_vs_open")
    if not _num(x):
        return None
    tail = f" (the collapsed networks' median per event: {m:.2g} of it)" if _num(m) else ""
    return (f"{x:.3g}{tail}", None)


def line_factors(values) -> Ours | None:
    """Figure 6 middle: per 1x term, rho at the healthy end of the line over rho at the collapse, beside the
    same along a random direction of the same length (repair-treatments' ``f6m_factor``, medians over
    events), with the chapter's reading of each."""
    fac, rd = _v(values, "f6m_factor") or {}, _v(values, "f6m_reading") or {}
    line, rand = fac.get("line") or {}, fac.get("random") or {}
    terms = [t for t in line if _num(line[t]) and _num(rand.get(t))]
    if not terms:
        return None

    def word(t, lab):
        w = (rd.get(t) or {}).get(lab)
        return f" {w}" if isinstance(w, str) else ""

    parts = [
        f"{t}: ×{line[t]:.3g}{word(t, 'line')} towards healthy, ×{rand[t]:.3g}{word(t, 'random')} at random"
        for t in terms
    ]
    return ("; ".join(parts) + " (ρ at t = 1 over t = 0, medians over events)", None)


COLLAPSE_SRANK = 1.5  # the specification's collapse threshold on the last block's srank


def knife_edge(values) -> Ours | None:
    """The largest floor alpha_min of the knife-edge grid (first seed, main depth) whose final srank is below
    the collapse threshold, with the grid's final sranks."""
    ka = _v(values, "knife_alpha") or {}
    fin = {float(a): x for a, x in ka.items() if _num(x)}
    if not fin:
        return None
    grid = ", ".join(f"{a:g}: {x:.2f}" for a, x in sorted(fin.items()))
    col = [a for a, x in fin.items() if x < COLLAPSE_SRANK]
    if not col:
        return (f"none of the floors collapses (final srank per α_min: {grid})", None)
    return (f"α_min ≤ {max(col):g} (final srank per α_min: {grid})", max(col))


def ranking(key: str, what: str, sign: int | None, line: float = 0.5) -> Callable[[dict], Ours | None]:
    """A Spearman correlation the paper's figure shows as a ranking (``sign`` its direction), with whether
    this build reproduces it: at least ``line`` in that direction (``sign`` None: shown, judged on the
    chapter's page by its own rule)."""

    def f(values):
        x = _v(values, key)
        if not _num(x):
            return ("not computed (too few points)" + ("" if sign is None else ": not reproduced"), None)
        if sign is None:
            return (f"Spearman {x:.2f} {what}", None)
        ok = sign * x >= line
        return (f"Spearman {x:.2f} {what}: {'reproduced' if ok else 'not reproduced'}", None)

    return f


LM = (
    "byte-level LM on the stdlib sources, width 48, context 32, depth 12 "
    "(paper: GPT-2 vocabulary, width 128, context 256)"
)
MINILM = (
    "pretrained BERT here is MiniLM (6 layers, hidden 384): bert-base-cased cannot be downloaded offline"
)

OWN_BERT = (
    "pretrained BERT here is the book's own, seed 0 (real-models' train_* parameters; masked LM on the "
    "pydoc text), not bert-base-cased"
)

NUMBERS: list[PaperNumber] = [
    PaperNumber(
        "collapse",
        "Dong Thm 2.2",
        "per-layer exponent of log ‖res‖ (decaying regime)",
        "3 (cubic)",
        3.0,
        scalar("exponent_decaying_median"),
        "random SANs over weight scales, widths and heads",
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT at init: r(X) at layer 0",
        "≈0.60",
        0.60,
        scalar("r0_bert_init"),
        "pydoc text here; the authors' text differs",
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT at init: SAN+skip at the last layer",
        "≈0.45",
        0.45,
        scalar("rL_bert_init_san_skip"),
        "",
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT at init: transformer at the last layer",
        "≈0.35",
        0.35,
        scalar("rL_bert_init_transformer"),
        "",
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT at init: SAN reaches ≈0",
        "by layer 1–2",
        None,
        first_collapse_layer("collapse_layer_bert_init_san"),
        "collapse layer by the chapter's rule",
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT pretrained: r(X) at layer 0",
        "≈0.69",
        0.69,
        scalar("r0_bert_pretrained"),
        MINILM,
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT pretrained: SAN+skip at the last layer",
        "≈0.07",
        0.07,
        scalar("rL_bert_pretrained_san_skip"),
        MINILM,
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT pretrained: transformer at the last layer",
        "≈0.3",
        0.3,
        scalar("rL_bert_pretrained_transformer"),
        MINILM,
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT pretrained: SAN+MLP reaches ≈0",
        "by ~layer 4",
        None,
        first_collapse_layer("collapse_layer_bert_pretrained_san_mlp"),
        MINILM,
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "BERT pretrained: SAN reaches ≈0",
        "by ~layer 5",
        None,
        first_collapse_layer("collapse_layer_bert_pretrained_san"),
        MINILM,
    ),
    *(
        PaperNumber(
            "real-models",
            "Dong Fig. 2",
            f"BERT pretrained: {what}",
            paper,
            value,
            ours(key),
            OWN_BERT,
        )
        for what, paper, value, ours, key in (
            ("r(X) at layer 0", "≈0.69", 0.69, scalar, "r0_bert_trained_s0"),
            ("SAN+skip at the last layer", "≈0.07", 0.07, scalar, "rL_bert_trained_s0_san_skip"),
            ("transformer at the last layer", "≈0.3", 0.3, scalar, "rL_bert_trained_s0_transformer"),
            (
                "SAN+MLP reaches ≈0",
                "by ~layer 4",
                None,
                first_collapse_layer,
                "collapse_layer_bert_trained_s0_san_mlp",
            ),
            (
                "SAN reaches ≈0",
                "by ~layer 5",
                None,
                first_collapse_layer,
                "collapse_layer_bert_trained_s0_san",
            ),
        )
    ),
    PaperNumber(
        "real-models",
        "Dong Fig. 2",
        "XLNet at init: r(X) at layer 0",
        "1.0",
        1.0,
        scalar("r0_xlnet_init"),
        "",
    ),
    PaperNumber(
        "toy-tasks",
        "Dong Fig. 4",
        "sort: token accuracy of the full model",
        "0.98",
        0.98,
        mean_of("sort_bert_full_acc"),
        "the authors' architecture, trained here for fewer steps",
    ),
    PaperNumber(
        "toy-tasks",
        "Dong Fig. 4",
        "sort: baseline",
        "0.1 (chance)",
        0.1,
        scalar("sort_bert_baseline"),
        "here the best input-blind predictor (the position-only prior), not chance",
    ),
    PaperNumber(
        "toy-tasks",
        "Dong Fig. 4",
        "convex hull: accuracy of the full model",
        "0.9",
        0.9,
        mean_of("hull_bert_full_acc"),
        "",
    ),
    PaperNumber(
        "toy-tasks",
        "Dong Fig. 4",
        "convex hull: majority rate",
        "0.54",
        0.54,
        scalar("hull_bert_baseline"),
        "",
    ),
    PaperNumber(
        "toy-tasks",
        "Dong Fig. 4",
        "memorisation: accuracy of the full model",
        "0.85",
        0.85,
        mean_of("mem_bert_full_acc"),
        "fewer sequences and a narrower model at full",
    ),
    PaperNumber(
        "repair-driver",
        "Hofmann §4",
        "settled collapse events",
        "8",
        8.0,
        scalar("settled_count", ".0f"),
        LM,
    ),
    PaperNumber(
        "repair-driver",
        "Hofmann §4",
        "collapse loss minus the frequency-table loss (nats)",
        "−0.09 to −0.01 (7.55–7.63 against 7.64)",
        None,  # a range across 0: no ratio
        range_of("collapse_minus_unigram"),
        LM + "; the gap, not the absolute loss, is comparable",
    ),
    PaperNumber(
        "repair-driver",
        "Hofmann §4",
        "normalised attention entropy, collapsed",
        "0.94–0.99",
        0.965,
        range_of("collapse_entropy"),
        LM,
    ),
    PaperNumber(
        "repair-driver",
        "Hofmann §4",
        "normalised attention entropy, healthy",
        "0.65–0.69",
        0.67,
        range_of("healthy_entropy"),
        LM,
    ),
    PaperNumber(
        "repair-driver",
        "Hofmann Fig. 5, left",
        "knife-edge: the floors α_min that collapse at depth 12",
        "only α_min ≤ 0.02",
        0.02,
        knife_edge,
        LM + "; first seed only; the smoke profile's floor and ramp differ",
    ),
    *[
        PaperNumber(
            "repair-treatments",
            "Hofmann Table 2",
            f"ρ median, {t}",
            p,
            pv,
            table2(t, "rho_median"),
            LM,
        )
        for t, p, pv in [
            ("penalty-1x", "0.0032", 0.0032),
            ("hinge-1x", "0.0887", 0.0887),
            ("penalty-4x", "0.0130", 0.0130),
            ("hinge-4x", "0.3071", 0.3071),
            ("cosine-1x", "0.0618", 0.0618),
        ]
    ],
    *[
        PaperNumber(
            "repair-treatments",
            "Hofmann Table 2",
            f"clipped-step fraction, {t}",
            p,
            pv,
            table2(t, "clip_fraction"),
            LM,
        )
        for t, p, pv in [
            ("penalty-1x", "0.22", 0.22),
            ("hinge-1x", "0.44", 0.44),
            ("penalty-4x", "0.21", 0.21),
            ("hinge-4x", "0.60", 0.60),
            ("cosine-1x", "0.40", 0.40),
        ]
    ],
    PaperNumber(
        "repair-treatments",
        "Hofmann Fig. 6",
        "penalty gradient on X = a vᵀ + δE at δ = 1",
        "4.9e-4",
        4.9e-4,
        scalar("synth_pen_d1"),
        "another size and scale of the synthetic X",
    ),
    PaperNumber(
        "repair-treatments",
        "Hofmann Fig. 6",
        "penalty gradient at the smallest δ",
        "3.5e-8 (δ = 1e-4)",
        3.5e-8,
        scalar("synth_pen_dmin"),
        "another size and scale of the synthetic X",
    ),
    PaperNumber(
        "repair-treatments",
        "Hofmann Fig. 6",
        "hinge gradient at the smallest δ (constant in δ)",
        "0.022",
        0.022,
        scalar("synth_hinge"),
        "another normalisation of the synthetic X: what compares is that it does not vanish",
    ),
    PaperNumber(
        "repair-treatments",
        "Hofmann Fig. 6, middle",
        "ρ along the line from the collapse to the healthy network, beside a random direction",
        "drawn, not stated in words",
        None,
        line_factors,
        LM + "; the healthy network's saved end state, not its state at the collapse's step; α held at "
        "α_min along the line",
    ),
    PaperNumber(
        "repair-treatments",
        "Hofmann Fig. 1",
        "loss-term branches that recovered",
        "0 of 40 (0/8 per term)",
        0.0,
        loss_terms_recovered,
        LM + "; the book's stricter recovery threshold",
    ),
    PaperNumber(
        "repair-treatments",
        "Hofmann Fig. 1",
        "reversed ramp recovered",
        "recovered (8 of 8)",
        1.0,
        count_of("recovered", "reversed-ramp"),
        LM,
    ),
    PaperNumber(
        "repair-path",
        "Hofmann Fig. 2",
        "hinge gradient, first block over last",
        "≈570 (0.34 / 6e-4)",
        570.0,
        ratio_of("hinge_first", "hinge_last"),
        LM + "; H3 reads the fade against the same ratio on an open path (next row), not alone",
    ),
    PaperNumber(
        "repair-path",
        "Hofmann Fig. 2",
        "hinge gradient, first block over last, on networks with the path open",
        "not reported",
        None,
        open_fade,
        LM + "; the healthy network at each event's step and the same-depth drivers that did not settle, "
        "under the same hinge: averaged over blocks, it falls from the first block to the last on any "
        "network",
    ),
    PaperNumber(
        "repair-path",
        "Hofmann Fig. 2, bottom",
        "rise of the Q/K gradient when the skip is restored",
        "≈1e7",
        1e7,
        scalar("reopen_factor"),
        LM,
    ),
    *[
        PaperNumber(
            "repair-path",
            "Hofmann Fig. 3",
            f"held switch to α = {a}: recovered",
            p,
            pv,
            count_of("switch_recovered", a),
            LM + "; the book's stricter recovery threshold",
        )
        for a, p, pv in [("0.1", "2 of 8", 0.25), ("0.3", "7 of 8", 7 / 8), ("0.6", "8 of 8", 1.0)]
    ],
    *[
        PaperNumber(
            "repair-path",
            "Hofmann Fig. 3",
            f"held switch to α = {a}: steps to recovery",
            p,
            pv,
            median_steps(a),
            LM,
        )
        for a, p, pv in [
            ("0.1", "94 (median)", 94.0),
            ("0.3", "71 (median)", 71.0),
            ("0.6", "50 (median)", 50.0),
        ]
    ],
    PaperNumber(
        "repair-path",
        "Hofmann Fig. 7",
        "delayed switches: the longer collapsed, the slower or rarer the recovery",
        "slower or rarer (a trend, no single number)",
        None,
        ranking("delay_spearman", "of the delay with the (censored) recovery time (H5 judges it)", None),
        LM + "; delays scaled to the branch length",
    ),
    PaperNumber(
        "repair-path",
        "Hofmann Fig. 8",
        "the predictor (median Q/K gradient right after the switch) ranks recovery times",
        "ranked (a larger gradient, a faster recovery)",
        None,
        ranking("predictor_spearman_time", "with the recovered switches' recovery time", -1),
        LM + "; within each switch scale; reproduced here means a Spearman of -0.5 or below",
    ),
    PaperNumber(
        "repair-path",
        "Hofmann §7",
        "hysteresis: α at recovery over α at collapse (reversed ramp)",
        "≥ 12",
        None,  # a bound: no ratio
        hysteresis,
        LM + "; includes the detection lag",
    ),
    PaperNumber(
        "repair-path",
        "Hofmann §7",
        "loss above the healthy network after the switch to α = 0.6 (nats)",
        "0.21–0.56 after recovery",
        0.38,
        range_of("switch_loss_gap", "0.6"),
        LM,
    ),
    PaperNumber(
        "repair-lr-burst",
        "Hofmann Fig. 4",
        "burst ×16: recovered untreated",
        "8 of 8 (depth 24)",
        1.0,
        burst("16"),
        LM + "; depth 12 here, so the multipliers that collapse differ",
    ),
    PaperNumber(
        "repair-lr-burst",
        "Hofmann Fig. 4",
        "burst ×32: recovered untreated",
        "0 of 8 (depth 24)",
        0.0,
        burst("32"),
        LM + "; depth 12 here",
    ),
    PaperNumber(
        "repair-lr-burst",
        "Hofmann Fig. 4, left",
        "Q/K gradient right after a collapsing burst, over the healthy network's",
        "open (no single number)",
        None,
        ratio_of("qk_collapsed_burst_median", "qk_healthy_median"),
        LM + "; medians over the collapsed bursts and the healthy parents",
    ),
    PaperNumber(
        "repair-lr-burst",
        "Hofmann Fig. 4, left",
        "Q/K gradient at the skip collapse, over the healthy network's",
        "closed (below 1e-6 everywhere, Fig. 2)",
        None,
        ratio_of("qk_skip_median", "qk_healthy_median"),
        LM + "; the skip-collapsed networks of repair-driver, medians",
    ),
    PaperNumber(
        "repair-lr-burst",
        "Hofmann Fig. 4",
        "loss above the paired control after recovery (nats)",
        "0.86–1.04",
        0.95,
        range_of("loss_gap_recovered"),
        LM,
    ),
]


def rows(chapter: str, values: dict | None) -> list[tuple[PaperNumber, Ours | None, str]]:
    """(number, this build's value or None, ratio as text) for every paper number of ``chapter``."""
    out = []
    for pn in NUMBERS:
        if pn.chapter != chapter:
            continue
        ours = pn.ours(values) if values is not None else None
        ratio = "–"
        if ours is not None and ours[1] is not None and pn.paper_value not in (None, 0.0):
            ratio = f"{ours[1] / pn.paper_value:.3g}"
        out.append((pn, ours, ratio))
    return out


def _table(rs, with_chapter: bool, linked=()) -> list[str]:
    head = (
        "| "
        + ("chapter | " if with_chapter else "")
        + "number (source) | paper | this build | ratio | setup |"
    )
    lines = [head, "|" + "---|" * (6 if with_chapter else 5)]
    for pn, ours, ratio in rs:
        shown = ours[0] if ours is not None else "not measured in this build"
        name = f"[{pn.chapter}]({pn.chapter}.ipynb)" if pn.chapter in linked else f"`{pn.chapter}`"
        ch = f"{name} | " if with_chapter else ""
        lines.append(
            f"| {ch}{pn.what} ({pn.source}) | {pn.paper} | {shown} | {ratio} | {pn.setup or '–'} |".replace(
                "\n", " "
            )
        )
    return lines


def chapter_markdown(chapter: str, values: dict | None) -> str | None:
    """The small table a chapter page ends with (before its rerun section); None for a chapter the papers
    report no number of."""
    rs = rows(chapter, values)
    if not rs:
        return None
    return (
        "\n".join(
            [
                "## The papers' numbers beside this page's",
                "",
                "Each number the papers report that this page measures, beside this build's value (read "
                "from its results file) and their ratio; *setup* says where the two setups differ. All "
                "chapters: {doc}`paper-numbers`.",
                "",
                *_table(rs, with_chapter=False),
            ]
        )
        + "\n"
    )


def page(build: Path, profile: str, chapters: list[str]) -> str:
    """The page listing every paper number beside this build's value, chapter by chapter."""
    lines = [
        "# The papers' numbers beside ours",
        "",
        f"Every number the two papers report that this book measures, beside the value this build (profile "
        f"**`{profile}`**) measured, read from each chapter's results file, with their ratio (ours over the "
        "paper's) where both are single numbers. The papers' numbers are quoted from the specification "
        "(Figure 2's values are read off the authors' figure, so approximate). *Setup* says where this "
        "build's setup differs: at CPU scale a ratio far from 1 is often the setup, not a disagreement; "
        "each chapter says which.",
        "",
    ]
    all_rows = []
    for ch in dict.fromkeys(pn.chapter for pn in NUMBERS):
        p = Path(build) / ch / "results.json"
        values = load(p).get("values", {}) if (ch in chapters and p.exists()) else None
        all_rows += rows(ch, values)
    lines += _table(all_rows, with_chapter=True, linked=chapters)
    return "\n".join(lines) + "\n"
