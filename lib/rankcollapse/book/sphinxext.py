"""A small Sphinx extension for the book (listed in _config.yml, sphinx.extra_extensions).

It loads MathJax on every page (chapter titles in the navigation contain maths, but Sphinx only
loads MathJax on pages whose body has some), and it removes duplicate inline scripts from every page:
Jupyter Book 1 with sphinx-thebe emits the ``const THEBE_JS_URL = ...`` script twice per page, which
raises a JavaScript error in the browser ("Identifier 'THEBE_JS_URL' has already been declared").
The browser test fails on any page error. It also adds the book's stylesheet (``static/rcbook.css``: code
cells and tables wrap, so no page scrolls sideways at 1280 px).
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).with_name("static")


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


def setup(app):
    app.connect("builder-inited", _static_path)
    app.add_css_file("rcbook.css")
    app.connect("env-updated", _maths_everywhere)
    app.connect(
        "html-page-context", _dedupe_scripts, priority=100
    )  # early: emit_firstresult stops at the first handler that returns
    return {"parallel_read_safe": True, "parallel_write_safe": True}
