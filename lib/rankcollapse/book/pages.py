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
* :func:`alt_from_captions` -- every figure directive without ``:alt:`` gets one: its caption's first
  sentence as plain text, for readers who cannot see the image.
* :func:`cite_works` -- the first mention on a page of a work in ``references.bib`` (the two papers by
  their authors' names, the critical note, AdamW, LayerNorm, the pretrained architectures, ensembles of
  shallow networks) becomes a citation (``{cite:t}``/``{cite:p}``), in prose only.
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


def wrap_command(cmd: str, width: int = 76, indent: str = "    ") -> list[str]:
    """A shell command as lines of at most ``width`` characters where it can be, broken before its options
    (`` -p``, `` --``) with a backslash continuation, so that a rerun block never scrolls sideways."""
    import re

    parts = re.split(r" (?=-p |--)", cmd)
    lines, cur = [], parts[0]
    for part in parts[1:]:
        if len(cur) + 1 + len(part) + 2 > width:
            lines.append(cur + " \\")
            cur = indent + part
        else:
            cur += " " + part
    return [*lines, cur]


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
        *wrap_command(rc),
        "```",
        "",
        "or, without the runner (Jupytext converts the chapter, papermill executes it; the results and "
        f"figures go to `_output/{chapter}-{prof}/` or `-p output_dir DIR`):",
        "",
        "```bash",
        f".venv/bin/jupytext --to ipynb -o - chapters/{chapter}.md \\",
        *wrap_command(f"  | .venv/bin/papermill - {chapter}.ipynb{pm}", indent="      "),
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


