"""Plain HTML tables for the pages (the book renders Markdown outputs as CommonMark, which has no tables)."""

from __future__ import annotations

import re
from html import escape

# a cell whose whole text is one token of at most this many characters (a number such as 2.91e-08, a name
# such as penalty-1x) is marked ``tok`` and never broken, not even at its hyphen (static/rcbook.css); the
# browser test (tests/test_html.py) checks the same length at 1280 px
TOKEN_CHARS = 12


def is_token(text: str) -> bool:
    """Whether ``text`` is one short token: no whitespace inside, 1 to :data:`TOKEN_CHARS` characters."""
    t = text.strip()
    return 0 < len(t) <= TOKEN_CHARS and not re.search(r"\s", t)


def _cell(tag: str, c) -> str:
    s = str(c)
    cls = ' class="tok"' if is_token(s) else ""
    return f"<{tag}{cls}>{escape(s)}</{tag}>"


def html_table(header: list[str], rows: list[list]) -> str:
    """A plain HTML table of ``header`` and ``rows``, every cell escaped; a cell of one short token is
    marked so that it never breaks."""
    th = "".join(_cell("th", h) for h in header)
    body = "".join("<tr>" + "".join(_cell("td", c) for c in r) + "</tr>" for r in rows)
    return f'<table class="table"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'
