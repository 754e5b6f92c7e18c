"""What the staging step adds to the pages of the built book (the runner's side: no chapter imports this, so
editing it re-executes nothing).

* :func:`rerun_markdown` -- the section that ends every chapter page: the exact ``rcbook run`` and raw
  Jupytext + papermill commands that regenerate it, and every parameter with the value this build used
  beside the full profile's.
* :func:`announcement` -- the banner every page of a build at a profile other than ``full`` carries, with
  the sizes it used (:func:`reduced_sizes`).
* :func:`link_chapter_names` -- a chapter named as a code span (```repair-path```) in prose or in glued
  Markdown becomes a link to that chapter (``{doc}``).
* :func:`label_verdict_sections` -- a label on the section of a chapter page whose cell decided each
  verdict, for the ledger's links.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..chapters import schema

RERUN_HEADING = "How to rerun this page"
NOT_PARAMS = ("output_dir",)


def _lit(v: Any) -> str:
    """A value as a command-line literal: papermill and ``rcbook -p`` read Python literals for lists."""
    if isinstance(v, str):
        return v
    return json.dumps(v) if not isinstance(v, bool) else str(v)


def _quote(s: str) -> str:
    return s if re.fullmatch(r"[\w.,:/@+=-]+", s) else "'" + s.replace("'", "'\\''") + "'"


def changed_params(chapter: str, params: dict) -> dict:
    """The parameters of a run that differ from its profile's defaults (what a user passed with ``-p``)."""
    sch = schema(chapter)
    prof = params.get("profile", "full")
    out = {}
    for name, v in params.items():
        if name in NOT_PARAMS or name in ("profile", "device") or name not in sch.all:
            continue
        if sch.all[name].default(prof) != v:
            out[name] = v
    return out


def rerun_markdown(chapter: str, doc: dict) -> str:
    """The "How to rerun this page" section for a chapter's results file ``doc`` (its ``params``)."""
    params = dict(doc.get("params", {}))
    prof = params.get("profile", "full")
    extra = changed_params(chapter, params)
    dev = params.get("device", "auto")
    opts = "".join(f" -p {k} {_quote(_lit(v))}" for k, v in extra.items())
    rc = f"rcbook run {chapter} --profile {prof}{opts}" + (f" --device {dev}" if dev != "auto" else "")
    pm = f" -p profile {prof}" + "".join(f" -p {k} {_quote(_lit(v))}" for k, v in extra.items())
    lines = [
        f"## {RERUN_HEADING}",
        "",
        f"This page was executed at the `{prof}` profile. To regenerate it (results, figures and every "
        "number in its prose) from a clone of the repository, after `bash make.sh setup`:",
        "",
        "```bash",
        rc,
        "```",
        "",
        "or, without the runner (Jupytext converts the chapter, papermill executes it; the results and "
        f"figures go to `_output/{chapter}-{prof}/` or `-p output_dir DIR`):",
        "",
        "```bash",
        f".venv/bin/jupytext --to ipynb -o - chapters/{chapter}.md \\",
        f"  | .venv/bin/papermill - {chapter}.ipynb{pm}",
        "```",
        "",
        f"Its parameters in this build, beside the `full` profile's (`rcbook list {chapter}` describes "
        "each one; any of them can be passed with `-p NAME VALUE`):",
        "",
        "| parameter | this build | `full` profile |",
        "|---|---|---|",
    ]
    sch = schema(chapter)
    for name, v in params.items():
        if name in NOT_PARAMS:
            continue
        full = sch.all[name].default("full") if name in sch.all else "–"
        mark = "" if _lit(full) == _lit(v) or name == "profile" else " (differs)"
        lines.append(f"| `{name}` | `{_short(v)}`{mark} | `{_short(full)}` |")
    return "\n".join(lines) + "\n"


def _short(v: Any, limit: int = 60) -> str:
    s = _lit(v)
    return (s if len(s) <= limit else s[: limit - 1] + "…").replace("|", "/")


def reduced_sizes(profile: str, chapters: list[str]) -> dict[str, dict]:
    """Per chapter, ``{param: (value at profile, value at full)}`` for every parameter whose ``profile``
    default differs from the full profile's."""
    out = {}
    for ch in chapters:
        sch = schema(ch)
        d = {
            p.name: (p.default(profile), p.default("full"))
            for p in sch.all.values()
            if p.name not in ("profile", "device", *NOT_PARAMS) and p.default(profile) != p.default("full")
        }
        if d:
            out[ch] = d
    return out


