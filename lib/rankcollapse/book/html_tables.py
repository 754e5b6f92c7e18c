"""Plain HTML tables for the pages (the book renders Markdown outputs as CommonMark, which has no tables)."""

from __future__ import annotations

from html import escape


def html_table(header: list[str], rows: list[list]) -> str:
    """A plain HTML table of ``header`` and ``rows``, every cell escaped."""
    th = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="table"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