# (pattern of the first mention in prose, the MyST it becomes; \g<0> is the mention itself)
CITATIONS: tuple[tuple[str, str], ...] = (
    (r"Dong,\s+Cordonnier\s+(?:&|and)\s+Loukas(?:\s+\(2021\))?", "{cite:t}`dong2021attention`"),
    (r"Hofmann\s+(?:&|and)\s+M\u00e4der(?:\s+\(2026\))?", "{cite:t}`hofmann2026force`"),
    (r"\bCirrincione\b(?:\s+\(2026\))?", "{cite:t}`cirrincione2026layernorm`"),
    (r"\bthe critical note\b", "\\g<0> {cite:yearpar}`note2021critical`"),
    (r"\bensembles of shallow (?:networks|paths)\b", "\\g<0> {cite:p}`veit2016residual`"),
    (r"\bAdamW(?![-\w'’])", "\\g<0> {cite:p}`loshchilov2019decoupled`"),
    (r"\b(?:LayerNorm|layer normalisation)(?![-\w'’])", "\\g<0> {cite:p}`ba2016layer`"),
    (r"(?<![-\w])ALBERT(?![-\w'’])", "\\g<0> {cite:p}`lan2020albert`"),
    (r"(?<![-\w])XLNet(?![-\w'’])", "\\g<0> {cite:p}`yang2019xlnet`"),
    (r"(?<![-\w])MiniLM(?![-\w'’])", "\\g<0> {cite:p}`wang2020minilm`"),
    (r"(?<![-\w])BERT(?![-\w'’])", "\\g<0> {cite:p}`devlin2019bert`"),
)
# fenced blocks; heading, label, directive-option and table lines; code spans and roles (`x`, {role}`x`);
# inline and display math; Markdown links and images; HTML tags and comments
_PROTECTED = re.compile(
    r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$|^[ \t]*[#:(|][^\n]*$|(\{[\w:-]+\})?`[^`\n]*`|\$\$.*?\$\$"
    r"|\$[^$\n]*\$|!?\[[^\]]*\]\([^)]*\)|<!--.*?-->|<[^>\n]*>",
    re.M | re.S,
)


def _cite_text(text: str, pending: list[int]) -> str:
    """``text`` (Markdown) with the first mention of each work still in ``pending`` (indices into
    :data:`CITATIONS`, removed as they are cited) made a citation, outside fenced blocks, headings, labels,
    directive options, tables, code spans, roles, math, links and HTML."""
    pieces, last = [], 0
    for m in _PROTECTED.finditer(text):
        pieces.append(text[last : m.start()])
        pieces.append(m.group(0))
        last = m.end()
    pieces.append(text[last:])
    for pi in range(0, len(pieces), 2):  # even indices: prose between protected spans
        for i in list(pending):
            pat, repl = CITATIONS[i]
            pieces[pi], k = re.subn(pat, repl, pieces[pi], count=1)
            if k:
                pending.remove(i)
    return "".join(pieces)


def cite_works(nb: dict | None = None, text: str | None = None):
    """Cite each work of :data:`CITATIONS` at its first mention in the prose of a page: the Markdown cells of
    the executed notebook ``nb`` (changed in place; returns how many were cited) or the Markdown ``text``
    (returns the new text). Glued outputs and code are left alone."""
    pending = list(range(len(CITATIONS)))
    if text is not None:
        return _cite_text(text, pending)
    for cell in (nb or {}).get("cells", []):
        if cell.get("cell_type") == "markdown" and pending:
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            cell["source"] = _cite_text(src, pending)
    return len(CITATIONS) - len(pending)


_FIGURE = re.compile(r"^([ \t]*)(`{3,}|~{3,})\{(?:glue:figure|figure)\}[^\n]*$", re.M)


_TEX = {"\\|": "\u2016", "\\le": "\u2264", "\\ge": "\u2265", "\\times": "\u00d7", "\\infty": "\u221e"}


def _plain_math(m: re.Match) -> str:
    t = re.sub(r"\\[,;:! ]", " ", m.group(1))  # thin spaces
    t = re.sub(r"\\binom\{([^{}]*)\}\{([^{}]*)\}", r"C(\1, \2)", t)
    for k, v in _TEX.items():
        t = re.sub(re.escape(k) + (r"(?![A-Za-z])" if k[-1].isalpha() else ""), v, t)
    t = re.sub(r"\\(?:mathrm|operatorname|text|mathbf|mathit)\b", "", t)
    t = re.sub(r"\\([A-Za-z]+)", r"\1", t)  # \gamma -> gamma
    return t.replace("{", "").replace("}", "").replace("\\", "")


def plain_text(md: str, limit: int = 200) -> str:
    """The first sentence of the Markdown ``md`` as plain text (roles and code spans by their text, maths
    without its delimiters and macros, emphasis and links unwrapped), at most ``limit`` characters."""
    t = re.sub(r"\{[\w:-]+\}`([^`<]*?)(?:\s*<[^`]*>)?`", r"\1", md)  # {role}`text <target>` -> text
    t = re.sub(r"`([^`]*)`", r"\1", t)
    t = re.sub(r"\$\$?([^$]*)\$\$?", _plain_math, t)
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", t)
    t = re.sub(r"\*{1,2}(\S[^*]*?)\*{1,2}", r"\1", t)
    t = " ".join(t.split())
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z(])", t)
    if m:
        t = t[: m.start()]
    if len(t) > limit:
        t = t[: limit - 1].rsplit(" ", 1)[0] + "\u2026"
    return t


def _alt_text(text: str) -> tuple[str, int]:
    out, last, n = [], 0, 0
    for m in _FIGURE.finditer(text):
        indent, fence = m.group(1), m.group(2)
        end = re.compile(r"^[ \t]*" + re.escape(fence) + r"[ \t]*$", re.M).search(text, m.end())
        if end is None:
            continue
        body = text[m.end() : end.start()].split("\n")[1:]
        opts = [ln for ln in body if ln.strip().startswith(":")]
        if any(ln.strip().startswith(":alt:") for ln in opts):
            continue
        caption = "\n".join(ln for ln in body if not ln.strip().startswith(":"))
        alt = plain_text(caption)
        if not alt:
            continue
        out.append(text[last : m.end()])
        out.append(f"\n{indent}:alt: {json.dumps(alt, ensure_ascii=False)}")  # quoted: YAML reads it
        last = m.end()
        n += 1
    out.append(text[last:])
    return "".join(out), n


def alt_from_captions(nb: dict | None = None, text: str | None = None):
    """Give every ``{glue:figure}``/``{figure}`` directive in the Markdown of ``nb`` (changed in place;
    returns how many were given one) or in ``text`` (returns the new text) that has no ``:alt:`` option
    one: :func:`plain_text` of its caption."""
    if text is not None:
        return _alt_text(text)[0]
    total = 0
    for cell in (nb or {}).get("cells", []):
        if cell.get("cell_type") == "markdown":
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            cell["source"], k = _alt_text(src)
            total += k
    return total
