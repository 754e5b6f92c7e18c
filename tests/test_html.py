"""The built book, opened page by page in real headless Chromium, as a reader meets it.

Needs the smoke book (`rcbook book --profile smoke`, which `bash make.sh test` builds first) and Debian's
chromium (`make.sh` installs it when run as root). Fails on: a broken or zero-size image, an error or
traceback in any output, a glued value that did not render (or rendered as a Python repr), a dead internal
link, a chapter missing from the navigation, an image without alt text, a figure without a caption, a
figure whose panels are drawn narrower than MIN_PANEL_PX at a 1280 px window, a table cell whose number or
single word wraps. Saves
a screenshot of each chapter page to build/smoke/screenshots/ for review.

The published book is checked the same way with ``RCBOOK_HTML_PROFILE=full`` (after `bash make.sh book`):
there every page must carry *no* banner, and the rerun commands name the full profile.
"""

import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from rankcollapse.book.panels import MIN_PANEL_PX, png_panels_per_row, px_per_panel
from rankcollapse.book.runner import build_dir
from rankcollapse.chapters import CHAPTERS

PROFILE = os.environ.get("RCBOOK_HTML_PROFILE", "smoke")
HTML = build_dir(PROFILE) / "_build" / "html"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="Debian's chromium is not installed (bash make.sh setup installs it as root)",
)


