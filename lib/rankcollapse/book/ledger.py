"""The claims ledger: every claim the book tests, with the verdicts the executed chapters reached.

The claim list (id, one line, source, the paper's strength, chapters that test it) is fixed
here, from the spec and the critical note; verdicts and their deciding numbers are read from
the chapters' results files and never typed. A claim whose chapter did not run says so.
"""

from __future__ import annotations

import re
from pathlib import Path

from .results import load

# id, claim, source, strength (as the paper / the note states it), chapters testing it
CLAIMS = [
    (
        "C1",
        "pure SANs lose rank doubly exponentially (cubic rate)",
        "Dong Thm 2.2/2.3",
        "strong: proved, convergence region stated",
        ["collapse", "real-models"],
    ),
    (
        "C2",
        "skip connections prevent the collapse",
        "Dong Claim 3.1",
        "strong in direction, weak in magnitude",
        ["skip", "real-models", "toy-tasks"],
    ),
    (
        "C3",
        "MLPs slow it through their Lipschitz constant",
        "Dong Cor 3.2",
        "moderate: a bound plus experiments",
        ["mlp", "real-models"],
    ),
    ("C4", "layer normalisation plays no role", "Dong §3", "strong, nearly algebraic", ["layernorm"]),
    (
        "C5",
        "SANs with skips behave like ensembles of shallow paths",
        "Dong Thm 2.1 + experiments",
        "suggestive",
        ["decomposition", "toy-tasks"],
    ),
    ("D1", "the output is exactly the sum over paths", "Dong Thm 2.1", "proved", ["decomposition"]),
    ("LN2", "LN is precisely affine-rank-neutral", "Cirrincione", "asserted (abstract)", ["layernorm"]),
    (
        "H1",
        "a weakened skip produces a settled, harmful collapse that does not heal",
        "Hofmann §4",
        "empirical (8 collapse events)",
        ["repair-driver"],
    ),
    (
        "H2",
        "no added loss term repairs it, though the bounded one pushes hard",
        "Hofmann §5",
        "empirical (0/8 per term)",
        ["repair-treatments"],
    ),
    (
        "H3",
        "the task gradient no longer reaches query and key; "
        "the term's gradient fades before the collapsing blocks",
        "Hofmann §6",
        "empirical (gradient measurements)",
        ["repair-path"],
    ),
    (
        "H4",
        "restoring the skip reopens the path at once; rank recovers only far above the collapse scale",
        "Hofmann §7",
        "empirical (switches, hysteresis)",
        ["repair-path"],
    ),
    (
        "H5",
        "the longer a network stays collapsed, the slower or rarer its recovery",
        "Hofmann, delayed switches",
        "empirical",
        ["repair-path"],
    ),
    (
        "H6",
        "a learning-rate burst collapses the rank with the path open, and it can recover untreated",
        "Hofmann, learning-rate test",
        "empirical (registered test)",
        ["repair-lr-burst"],
    ),
    (
        "H7",
        "the loss stays above a healthy network's after the rank recovers",
        "Hofmann",
        "empirical",
        ["repair-path", "repair-lr-burst"],
    ),
    ("Q1", "a tight lower bound with skip connections (open problem)", "note", "open question", ["skip"]),
    ("Q2", "trained models satisfy 4γβ < √d_qk", "note", "open question", ["real-models"]),
    ("Q3", "rank preservation by strong MLPs trades against robustness", "note", "open question", ["mlp"]),
    (
        "W1",
        "weight-matrix rank collapse and token rank collapse are different phenomena",
        "note",
        "conceptual distinction",
        ["repair-path"],
    ),
]

MARKER = "<!-- LEDGER -->"


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return "; ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:6]) + (", …" if len(v) > 6 else "") + "]"
    return str(v)


