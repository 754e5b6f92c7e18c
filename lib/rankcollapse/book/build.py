"""Assemble the executed notebooks into a Jupyter Book (v1) and build it strictly.

The book is built from a staging folder ``build/<profile>/_book/`` holding
``_config.yml`` and ``_toc.yml`` from the repository root, the plain Markdown
pages of ``chapters/``, the executed notebooks in place of their Jupytext
sources, and a generated status page. Sphinx runs with ``-W -n --keep-going``:
any warning (a broken reference, a missing glue key, a bad figure) fails the
build. Notebooks are never re-executed by the book (``execute_notebooks: off``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..chapters import CHAPTERS
from . import ledger, pages, papers
from .records import compare, expected_path, load, load_checked
from .runner import REPO, build_dir
from .sphinxext import STAGED_MARKER

COSTS_MARKER = "<!-- rcbook:costs -->"  # in chapters/how-built.md and README.md
GPU_MARKER = "<!-- rcbook:gpu -->"  # in chapters/how-built.md: the recorded GPU run (data/gpu/)


def is_notebook_source(path: Path) -> bool:
    head = path.read_text().split("\n---", 1)[0]
    return path.read_text().startswith("---") and "jupytext:" in head


def check_chapter(profile: str, chapter: str, root: Path | None = None):
    """(status, rows) of one chapter's results against the recorded ones."""
    now_p = build_dir(profile, root) / chapter / "results.json"
    exp_p = expected_path(profile, chapter)
    if not now_p.exists():
        return "not run", []
    if not exp_p.exists():
        return "no record", []
    rows = compare(load_checked(exp_p), load_checked(now_p))
    bad = sum(not r.ok for r in rows)
    return ("match" if bad == 0 else f"MISMATCH ({bad} of {len(rows)})"), rows


def staleness(profile: str, chapter: str) -> str:
    """A plain sentence when the recorded file of ``chapter`` was written by another version of the code the
    chapter depends on (its source and the import closure of the modules it uses), else ``""``."""
    from ..store import chapter_code_hash

    exp_p = expected_path(profile, chapter)
    if not exp_p.exists():
        return ""
    try:
        rec = load(exp_p)
    except ValueError:
        return ""
    now = chapter_code_hash(chapter)
    was = rec.get("code_hash")
    if was is None:
        return (
            f"the recorded file {exp_p.name} was written before code hashes were kept: it may come from "
            f"another version of the code (re-record with: rcbook record --profile {profile} {chapter})"
        )
    if was != now:
        return (
            f"the recorded file was written by a different version of the code this chapter depends on "
            f"(recorded code {was[:12]}, now {now[:12]}); re-run and re-record: rcbook run {chapter} "
            f"--profile {profile} && rcbook record --profile {profile} {chapter}"
        )
    return ""


def status_page(profile: str, root: Path | None = None) -> str:
    """The build status page: per chapter its wall and CPU time, whether it matches its record and its
    verdicts. The profile is the build's (said once, above the table); the device is said there too when
    every chapter ran on the same one, else it is a column."""
    rows, devices = [], set()
    for ch in CHAPTERS:
        p = build_dir(profile, root) / ch / "results.json"
        if not p.exists():
            rows.append((ch, None, None, None, "not run", "-"))
            continue
        doc = load(p)
        st, _ = check_chapter(profile, ch, root)
        verdicts = ", ".join(f"{k}: {v['verdict']}" for k, v in doc.get("verdicts", {}).items()) or "-"
        cpu = f"{doc['cpu_time_s']:.1f}" if "cpu_time_s" in doc else "-"
        devices.add(str(doc["device"]))
        rows.append(
            (f"[{ch}]({ch}.ipynb)", f"{doc['wall_time_s']:.1f}", cpu, str(doc["device"]), st, verdicts)
        )
    one = len(devices) <= 1
    lines = [
        "# Build status",
        "",
        f"Every chapter of this book was executed at the **`{profile}`** profile"
        + (f", on the device `{next(iter(devices))}`" if one and devices else "")
        + ". *Matches recorded* compares its results file with `data/expected/"
        f"{profile}/<chapter>.json` value by value, each within its own recorded tolerance.",
        "",
        "| chapter | wall time (s) | CPU time (s) | "
        + ("" if one else "device | ")
        + "matches recorded | verdicts |",
        "|---|---|---|---|---|" + ("" if one else "---|"),
    ]
    for name, wall, cpu, dev, st, verdicts in rows:
        cells = [name, wall or "-", cpu or "-"] + ([] if one else [dev or "-"]) + [st, verdicts]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _reduced_toc(only: list[str]) -> str:
    """The repository's _toc.yml keeping only the given notebook chapters (plain pages stay)."""
    import yaml

    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    for part in toc.get("parts", []):
        part["chapters"] = [
            c
            for c in part["chapters"]
            if not (Path(c["file"]).stem in CHAPTERS and Path(c["file"]).stem not in only)
        ]
    toc["parts"] = [p for p in toc["parts"] if p["chapters"]]
    return yaml.safe_dump(toc, sort_keys=False)


