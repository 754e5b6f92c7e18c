"""Chapter `toy-tasks`, report: the records of the circle and path-effectiveness experiments
(``record_*``: values, counts and glued numbers, with the counts, summaries and sentences they are written
from), the tables (``table_*``) and the names and reference numbers they print (the paper's accuracies and
the targets).
"""

from __future__ import annotations

import numpy as np

from ...book import checks
from .experiments import CLASSES, COLLAPSE_SEP, TASK_NAMES, TASKS, VARIANTS
from .verdicts import C2_MARGIN, C2_MAX_KA, _mean

# the authors' full-model token accuracy and the chance / majority level they quote (Dong et al. 2021,
# Fig. 4)
PAPER_FULL = {"sort": 0.98, "hull": 0.9, "mem": 0.85}
PAPER_CHANCE = {"sort": 0.1, "hull": 0.54, "mem": 0.5}  # the paper's; the baselines here are in task_data
VARIANT_NAMES = {"attention": "pure attention", "mlp": "attention + MLP", "skip": "attention + skip"}
ARCH_NAMES = {"bert": "authors' (post-LN)", "plain": "LN-free"}


def circle_counts(rows: list[dict], arch: str) -> dict:
    """Per variant: rollouts ``n`` (networks x start pairs) and the count of each class (and ``still``:
    collapsed and stopped), ``networks``, and the classes from the first training pair
    (``from_train_start``, one per network)."""
    out = {}
    for v in VARIANTS:
        rs = [r for r in rows if r["arch"] == arch and r["variant"] == v]
        cls = [c for r in rs for c in r["classes"]]
        c = {"n": len(cls), "networks": len(rs), **{k: sum(x == k for x in cls) for k in CLASSES}}
        c["still"] = sum(x for r in rs for x in r["still_all"])
        c["from_train_start"] = {k: sum(r["cls_train_start"] == k for r in rs) for k in CLASSES}
        out[v] = c
    return out


def record_circle(ch, rows: list[dict], p) -> dict:
    """Record per architecture and variant the class counts and the mean distance to the circle; glue them
    for the prose. Returns the counts per architecture."""
    counts = {}
    for arch in p.archs:
        c = counts[arch] = circle_counts(rows, arch)
        for v in VARIANTS:
            tag = f"{arch}_{v}"
            for k in CLASSES:
                checks.count(ch, f"circle_{k}_{tag}", c[v][k], of=c[v]["n"], note=f"rollouts classed {k}")
            checks.count(ch, f"circle_still_{tag}", c[v]["still"], of=None, note="collapsed and stopped")
            checks.count(
                ch,
                f"circle_kept_train_start_{tag}",
                c[v]["from_train_start"]["kept"],
                of=c[v]["networks"],
                note="networks kept from their first training pair",
            )
            errs = [r["radius_err"] for r in rows if r["arch"] == arch and r["variant"] == v]
            ch.value(
                f"circle_radius_err_{tag}",
                _mean(errs),
                rtol=0.1,
                atol=0.02,
                note="mean over sizes and seeds; a float32 network rolled out 300 steps: drift compounds",
            )
            ch.glue(f"circle_n_{tag}", c[v]["n"])
    for k, text in circle_sentences(counts).items():
        ch.glue(k, text)
    names = [f"circle_{k}_{a}_{v}" for a in counts for v in VARIANTS for k in CLASSES]
    ch.glue("circle_spread_md", circle_spread_text(counts, recorded_tolerances(ch.params["profile"], names)))
    ch.glue("circle_sizes", ", ".join(map(str, p.circle_hidden)))
    ch.glue("circle_n_seeds", p.n_seeds)
    ch.glue("circle_n_seeds_plain", p.n_seeds_plain)
    ch.glue("collapse_sep", COLLAPSE_SEP)
    ch.glue("circle_n_starts", p.circle_starts)
    ch.glue("c2_max_ka", C2_MAX_KA)
    ch.glue("c2_margin", C2_MARGIN)
    return counts


# the counts each reading of :func:`circle_sentences` is chosen on: (architecture, variant, class)
SENTENCE_READS = {
    "circle_skip_md": (("bert", "skip", "collapsed"), ("bert", "skip", "kept")),
    "circle_ln_md": (
        ("plain", "attention", "diverged"),
        ("plain", "attention", "collapsed"),
        ("bert", "attention", "collapsed"),
        ("bert", "attention", "diverged"),
    ),
}


