"""The claims ledger: every claim the book tests, with the verdicts the executed chapters reached.

The claim list (id, one line, source, the paper's strength, chapters that test it) is fixed
here, from the spec and the critical note; verdicts and their deciding numbers are read from
the chapters' results files and never typed. A claim whose chapter did not run says so.
"""

from __future__ import annotations

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


def table(build: Path, profile: str, known_chapters) -> str:
    """The ledger as a Markdown table (links to the chapters that were built)."""
    verdicts = collect(build)
    lines = [
        f"Verdicts at the **`{profile}`** profile, gathered from each chapter's results file.",
        "",
        "| id | claim (source) | paper's strength | verdict here | deciding numbers |",
        "|---|---|---|---|---|",
    ]
    for cid, claim, source, strength, _ in CLAIMS:
        vs, nums = [], []
        for ch, v, ran in verdicts[cid]:
            link = f"[{ch}]({ch}.ipynb)" if ch in known_chapters and ran else f"`{ch}`"
            if not ran:
                vs.append(f"not run ({link})")
            elif v is None:
                vs.append(f"no verdict ({link})")
            else:
                note = f" (smoke differs from full: {v['smoke_note']})" if v.get("smoke_note") else ""
                vs.append(f"**{v['verdict']}** ({link}){note}")
                nums.append(evidence_text(v))
        lines.append(
            f"| {cid} | {claim} ({source}) | {strength} | {'<br>'.join(vs)} | "
            f"{'<br>'.join(n.replace('|', '/') for n in nums) or '–'} |"
        )
    return "\n".join(lines) + "\n"
