"""A small Sphinx extension for the book (listed in _config.yml, sphinx.extra_extensions).

It loads MathJax on every page (chapter titles in the navigation contain maths, but Sphinx only
loads MathJax on pages whose body has some), and it removes duplicate inline scripts from every page:
Jupyter Book 1 with sphinx-thebe emits the ``const THEBE_JS_URL = ...`` script twice per page, which
raises a JavaScript error in the browser ("Identifier 'THEBE_JS_URL' has already been declared").
The browser test fails on any page error. It also adds the book's stylesheet (``static/rcbook.css``: code
cells and tables wrap, so no page scrolls sideways at 1280 px), and marks each table cell whose whole text is
one short token (a number, a name with a hyphen; :func:`rankcollapse.book.html_tables.is_token`) with the
class ``tok``, which the stylesheet never breaks: Markdown tables here, HTML tables where
:func:`~rankcollapse.book.html_tables.html_table` writes them.

It also stops a build of anything but a staging folder: ``jupyter-book build .`` at the repository root
would read the Jupytext sources, which are never executed by the book (papermill executes them first,
``rcbook run``), and every file under the root. :func:`rankcollapse.book.build.stage` writes
:data:`STAGED_MARKER` into the folder it lays out (``build/<profile>/_book``); a source folder without it
stops the build at once, before any page is read, with one line saying that ``rcbook book`` builds it.
"""

from __future__ import annotations

import os
from pathlib import Path

STATIC = Path(__file__).with_name("static")
STAGED_MARKER = ".rcbook-staged"  # written by build.stage() into the staging folder
NOT_STAGED = (
    "this book is built by `rcbook book` (bash make.sh book): its chapters are executed by papermill first"
)


def is_staged(srcdir) -> bool:
    """Whether ``srcdir`` is a staging folder laid out by :func:`rankcollapse.book.build.stage`."""
    return (Path(srcdir) / STAGED_MARKER).is_file()


def _remove_empty_dirs(top: Path) -> None:
    """Remove ``top`` and the folders under it that are empty (what Sphinx made before the extension was
    loaded); a folder holding any file is left as it is."""
    if not top.is_dir():
        return
    for d, _, _ in sorted(os.walk(top), key=lambda t: -len(t[0])):
        try:
            os.rmdir(d)
        except OSError:
            pass


def refuse_unstaged(app) -> None:
    """Exit with :data:`NOT_STAGED` (one line on stderr, exit status 1) when Sphinx's source folder is not a
    staging folder, removing the empty output folders Sphinx made under it before loading this extension."""
    if is_staged(app.srcdir):
        return
    out = Path(app.outdir).resolve()
    src = Path(app.srcdir).resolve()
    if out.is_relative_to(src / "_build"):
        _remove_empty_dirs(src / "_build")
    raise SystemExit(NOT_STAGED)


def _static_path(app):
    app.config.html_static_path.append(str(STATIC))


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for s in scripts:
        # the same inline script arrives once with filename None and once with '' (two registrations)
        key = (
            getattr(s, "filename", None) or "",
            repr(getattr(s, "attributes", None)),
            getattr(s, "priority", 0),
        )
        if key in seen:
            continue
        seen.add(key)
        kept.append(s)
    scripts[:] = kept


def _maths_everywhere(app, env):
    """Mark every document as containing maths so MathJax is loaded for the navigation's titles too."""
    domain = env.get_domain("math")
    for docname in env.found_docs:
        domain.data.setdefault("has_equations", {})[docname] = True


def _mark_tokens(app, doctree, docname):
    """Give every table cell (header or body) whose text is one short token the class ``tok``."""
    from docutils import nodes

    from .html_tables import is_token

    for entry in doctree.findall(nodes.entry):
        if is_token(entry.astext()):
            entry["classes"].append("tok")


def setup(app):
    refuse_unstaged(app)  # before anything is read (SystemExit: Jupyter Book prints no traceback for it)
    app.connect("builder-inited", _static_path)
    app.add_css_file("rcbook.css")
    app.connect("env-updated", _maths_everywhere)
    app.connect("doctree-resolved", _mark_tokens)
    app.connect(
        "html-page-context", _dedupe_scripts, priority=100
    )  # early: emit_firstresult stops at the first handler that returns
    return {"parallel_read_safe": True, "parallel_write_safe": True}