def sentence_readings(counts: dict) -> dict:
    """Which reading :func:`circle_sentences` chooses for each sentence (the branch, not its numbers)."""
    sk = counts["bert"]["skip"]
    skip = "merged" if sk["collapsed"] else "apart" if sk["kept"] < sk["n"] else "all kept"
    out = {"circle_skip_md": skip, "circle_ln_md": "none"}
    if "plain" in counts:
        pa, ba = counts["plain"]["attention"], counts["bert"]["attention"]
        contrast = pa["diverged"] > pa["collapsed"] and ba["collapsed"] > ba["diverged"]
        out["circle_ln_md"] = "contrast" if contrast else "counts"
    return out


def circle_sentences(counts: dict) -> dict:
    """The prose's reading of the counts, written from them (so it changes with them): ``circle_skip_md``
    on what the skip does in the authors' architecture, ``circle_ln_md`` on what the LayerNorms change
    (each chosen by :func:`sentence_readings`)."""
    b = counts["bert"]
    sk = b["skip"]
    reading = sentence_readings(counts)
    if reading["circle_skip_md"] == "apart":
        skip = (
            f"The skip keeps the two tokens apart in every rollout, but on the circle in only {sk['kept']} "
            f"of {sk['n']}: its errors, small relative to the state they are added to, still compound."
        )
    elif reading["circle_skip_md"] == "all kept":
        skip = "The skip keeps the two tokens apart and on the circle in every rollout."
    else:
        skip = f"Even with the skip the two tokens merged in {sk['collapsed']} of {sk['n']} rollouts."
    out = {"circle_skip_md": skip, "circle_ln_md": ""}
    if "plain" in counts:
        pa, ba = counts["plain"]["attention"], b["attention"]
        if reading["circle_ln_md"] == "contrast":
            out["circle_ln_md"] = (
                "So the same pure attention that leaves the circle outward without LayerNorm merges its two "
                "tokens with it: the LayerNorm after the input map removes the scale along which the "
                "instability grew, and what is left of it ends on one point."
            )
        else:
            out["circle_ln_md"] = (
                f"Pure attention without LayerNorm diverged in {pa['diverged']} and collapsed in "
                f"{pa['collapsed']} rollouts, against {ba['diverged']} and {ba['collapsed']} with it."
            )
    return out


