"""The standard commands meet the book's own: `jupyter-book build .` at the repository root stops at once
saying that `rcbook book` builds the book (and reads nothing under .venv or build/ if it ever runs), and the
licences are stated in LICENSE and in every page's footer."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rankcollapse.book import sphinxext
from rankcollapse.book.runner import REPO


def config() -> dict:
    return yaml.safe_load((REPO / "_config.yml").read_text())


def test_sphinx_never_reads_the_environment_or_the_build_outputs():
    excluded = config()["exclude_patterns"]
    for folder in (".venv", "build", "_build", "data", "lib", "tests", "bench"):
        assert folder in excluded, folder


def test_licence_file_names_both_licences_and_the_footer_says_so():
    text = (REPO / "LICENSE").read_text()
    assert "MIT License" in text and "Copyright (c) 2026 The rank-collapse companion authors" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text
    assert "CC BY 4.0" in text and "https://creativecommons.org/licenses/by/4.0/" in text
    assert config()["html"]["extra_footer"] == "Code MIT, text and figures CC BY 4.0 (LICENSE)"


def app_at(src: Path, out: Path) -> SimpleNamespace:
    return SimpleNamespace(srcdir=str(src), outdir=str(out))


def test_the_extension_refuses_a_source_folder_that_was_not_staged(tmp_path):
    src = tmp_path / "repo"
    (src / "_build" / "html").mkdir(parents=True)
    (src / "_build" / ".doctrees").mkdir()
    assert not sphinxext.is_staged(src)
    with pytest.raises(SystemExit) as e:
        sphinxext.refuse_unstaged(app_at(src, src / "_build" / "html"))
    assert str(e.value.code) == sphinxext.NOT_STAGED and "\n" not in sphinxext.NOT_STAGED
    assert "rcbook book" in sphinxext.NOT_STAGED and "papermill" in sphinxext.NOT_STAGED
    assert not (src / "_build").exists()  # the empty folders Sphinx made are gone
    # a _build holding files (an earlier build of something else) is left as it is
    (src / "_build" / "html").mkdir(parents=True)
    (src / "_build" / "html" / "index.html").write_text("kept")
    with pytest.raises(SystemExit):
        sphinxext.refuse_unstaged(app_at(src, src / "_build" / "html"))
    assert (src / "_build" / "html" / "index.html").read_text() == "kept"


def test_a_staged_folder_is_built(tmp_path):
    from rankcollapse.book.build import stage

    st = stage("smoke", tmp_path, only=[])  # no chapter: the prose pages only
    assert sphinxext.is_staged(st)
    assert sphinxext.refuse_unstaged(app_at(st, tmp_path / "smoke" / "_build" / "html")) is None


def test_jupyter_book_build_at_the_root_stops_at_once_with_one_line(tmp_path):
    jb = Path(sys.executable).with_name("jupyter-book")
    if not jb.exists():
        pytest.skip("jupyter-book is not installed beside this Python")
    r = subprocess.run(
        [str(jb), "build", str(REPO), "--path-output", str(tmp_path)],  # writes nothing into the repository
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == sphinxext.NOT_STAGED, r.stderr[-2000:]
    assert "Traceback" not in r.stderr + r.stdout and "reading sources" not in r.stdout