@pytest.fixture(scope="module")
def browser():
    if not (HTML / "index.html").exists():
        pytest.fail(
            f"no built book at {HTML}: run `rcbook book --profile {PROFILE}` first (bash make.sh test does "
            "for smoke)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def pages():
    return sorted(p for p in (HTML / "chapters").glob("*.html"))


def test_every_chapter_is_in_the_navigation(browser):
    page = browser.new_page()
    page.goto((HTML / "chapters" / "intro.html").as_uri())
    nav = page.eval_on_selector_all(
        "nav.bd-links a, .bd-sidenav a", "els => els.map(e => e.getAttribute('href'))"
    )
    page.close()
    nav_targets = {Path(unquote(h.split("#")[0])).stem for h in nav if h}
    missing = [c for c in CHAPTERS if c not in nav_targets]
    assert not missing, f"chapters missing from the navigation: {missing}"


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.stem)
def test_page_as_a_reader_sees_it(browser, path):
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    # images: present and decoded with a non-zero size
    bad_imgs = page.evaluate(
        "Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)"
        ".map(i => i.getAttribute('src'))"
    )
    assert not bad_imgs, f"{path.name}: broken or zero-size images {bad_imgs}"
    # every image says what it shows (alt text) and every figure has a caption
    no_alt = page.evaluate(
        "Array.from(document.querySelectorAll('article img'))"
        ".filter(i => !(i.getAttribute('alt') || '').trim()).map(i => i.getAttribute('src'))"
    )
    assert not no_alt, f"{path.name}: images without alt text {no_alt}"
    no_caption = page.evaluate(
        "Array.from(document.querySelectorAll('article figure'))"
        ".filter(f => !(f.querySelector('figcaption') && f.querySelector('figcaption').innerText.trim()))"
        ".map(f => f.id || f.className)"
    )
    assert not no_caption, f"{path.name}: figures without a caption {no_caption}"
    # no error output or traceback anywhere in the rendered outputs
    outputs = page.eval_on_selector_all(".cell_output, .output", "els => els.map(e => e.innerText)")
    for text in outputs:
        assert "Traceback (most recent call last)" not in text, f"{path.name}: a traceback in an output"
        assert "Error:" not in text.split("\n")[0], f"{path.name}: an error in an output: {text[:200]}"
    assert not page.query_selector_all(".output.traceback, .output.error, div.stderr"), (
        f"{path.name}: error output"
    )
    # glue that did not render shows up as a pending or literal glue role/directive
    body = page.inner_text("article")
    for marker in ("{glue:", "{glue}", "glue:text", "glue:md", "glue:figure"):
        assert marker not in body, f"{path.name}: unrendered glue ({marker})"
    # a string glued for {glue:md} but placed with {glue:text} shows its Python repr
    for marker in ("IPython.core.display", "Markdown object>"):
        assert marker not in body, f"{path.name}: a glued string placed with glue:text ({marker})"
    # maths rendered offline by MathJax
    if "\\(" in page.content() or "\\[" in page.content():
        assert page.query_selector("mjx-container"), f"{path.name}: maths not rendered (MathJax missing)"
    # internal links: target file exists and, if any, the anchor exists on it
    hrefs = page.eval_on_selector_all("article a[href]", "els => els.map(e => e.getAttribute('href'))")
    for h in hrefs:
        u = urlparse(h)
        if u.scheme or h.startswith("mailto:"):
            continue
        target = (path.parent / unquote(u.path)).resolve() if u.path else path
        assert target.exists(), f"{path.name}: dead link {h}"
        if u.fragment and target.suffix == ".html":
            assert f'id="{u.fragment}"' in target.read_text(), f"{path.name}: dead anchor {h}"
    assert not errors, f"{path.name}: JavaScript errors {errors}"
    shots = HTML.parent.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / f"{path.stem}.png"), full_page=True)
    page.close()


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.stem)
def test_page_fits_1280_px_and_says_its_profile(browser, path):
    """At 1280 px nothing on the page scrolls sideways (the ledger, code cells, tables: the book's stylesheet
    wraps them); every page of a smoke build carries the banner saying it is not the published book, with
    the sizes it used, and no page of the full build does; every chapter page ends with the commands that
    regenerate it."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    wide = page.evaluate(
        """() => Array.from(document.querySelectorAll('article *')).filter(e => {
               const s = getComputedStyle(e);
               const scrolls = s.overflowX === 'auto' || s.overflowX === 'scroll';
               // a display equation wider than the column scrolls by MathJax's design; nothing else may
               return scrolls && !e.closest('mjx-container') && e.scrollWidth > e.clientWidth + 2;
             }).map(e => e.tagName + '.' + e.className + ' ' + e.scrollWidth + '>' + e.clientWidth)"""
    )
    assert not wide, f"{path.name}: scrolls sideways at 1280 px: {wide[:5]}"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (
        f"{path.name}: the page is wider than the window"
    )
    banner = (
        page.inner_text(".bd-header-announcement") if page.query_selector(".bd-header-announcement") else ""
    )
    if PROFILE == "full":
        assert not banner.strip(), f"{path.name}: the published (full) book carries a banner: {banner[:120]}"
    else:
        assert PROFILE in banner and "full" in banner, f"{path.name}: no banner naming the {PROFILE} profile"
    if path.stem in CHAPTERS:
        body = page.inner_text("article")
        assert "How to rerun this page" in body and f"rcbook run {path.stem} --profile {PROFILE}" in body, (
            f"{path.name}: no rerun section"
        )
    page.close()


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.stem)
def test_figure_panels_are_readable_at_1280_px(browser, path):
    """Every figure's panels are at least MIN_PANEL_PX wide as the page draws them at 1280 px: the image's
    rendered width divided by its panels per row, a count Chapter.figure wrote into the PNG itself
    (rankcollapse.book.panels; a figure of eight panels in a row gives 84 px a panel and fails). An image
    in a figure without that count fails too: it did not come through Chapter.figure."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    imgs = page.evaluate(
        "Array.from(document.querySelectorAll('article figure img')).map(i => [i.getAttribute('src'), "
        "i.getBoundingClientRect().width, (i.closest('figure') || {}).id || ''])"
    )
    page.close()
    narrow, unknown = [], []
    for src, width, fig_id in imgs:
        n = png_panels_per_row((path.parent / unquote(urlparse(src).path)).resolve())
        if n is None:
            unknown.append(fig_id or src)
        elif px_per_panel(width, n) < MIN_PANEL_PX:
            narrow.append(f"{fig_id or src}: {n} panels in a row at {width:.0f} px ({width / n:.0f} each)")
    assert not unknown, f"{path.name}: figures without a panel count (not from Chapter.figure): {unknown}"
    assert not narrow, f"{path.name}: panels narrower than {MIN_PANEL_PX} px at 1280 px: {narrow}"


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.stem)
def test_no_number_in_a_table_wraps_at_1280_px(browser, path):
    """No table cell whose text is one short token (up to 12 characters: a number such as 0.986, a word such
    as "ratio") is broken over two lines at 1280 px: its text's line boxes all share one top. The stylesheet
    wraps table cells between words only and never breaks a cell marked as one token
    (rankcollapse.book.html_tables.is_token), so this holds wherever a table fits the column, which
    test_page_fits_1280_px_and_says_its_profile checks: a table too wide is split or narrowed."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)
    broken = page.evaluate(
        """() => Array.from(document.querySelectorAll('article table td, article table th')).filter(c => {
               const t = c.innerText.trim();
               if (!t || /\\s/.test(t) || t.length > 12) return false;
               // the line boxes of the cell's text nodes only (element boxes sit at other tops)
               const tops = [];
               const w = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
               for (let n = w.nextNode(); n; n = w.nextNode()) {
                 if (!n.textContent.trim()) continue;
                 const r = document.createRange();
                 r.selectNodeContents(n);
                 for (const b of r.getClientRects()) if (b.width > 0) tops.push(b.top);
               }
               tops.sort((a, b) => a - b);
               return tops.some((y, i) => i > 0 && y - tops[i - 1] > 4);
             }).map(c => c.innerText.trim())"""
    )
    page.close()
    assert not broken, f"{path.name}: table cells broken over two lines at 1280 px: {broken[:10]}"