def recorded_tolerances(profile: str, names) -> dict:
    """The absolute tolerance (``atol``) this chapter's record at ``profile`` holds each count of ``names``
    to: the largest deviation measured between its kernel variants, at least one event. ``{}`` when there is
    no record (a profile never recorded)."""
    from ...book.results import expected_path, load

    try:
        vals = load(expected_path(profile, "toy-tasks"))["values"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {n: float(vals[n].get("atol", 0.0)) for n in names if n in vals}


def sentences_across(counts: dict, spans: dict) -> dict:
    """Per sentence of :func:`circle_sentences`, the moves that change its reading: each count it reads
    (:data:`SENTENCE_READS`) moved alone through ``spans[(arch, variant, class)] = (lo, hi)``. Returns
    ``{sentence: [(arch, variant, class, j, reading), ...]}``, only the sentences whose reading changes."""
    import copy

    base = sentence_readings(counts)
    out: dict = {}
    for key, reads in SENTENCE_READS.items():
        for arch, v, k in reads:
            if arch not in counts or (arch, v, k) not in spans:
                continue
            lo, hi = spans[(arch, v, k)]
            for j in range(max(0, lo), hi + 1):
                c = copy.deepcopy(counts)
                c[arch][v][k] = j
                r = sentence_readings(c)[key]
                if r != base[key]:
                    out.setdefault(key, []).append((arch, v, k, j, r))
                    break
    return out


def circle_spread_text(counts: dict, tolerances: dict, *, moved_over: int = 1) -> str:
    """A paragraph on the circle's class counts that move between machines: those ``tolerances`` (the
    record's, :func:`recorded_tolerances`) holds to more than ``moved_over`` rollouts, each with its exact
    95% binomial interval (the counts are proportions of rollouts); then whether every sentence of
    :func:`circle_sentences` keeps its reading across each count's interval and its recorded spread.
    C2's own interval check is in its verdict (:func:`rankcollapse.chapters.toy_tasks.verdicts.judge_c2`)."""
    if not tolerances:
        return (
            "No record exists at this profile, so how far these counts move between machines is not "
            "measured here; each is a proportion of its rollouts, with the exact 95% binomial interval "
            "of C2's reason below."
        )
    moved, spans = [], {}
    for arch, per in counts.items():
        for v in VARIANTS:
            n = per[v]["n"]
            for k in CLASSES:
                k_seen = per[v][k]
                tol = tolerances.get(f"circle_{k}_{arch}_{v}", 0.0)
                lo, hi = checks.count_range(k_seen, n) if n else (k_seen, k_seen)
                t = int(round(tol))
                spans[(arch, v, k)] = (min(lo, k_seen - t), max(hi, k_seen + t))
                if tol > moved_over:
                    moved.append(
                        f"{ARCH_NAMES[arch]} {VARIANT_NAMES[v]} {k} {checks.count_text(k_seen, n)}, "
                        f"recorded ±{t}"
                    )
    if moved:
        head = (
            f"**Counts that move between machines.** Between the kernel variants of this page's record, "
            f"{len(moved)} of the class counts moved by more than {moved_over} rollout"
            f"{'s' if moved_over != 1 else ''}: {'; '.join(moved)}. They are fragile as counts; read them "
            "as proportions, with the intervals given (rollouts of one network are not independent, so "
            "those intervals are if anything too narrow)."
        )
    else:
        head = (
            f"Between the kernel variants of this page's record no class count moved by more than "
            f"{moved_over} rollout{'s' if moved_over != 1 else ''}."
        )
    flips = sentences_across(counts, spans)
    if not flips:
        tail = (
            " Each sentence above that reads these counts keeps its reading with any one of them moved "
            "through its 95% interval or its recorded spread, whichever is wider."
        )
    else:
        parts = [
            f"the reading of `{key}` changes to '{r}' if {ARCH_NAMES[a]} {VARIANT_NAMES[v]} {k} is {j}"
            for key, fl in flips.items()
            for a, v, k, j, r in fl[:1]
        ]
        tail = f" Not every sentence above holds across them: {'; '.join(parts)}."
    return head + tail


def table_circle(rows: list[dict], arch: str) -> str:
    """Markdown table for one architecture: per variant and hidden size, the class of each seed's rollout
    and the median final training loss."""
    head = (
        "| variant | h | classes over the seeds (from (±0.3, 0)) | from the first training pair "
        "| median final training loss |\n|---|---|---|---|---|\n"
    )
    out = []
    hs = sorted({r["h"] for r in rows if r["arch"] == arch})
    for v in VARIANTS:
        for h in hs:
            rs = [r for r in rows if r["arch"] == arch and r["variant"] == v and r["h"] == h]
            out.append(
                f"| {VARIANT_NAMES[v]} | {h} | {', '.join(r['cls'] for r in rs)} | "
                f"{', '.join(r['cls_train_start'] for r in rs)} | "
                f"{np.median([r['final_loss'] for r in rs]):.1e} |"
            )
    return head + "\n".join(out)


def task_summary(rows: list[dict], arch: str, task: str) -> dict:
    """Mean and spread over the seeds of one architecture and task."""
    rs = [r for r in rows if r["arch"] == arch and r["task"] == task]
    full = [r["full"] for r in rs]
    return {
        "task": task,
        "arch": arch,
        "L": rs[0]["L"],
        "seeds": [r["seed"] for r in rs],
        "full": full,
        "full_mean": _mean(full),
        "full_min": min(full),
        "full_max": max(full),
        "baseline": _mean([r["baseline"] for r in rs]),
        "learned": [r["learned"] for r in rs],
        "l90": [r["l90"] for r in rs],
        "upto_mean": np.mean([r["upto"] for r in rs], 0).tolist(),
        "upto_min": np.min([r["upto"] for r in rs], 0).tolist(),
        "upto_max": np.max([r["upto"] for r in rs], 0).tolist(),
        "only_mean": np.mean([r["only"] for r in rs], 0).tolist(),
        "sampled_mean": np.mean([r["sampled_mean"] for r in rs], 0).tolist(),
        "sampled_std": np.mean([r["sampled_std"] for r in rs], 0).tolist(),
        "recon_err": max(r["recon_err"] for r in rs),
        "paper_full": PAPER_FULL[task],
        "target": TARGET[task],
    }


# the targets for the mean over seeds (the paper: 0.98 / 0.9 / 0.85)
TARGET = {"sort": 0.95, "hull": 0.85, "mem": 0.80}


def record_paths(ch, rows: list[dict], p) -> list[dict]:
    """Record per architecture and task the full accuracy of each seed, the baseline, the mean exact and
    sampled accuracies per length, the worst reconstruction error at l = L and l90 of each seed; glue the
    summaries for the prose. Returns the summaries."""
    sums = []
    for arch in p.archs:
        for task in TASKS:
            s = task_summary(rows, arch, task)
            sums.append(s)
            tag = f"{task}_{arch}"
            ch.value(f"{tag}_full_acc", s["full"], atol=0.03, note="per seed; a trained float32 network")
            ch.value(f"{tag}_baseline", s["baseline"], atol=0.01, note="the best input-blind predictor")
            ch.value(
                f"{tag}_upto_acc", s["upto_mean"], atol=0.05, note="mean over seeds, per maximal length"
            )
            ch.value(f"{tag}_sampled_acc", s["sampled_mean"], atol=0.08, note="random path samples; loose")
            ch.value(f"{tag}_recon_err", s["recon_err"], atol=1e-3, note="float32 round-off of the split")
            ch.value(
                f"{tag}_l90",
                [-1 if x is None else x for x in s["l90"]],
                atol=1,
                note="per seed, integer (-1: not learned); may move by one where two lengths are close",
            )
            ch.glue(f"{tag}_full_mean", s["full_mean"])
            ch.glue(f"{tag}_full_min", s["full_min"])
            ch.glue(f"{tag}_full_max", s["full_max"])
            ch.glue(f"{tag}_l90_md", ", ".join("—" if x is None else str(x) for x in s["l90"]))
            ch.glue(f"{tag}_len1", s["upto_mean"][1])
            ch.glue(f"{tag}_sampled_full", s["sampled_mean"][-1])
            ch.glue(f"{tag}_sampled_max", max(s["sampled_mean"]))
            ch.glue(f"{tag}_target_met", "met" if s["full_mean"] >= s["target"] else "missed")
        ch.glue(f"n_learned_{arch}", sum(r["learned"] for r in rows if r["arch"] == arch))
        ch.glue(f"n_networks_{arch}", sum(r["arch"] == arch for r in rows))
    for task in TASKS:
        ch.glue(f"{task}_paper_full", PAPER_FULL[task])
        ch.glue(f"{task}_target", TARGET[task])
        ch.glue(f"{task}_steps", getattr(p, f"{task}_steps"))
    mem = [r for r in rows if r["task"] == "mem"]
    ch.glue("mem_ceiling", _mean([r["info"]["ceiling"] for r in mem]))
    sort = [r for r in rows if r["task"] == "sort"]
    ch.glue("sort_prior_population", sort[0]["info"]["baseline_population"])
    ch.glue("L_paths", p.path_layers)
    return sums


def table_paths(sums: list[dict]) -> str:
    """Markdown tables, two so that each fits the page's column: per architecture and task the full accuracy
    (mean, range over seeds) against the paper's and the target, and the baseline; then the exact
    accuracies with paths <= 1 and <= 2, l90 per seed and the authors' sampled estimate at l = L."""
    first = (
        "*The full networks:*\n\n"
        "| architecture | task | full accuracy: mean (min–max) | paper | target | baseline |\n"
        "|---|---|---|---|---|---|\n"
    ) + "\n".join(
        f"| {ARCH_NAMES[s['arch']]} | {TASK_NAMES[s['task']]} | {s['full_mean']:.3f} "
        f"({s['full_min']:.3f}–{s['full_max']:.3f}) | {s['paper_full']} | {s['target']} | "
        f"{s['baseline']:.3f} |"
        for s in sums
    )
    second = (
        "*Their short paths (exact accuracy, mean over seeds):*\n\n"
        "| architecture | task | paths ≤ 1 | ≤ 2 | $l_{90}$ per seed | authors' method at $l=L$ |\n"
        "|---|---|---|---|---|---|\n"
    ) + "\n".join(
        f"| {ARCH_NAMES[s['arch']]} | {TASK_NAMES[s['task']]} | {s['upto_mean'][1]:.3f} | "
        f"{s['upto_mean'][min(2, s['L'])]:.3f} | "
        f"{', '.join('—' if x is None else str(x) for x in s['l90'])} | {s['sampled_mean'][-1]:.3f} |"
        for s in sums
    )
    return first + "\n\n" + second
