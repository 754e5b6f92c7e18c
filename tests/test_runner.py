"""The runner end to end on the decomposition chapter at smoke size: cache, determinism, check."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rankcollapse.book.records import compare
from rankcollapse.book.results import load, strip_volatile
from rankcollapse.book.runner import run_chapter

REPO = Path(__file__).resolve().parents[1]
SMALL = {
    "recon_layers": [1, 2],
    "recon_heads": [1, 2],
    "big_layers": 3,
    "big_heads": 2,
    "big_tokens": 8,
    "big_d": 16,
    "share_scales": [1.0],
    "share_seeds": 1,
}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    oa = run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=a)
    ob = run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=b)
    assert oa.status == "ran" and ob.status == "ran", (oa.message, ob.message)
    return a, b


def test_outputs_written(two_runs):
    out = two_runs[0] / "smoke" / "decomposition"
    assert (out / "decomposition.ipynb").exists()
    doc = load(out / "results.json")
    assert doc["profile"] == "smoke" and doc["params"]["big_d"] == 16 and doc["seed"] == 0
    assert doc["library_version"] and doc["wall_time_s"] > 0
    assert doc["verdicts"]["D1"]["verdict"] == "supported"
    assert {p.name for p in (out / "figures").iterdir()} >= {"fig-recon-error.png", "fig-path-lengths.png"}


def test_deterministic(two_runs):
    a, b = (strip_volatile(load(r / "smoke" / "decomposition" / "results.json")) for r in two_runs)
    assert a == b


def test_cache_executes_nothing_when_unchanged(two_runs):
    o = run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=two_runs[0])
    assert o.status == "cached"
    changed = dict(SMALL, seed=1)
    o = run_chapter("decomposition", changed, profile="smoke", device="cpu", root=two_runs[0])
    assert o.status == "ran"


def test_compare_uses_recorded_tolerances(two_runs):
    doc = load(two_runs[0] / "smoke" / "decomposition" / "results.json")
    assert all(r.ok for r in compare(doc, doc))
    moved = json.loads(json.dumps(doc))
    v = moved["values"]["bert_mean_length"]
    v["value"] = v["value"] * (1 + 1e-6)  # far outside its recorded rtol of 1e-12
    rows = compare(doc, moved)
    assert [r.name for r in rows if not r.ok] == ["bert_mean_length"]
    moved = json.loads(json.dumps(doc))
    moved["verdicts"]["D1"]["verdict"] = "refuted"
    assert [r.name for r in compare(doc, moved) if not r.ok] == ["verdict D1"]
    moved = json.loads(json.dumps(doc))
    moved["params"]["big_d"] = 32
    assert [r.name for r in compare(doc, moved) if not r.ok] == ["params"]


def test_check_command_fails_on_mismatch(two_runs, tmp_path):
    """`rcbook check` against a recorded file that disagrees exits non-zero and prints the table."""
    build = two_runs[0]
    env = dict(os.environ, RCBOOK_BUILD=str(build), RCBOOK_EXPECTED=str(tmp_path))
    doc = load(build / "smoke" / "decomposition" / "results.json")
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "decomposition.json").write_text(json.dumps(doc))
    ok = subprocess.run(
        [sys.executable, "-m", "rankcollapse.book.cli", "check", "decomposition", "--profile", "smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc["values"]["recon_configs"]["value"] += 1
    (tmp_path / "smoke" / "decomposition.json").write_text(json.dumps(doc))
    bad = subprocess.run(
        [sys.executable, "-m", "rankcollapse.book.cli", "check", "decomposition", "--profile", "smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert bad.returncode == 1
    assert "recon_configs" in bad.stdout and "FAIL" in bad.stdout


def test_failed_chapter_leaves_nothing(tmp_path, monkeypatch):
    """A chapter that raises mid-way reports the chapter and cell and leaves no partial outputs."""
    import rankcollapse.book.runner as R

    src = tmp_path / "chapters"
    src.mkdir()
    text = (REPO / "chapters" / "decomposition.md").read_text()
    text = text.replace("archs = dec.architecture_lengths()", "raise RuntimeError('boom')")
    (src / "decomposition.md").write_text(text)
    monkeypatch.setattr(R, "chapter_source", lambda name: src / f"{name}.md")
    o = R.run_chapter("decomposition", SMALL, profile="smoke", device="cpu", root=tmp_path / "build")
    assert o.status == "failed"
    assert "decomposition" in o.message and "boom" in o.message and "cell" in o.message
    assert not (tmp_path / "build" / "smoke" / "decomposition").exists()
    # nothing but the failed notebook, kept for the user to read
    # locks are no output
    assert sorted(p.name for p in (tmp_path / "build" / "smoke").iterdir()) == [".locks", "failed"]
    assert "boom" in (tmp_path / "build" / "smoke" / "failed" / "decomposition.ipynb").read_text()


def test_glued_text_is_never_read_as_a_file_name(tmp_path, monkeypatch):
    # IPython's Markdown(".") would read the folder "." (and fail); glued strings are text, always
    from rankcollapse.book.notebook import as_markdown

    monkeypatch.chdir(tmp_path)
    (tmp_path / "note.md").write_text("file contents")
    assert as_markdown(".")._repr_markdown_() == "."
    assert as_markdown("note.md")._repr_markdown_() == "note.md"
