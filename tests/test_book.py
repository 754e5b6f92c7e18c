"""The strict book build: glued numbers and figures render; a broken reference fails the build."""

import json
import re

import pytest

from rankcollapse.book.build import build_staged, stage
from rankcollapse.book.runner import run_chapter
from tiny import DECOMPOSITION as SMALL


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    root = tmp_path_factory.mktemp("bk")
    o = run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=root)
    assert o.status == "ran", o.message
    return root


def test_book_renders_glue_and_figures(executed):
    st = stage("smoke", executed, only=["decomposition"])
    rc, html = build_staged(st, executed / "smoke")
    assert rc == 0
    page = (html / "chapters" / "decomposition.html").read_text()
    res = json.loads((executed / "smoke" / "decomposition" / "results.json").read_text())
    text = re.sub(r"<[^>]+>", "", page)
    assert f"Over {res['values']['recon_configs']['value']} configurations" in " ".join(text.split())
    assert len(re.findall(r"<img[^>]+src=", page)) >= 3
    # every figure's image carries alt text made from its caption (the build adds it)
    alts = re.findall(r'<img[^>]*\balt="([^"]*)"', page)
    assert len(alts) >= 3 and all(a.strip() for a in alts), alts
    # the papers are cited at their first mention and the citation links to the bibliography
    assert re.search(r'<a [^>]*href="references\.html#id\d*"[^>]*>Dong <em>et al\.</em></a>', page) or (
        'href="references.html#' in page and "Dong" in text
    )
    status = (html / "chapters" / "status.html").read_text()
    assert "decomposition" in status and "smoke" in status


def test_broken_reference_fails_the_build(executed):
    st = stage("smoke", executed, only=["decomposition"])
    nb_path = st / "chapters" / "decomposition.ipynb"
    nb = json.loads(nb_path.read_text())
    md = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    md["source"] = "".join(md["source"]) + "\n\nSee {numref}`fig-that-does-not-exist`.\n"
    nb_path.write_text(json.dumps(nb))
    rc, _ = build_staged(st, executed / "smoke-broken")
    assert rc != 0