def stage(profile: str, root: Path | None = None, only: list[str] | None = None) -> Path:
    """Lay out the book sources for ``profile``; returns the staging folder.

    ``only``: build a partial book with just these notebook chapters (used by the tests).
    """
    bdir = build_dir(profile, root)
    st = bdir / "_book"
    if st.exists():
        shutil.rmtree(st)
    (st / "chapters").mkdir(parents=True)
    # the book's Sphinx extension builds only a folder carrying this mark (a plain `jupyter-book build .` at
    # the repository root stops at once, saying that rcbook builds the book)
    (st / STAGED_MARKER).write_text("laid out by rankcollapse.book.build.stage(); built by `rcbook book`\n")
    labels: dict = {}
    staged = [c for c in CHAPTERS if only is None or c in only]
    shutil.copy(REPO / "_config.yml", st / "_config.yml")
    shutil.copy(REPO / "references.bib", st / "references.bib")
    if only is None:
        shutil.copy(REPO / "_toc.yml", st / "_toc.yml")
    else:
        (st / "_toc.yml").write_text(_reduced_toc(only))
    for src in sorted((REPO / "chapters").glob("*.md")):
        if is_notebook_source(src) and only is not None and src.stem not in only:
            continue
        if is_notebook_source(src):
            nb = bdir / src.stem / f"{src.stem}.ipynb"
            if not nb.exists():
                raise FileNotFoundError(
                    f"chapter '{src.stem}' has not been executed at profile '{profile}' ({nb})"
                )
            labels.update(_stage_notebook(src.stem, nb, st / "chapters" / nb.name, staged))
            if (bdir / src.stem / "figures").exists():
                shutil.copytree(bdir / src.stem / "figures", st / "chapters" / "figures" / src.stem)
        else:
            shutil.copy(src, st / "chapters" / src.name)
    intro = st / "chapters" / "intro.md"
    if intro.exists():  # one read, the citations and the ledger, one write
        text = pages.cite_works(text=intro.read_text())
        if ledger.MARKER in text:
            text = text.replace(ledger.MARKER, ledger.table(bdir, profile, CHAPTERS, labels))
        intro.write_text(text)
    how = st / "chapters" / "how-built.md"
    if how.exists():  # the costs, read from data/costs/ now (the README carries the same table)
        from .estimates import gpu_table
        from .schedule import cost_table

        text = how.read_text().replace(COSTS_MARKER, cost_table(REPO))
        how.write_text(text.replace(GPU_MARKER, gpu_table()))
    (st / "chapters" / "status.md").write_text(status_page(profile, root))
    (st / "chapters" / "paper-numbers.md").write_text(papers.page(bdir, profile, staged))
    banner = pages.announcement(profile, staged)
    if banner is not None:  # every page of a build that is not the published book says so
        import yaml

        cfg = yaml.safe_load((st / "_config.yml").read_text())
        cfg.setdefault("html", {})["announcement"] = banner
        (st / "_config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return st


def _stage_notebook(chapter: str, src: Path, dst: Path, staged: list[str]) -> dict:
    """Copy an executed chapter notebook into the staging folder with chapter names linked, works cited at
    their first mention, alt text from each figure's caption, a label on each section that decided a
    verdict, the papers' numbers beside its own and the "How to rerun this page" section appended; returns
    {(chapter, claim): label}."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    pages.link_chapter_names(nb, [c for c in staged if c != chapter])
    pages.cite_works(nb)
    pages.alt_from_captions(nb)
    labels = pages.label_verdict_sections(nb, chapter)
    res = src.parent / "results.json"
    if res.exists():
        doc = load(res)
        beside = papers.chapter_markdown(chapter, doc.get("values", {}))
        if beside is not None:
            nb.cells.append(nbformat.v4.new_markdown_cell(beside))
        nb.cells.append(nbformat.v4.new_markdown_cell(pages.rerun_markdown(chapter, doc)))
    nbformat.write(nb, dst)
    return {(chapter, cid): lab for cid, lab in labels.items()}


def build(profile: str, root: Path | None = None) -> tuple[int, Path]:
    """Stage and build the book for ``profile``. Returns (exit code, html folder)."""
    return build_staged(stage(profile, root), build_dir(profile, root))


def build_staged(st: Path, out: Path) -> tuple[int, Path]:
    """Strict Sphinx build (``-W -n --keep-going``) of a staging folder into ``out/_build/html``."""
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [
        str(jb) if jb.exists() else "jupyter-book",
        "build",
        str(st),
        "--path-output",
        str(out),
        "--builder",
        "html",
        "-W",
        "-n",
        "--keep-going",
    ]
    rc = subprocess.call(cmd)
    return rc, out / "_build" / "html"


# -- the parameters cell, generated from the schema ------------------------------------------------------
def _parameters_cell_span(lines: list[str]) -> tuple[int, int]:
    """(first, end) line indices of the code of the chapter's ``parameters`` cell (after its options)."""
    for i, line in enumerate(lines):
        if (
            line.strip().startswith("```{code-cell}")
            and i + 1 < len(lines)
            and lines[i + 1].strip() == ":tags: [parameters]"
        ):
            j = i + 2
            while j < len(lines) and not lines[j].strip():
                j += 1
            end = next(k for k in range(j, len(lines)) if lines[k].strip() == "```")
            return j, end
    raise ValueError("no cell tagged parameters")


def parameters_cell_of(chapter: str) -> str:
    """The parameters cell as it stands in ``chapters/<chapter>.md``."""
    lines = (REPO / "chapters" / f"{chapter}.md").read_text(encoding="utf-8").splitlines()
    a, b = _parameters_cell_span(lines)
    return "\n".join(lines[a:b]).rstrip()


def write_parameters_cell(chapter: str) -> bool:
    """Replace the chapter's parameters cell by the one generated from its schema; True when it changed."""
    from ..chapters import schema
    from .params import parameters_cell

    path = REPO / "chapters" / f"{chapter}.md"
    lines = path.read_text(encoding="utf-8").splitlines()
    a, b = _parameters_cell_span(lines)
    new = parameters_cell(schema(chapter)).splitlines()
    if lines[a:b] == new:
        return False
    path.write_text("\n".join(lines[:a] + new + lines[b:]) + "\n", encoding="utf-8")
    return True