def evidence_text(v: dict, limit: int = 400) -> str:
    """What decided a verdict, for the ledger: the rule's own one-sentence reason where it gives one (the
    shared ``verdict_<id>(evidence) -> (verdict, reason)`` form), else the evidence as ``key=value`` pairs;
    cut at ``limit`` characters (the full evidence stays in the results file)."""
    ev = v.get("evidence", {})
    text = ev.get("reason") if isinstance(ev.get("reason"), str) else _fmt(ev)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def collect(build: Path) -> dict:
    """claim id -> list of (chapter, verdict dict or None if the chapter did not run / has no verdict)."""
    out = {}
    for cid, _, _, _, chapters in CLAIMS:
        rows = []
        for ch in chapters:
            p = Path(build) / ch / "results.json"
            rows.append((ch, load(p).get("verdicts", {}).get(cid) if p.exists() else None, p.exists()))
        out[cid] = rows
    return out


def _strip_parens(text: str) -> str:
    """``text`` without its parenthesised asides (nested ones included): a bracket opened after a space;
    one attached to a word, as in ``r(X_L)``, stays."""
    out, depth, kept = [], 0, 0
    for i, c in enumerate(text):
        if c == "(" and (depth or i == 0 or text[i - 1].isspace()) and not kept:
            depth += 1
        elif c == ")" and depth:
            depth -= 1
        elif not depth:
            kept += (c == "(") - (c == ")" and kept > 0)
            out.append(c)
    return re.sub(r"\s+([,;:.])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip()


def short_evidence(v: dict, limit: int = 170) -> str:
    """One short sentence of what decided a verdict, for the ledger: the rule's reason without its
    parenthesised detail, cut at a clause boundary near ``limit`` characters (the whole reason is shown
    beside it, folded)."""
    t = _strip_parens(evidence_text(v, limit=10_000))
    parts = re.split(r"(?<=[;.])\s+", t)
    out = parts[0]
    for p in parts[1:]:
        if len(out) + 1 + len(p) > limit:
            break
        out += " " + p
    if len(out) > limit + 60:
        out = out[: limit - 1].rsplit(" ", 1)[0] + "…"
    out = out.rstrip(";,: ")
    if not re.search(r"\d", out):  # the numbers were all in the asides: the first one's first clause
        m = re.search(r"\s\(([^();,]*\d[^();,]*)", evidence_text(v, limit=10_000))
        if m:
            out += f" ({m.group(1).strip()})"
    return out


CITE = {  # the source named first in a claim's source, and its key in references.bib
    "Dong": "dong2021attention",
    "Hofmann": "hofmann2026force",
    "Cirrincione": "cirrincione2026layernorm",
    "note": "note2021critical",
}


def cited(source: str) -> str:
    """A claim's source with its work cited (``{cite:t}`` of references.bib), e.g. ``Dong Thm 2.1`` ->
    ``{cite:t}`dong2021attention`, Thm 2.1``."""
    for name, key in CITE.items():
        if source == name or source.startswith(name + " ") or source.startswith(name + ","):
            rest = source[len(name) :].lstrip(" ,")
            return f"{{cite:t}}`{key}`" + (f", {rest}" if rest else "")
    return source


def interval_note(v: dict) -> str:
    """For a verdict built on counts (its evidence holds ``across_interval``, from
    :func:`rankcollapse.book.checks.across_interval`): whether it holds with each count anywhere in its exact
    95% interval, and where not, the nearest count that turns it; else ``""``."""
    a = v.get("evidence", {}).get("across_interval")
    if not isinstance(a, dict) or not a.get("counts"):
        return ""
    if a.get("holds"):
        return "Holds across the 95% interval of every count it reads."
    lab, fl = next(iter(a["flips"].items()))
    k, n, lo, hi = a["counts"][lab]
    more = f" ({len(a['flips']) - 1} more count(s) too)" if len(a["flips"]) > 1 else ""
    return (
        f"Fragile in its counts: {lab} at {fl[0][0]} of {n} instead of {k}, inside its 95% interval "
        f"{lo}–{hi}, gives {fl[0][1]}{more}."
    )


def fragile_note(profile: str, chapter: str, cid: str) -> str:
    """Where the chapter's record at ``profile`` holds verdict ``cid`` (or its control) as kernel-fragile
    (``rcbook record --fragile``: the kernel variants of the spread gave different outcomes), a sentence
    that says so and that the verdict counts on no machine; else ``""``."""
    from .records import expected_path, kernel_fragile, seen_text

    try:
        rec = load(expected_path(profile, chapter)).get("verdicts", {}).get(cid)
    except (OSError, ValueError):
        return ""
    kf = kernel_fragile(rec)
    if not kf:
        return ""
    parts = [
        f"{'its control' if what == 'control' else 'the verdict'} came out {seen_text(seen)}"
        for what, seen in kf.items()
        if seen
    ]
    return (
        f"Kernel-fragile, so it does not count: under the floating-point kernels of the record's spread "
        f"{'; '.join(parts)}."
    )


def control_cell(v: dict) -> str:
    """The ledger's cell for a verdict's control: its outcome, on which run, and whether the claim's verdict
    counts (the outcomes differ) or not."""
    c = v.get("control")
    if not c:
        return "<i>no control: does not count</i>"
    mark = "counts" if c["counts"] else "<b>same outcome: does not count</b>"
    return f"{c['verdict']} <small>({_cell(c['on'])})</small>; {mark}"


def _cell(s: str) -> str:
    return s.replace("|", "/").replace("\n", " ")


def table(build: Path, profile: str, known_chapters, labels: dict | None = None) -> str:
    """The ledger as a Markdown table: per claim its source and strength, the verdict of every chapter that
    tests it, one short sentence of evidence with a link to the section that decided it (``labels``:
    {(chapter, claim id): MyST label}) and the rule's whole reason folded beside it."""
    labels = labels or {}
    verdicts = collect(build)
    lines = [
        f"Verdicts at the **`{profile}`** profile, gathered from each chapter's results file. Each row "
        "links to the section where its evidence is; the results files hold every number.",
        "",
        "Beside each verdict, its **control**: the same rule applied to a real run of the same build on "
        "which it should give the other outcome. A verdict counts only where the two differ.",
        "",
        "| claim | verdict here | control (same rule) | evidence |",
        "|---|---|---|---|",
    ]
    for cid, claim, source, strength, _ in CLAIMS:
        vs, cs, ev = [], [], []
        for ch, v, ran in verdicts[cid]:
            link = f"[{ch}]({ch}.ipynb)" if ch in known_chapters and ran else f"`{ch}`"
            if not ran:
                vs.append(f"not run ({link})")
            elif v is None:
                vs.append(f"no verdict ({link})")
            else:
                vs.append(f"**{v['verdict']}** ({link})")
                cs.append(control_cell(v))
                lab = labels.get((ch, cid))
                where = f" {{ref}}`→ section <{lab}>`" if lab else ""
                note = (
                    f" <i>Smoke differs from full: {_cell(v['smoke_note'])}</i>"
                    if v.get("smoke_note")
                    else ""
                )
                across = interval_note(v)
                note += f" <i>{_cell(across)}</i>" if across else ""
                fragile = fragile_note(profile, ch, cid)
                note += f" <b>{_cell(fragile)}</b>" if fragile else ""
                sentence = _cell(short_evidence(v)).rstrip()
                sentence += "" if sentence.endswith((".", "!", "?")) else "."
                ev.append(
                    f"{sentence}{where}{note} <details><summary>rule's reason</summary>"
                    f"{_cell(evidence_text(v, limit=2000))}</details>"
                )
        lines.append(
            f"| **{cid}** {claim} <br><small>{cited(source)}; {strength}</small> | {'<br>'.join(vs)} | "
            f"{'<br>'.join(cs) or '–'} | {'<br>'.join(ev) or '–'} |"
        )
    return "\n".join(lines) + "\n"