# the sizes named in the banner: the ones that decide a run's cost and its statistics
BANNER_PARAMS = ("seeds", "n_seeds", "depth", "d_model", "steps", "driver_steps", "n_seq", "n_layers")


def announcement(profile: str, chapters: list[str]) -> str | None:
    """The banner of a build at ``profile`` (None at ``full``, the published book): what the profile is,
    and a few of the sizes it used against the full profile's."""
    if profile == "full":
        return None
    sizes = reduced_sizes(profile, chapters)
    shown = []
    for ch, d in sizes.items():
        for name in BANNER_PARAMS:
            if name in d:
                now, full = d[name]
                shown.append(f"{ch}: {name} {_short(now, 24)} (full {_short(full, 24)})")
                break
    what = {
        "smoke": "a miniature run for CI, not the published book: its numbers and verdicts are not the "
        "book's results",
        "paper": "the papers' sizes",
    }.get(profile, "a non-default profile")
    text = (
        f"This build ran at the <b>{profile}</b> profile, {what}. Sizes used, against the full profile's: "
        + "; ".join(shown[:5])
        + ("; …" if len(shown) > 5 else "")
        + ". Every page ends with all of its parameters."
    )
    return text


def label_verdict_sections(nb: dict, chapter: str) -> dict[str, str]:
    """Put a MyST label above the section heading (the nearest ``#``/``##``/``###`` line above) of the cell
    that glued ``verdict-<id>`` in the executed notebook ``nb`` (a dict in nbformat 4, changed in place):
    ``(claim-<chapter>-<id>)=``. Returns claim id -> label, for the ledger's links (``{ref}`` them: the
    strict build fails on a label that does not exist)."""
    cells = nb.get("cells", [])
    heading = None  # (cell index, line index)
    found: dict[str, tuple[int, int]] = {}
    for ci, cell in enumerate(cells):
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        if cell.get("cell_type") == "markdown":
            in_fence = False
            for li, line in enumerate(src.split("\n")):
                if line.lstrip().startswith(("```", "~~~")):
                    in_fence = not in_fence
                if not in_fence and re.match(r"^#{1,3}\s+\S", line):
                    heading = (ci, li)
            continue
        for o in cell.get("outputs", []):
            name = (o.get("metadata") or {}).get("scrapbook", {}).get("name", "")
            if name.startswith("verdict-") and heading is not None:
                found.setdefault(name[len("verdict-") :], heading)
    labels: dict[tuple[int, int], list[str]] = {}
    out = {}
    for cid, pos in found.items():
        lab = f"claim-{chapter}-{cid}".lower()
        labels.setdefault(pos, []).append(lab)
        out[cid] = lab
    for (ci, li), labs in sorted(labels.items(), reverse=True):
        src = cells[ci]["source"]
        src = "".join(src) if isinstance(src, list) else src
        lines = src.split("\n")
        lines[li:li] = ([""] if li > 0 else []) + [f"({lab})=" for lab in labs]
        cells[ci]["source"] = "\n".join(lines)
    return out


def _link_names(text: str, names) -> tuple[str, int]:
    """``text`` with every code span that is exactly a chapter name in ``names`` made a ``{doc}`` link,
    outside fenced code blocks and not where it already is a role's argument."""
    out, n, fence = [], 0, False
    pat = re.compile(
        r"(?<![\w}`])`(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")`(?!`)"
    )
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence and names:
            line, k = pat.subn(r"{doc}`\1`", line)
            n += k
        out.append(line)
    return "\n".join(out), n


def link_chapter_names(nb: dict, names) -> int:
    """Make every chapter named as a code span in the Markdown of ``nb`` (its Markdown cells and its glued
    Markdown outputs) a link to that chapter (``{doc}`name```; ``names``: the chapters this build has, so
    the strict build never meets a link to a page it lacks). Returns how many were linked."""
    names = [n for n in names]
    total = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            cell["source"], k = _link_names(src, names)
            total += k
        for o in cell.get("outputs", []):
            data = o.get("data") or {}
            if "text/markdown" in data:
                md = data["text/markdown"]
                md = "".join(md) if isinstance(md, list) else md
                data["text/markdown"], k = _link_names(md, names)
                total += k
    return total
