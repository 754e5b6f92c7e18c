"""Bad parameters are refused before any work, through the runner and through raw papermill."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rankcollapse.book.params import ParameterError
from rankcollapse.chapters import CHAPTERS, schema

REPO = Path(__file__).resolve().parents[1]
RCBOOK = [sys.executable, "-m", "rankcollapse.book.cli"]
S = schema("decomposition")


def test_defaults_per_profile():
    smoke, full = S.resolve({"profile": "smoke"}), S.resolve({})
    assert full["profile"] == "full" and smoke["profile"] == "smoke"
    assert smoke["big_d"] < full["big_d"]
    assert S.resolve({"big_d": 100, "profile": "smoke"})["big_d"] == 100


@pytest.mark.parametrize(
    "given,words",
    [
        ({"no_such_param": 1}, ["unknown parameter", "no_such_param", "valid names", "big_layers"]),
        ({"big_layers": "six"}, ["'big_layers'", "an integer"]),
        ({"big_layers": 2.5}, ["'big_layers'", "an integer"]),
        ({"big_layers": 0}, ["'big_layers'", "[1, 96]"]),
        ({"weight_scale": -1.0}, ["'weight_scale'", "[1e-06, 100.0]"]),
        ({"recon_heads": [1, "x"]}, ["'recon_heads'", "a list of integers"]),
        ({"profile": "huge"}, ["'profile'", "'smoke', 'full', 'paper'"]),
        ({"device": "tpu"}, ["'device'", "'auto', 'cpu', 'cuda'"]),
    ],
)
def test_resolve_rejects(given, words):
    with pytest.raises(ParameterError) as e:
        S.resolve(given)
    for w in words:
        assert w in str(e.value)


def test_lists_accept_text_like_papermill_passes():
    assert S.resolve({"recon_heads": "[1, 2]"})["recon_heads"] == [1, 2]
    assert S.resolve({"share_scales": [1, 2]})["share_scales"] == [1.0, 2.0]


def _env(tmp_path):
    return dict(os.environ, RCBOOK_BUILD=str(tmp_path / "build"))


@pytest.mark.parametrize(
    "args,words",
    [
        (["-p", "no_such_param", "1"], ["unknown parameter", "no_such_param", "valid names"]),
        (["-p", "big_layers", "six"], ["'big_layers'", "an integer"]),
        (["-p", "big_layers", "0"], ["'big_layers'", "[1, 96]"]),
    ],
)
def test_runner_refuses_before_work(tmp_path, args, words):
    r = subprocess.run(
        RCBOOK + ["run", "decomposition", "--profile", "smoke", *args],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=REPO,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    for w in words:
        assert w in r.stderr
    assert not (tmp_path / "build").exists()  # nothing started, nothing left behind


def test_runner_refuses_unknown_chapter(tmp_path):
    r = subprocess.run(
        RCBOOK + ["run", "nope"], capture_output=True, text=True, env=_env(tmp_path), cwd=REPO
    )
    assert r.returncode == 2 and "unknown chapter" in r.stderr and "decomposition" in r.stderr


def _raw_papermill(tmp_path, *params):
    """The README's raw route:
    jupytext --to ipynb -o - chapters/X.md | papermill - out.ipynb -p NAME VALUE."""
    bindir = Path(sys.executable).parent
    cmd = (
        f"{bindir}/jupytext --to ipynb -o - {REPO}/chapters/decomposition.md | "
        f"{bindir}/papermill - {tmp_path}/out.ipynb -k python3 --cwd {tmp_path} " + " ".join(params)
    )
    return subprocess.run(
        ["bash", "-c", cmd],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, MPLBACKEND="Agg"),
    )


@pytest.mark.parametrize(
    "params,words",
    [
        (["-p", "no_such_param", "1"], ["unknown parameter", "no_such_param", "valid names"]),
        (["-p", "big_layers", "six"], ["big_layers", "an integer"]),
        (["-p", "share_seeds", "0"], ["share_seeds", "[1, 1000]"]),
    ],
)
def test_raw_papermill_refuses_before_work(tmp_path, params, words):
    r = _raw_papermill(tmp_path, "-p", "profile", "smoke", *params)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "ParameterError" in out
    for w in words:
        assert w in out
    # no results and no figures were produced
    assert not list(tmp_path.rglob("results.json"))
    assert not list(tmp_path.rglob("*.png"))


# -- the parameters cell: the full profile's values, generated from the schema -----------------------------
@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_parameters_cell_is_generated_from_the_schema(chapter):
    from rankcollapse.book.build import parameters_cell_of
    from rankcollapse.book.params import parameters_cell

    assert parameters_cell_of(chapter) == parameters_cell(schema(chapter)), (
        f"the parameters cell of chapters/{chapter}.md drifted from the schema: "
        f"rcbook cell {chapter} --write"
    )


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_papermill_reads_the_same_parameters_as_rcbook_list(chapter, tmp_path):
    import jupytext
    import papermill

    nb = tmp_path / f"{chapter}.ipynb"
    jupytext.write(jupytext.read(REPO / "chapters" / f"{chapter}.md"), nb)
    seen = papermill.inspect_notebook(str(nb))
    full = schema(chapter).resolve({}, "full")
    assert list(seen) == list(full)
    for name, info in seen.items():
        assert ast.literal_eval(info["default"]) == full[name], name


def test_a_name_takes_the_profiles_value_unless_injected_or_edited():
    from rankcollapse.book.notebook import given_parameters, injected_names

    sch = schema("decomposition")
    cell = sch.resolve({}, "full")  # what the parameters cell assigns
    injected = injected_names({"In": ["x = 1", "# Parameters\nprofile = 'smoke'\nbig_layers = 12\n"]})
    assert injected == {"profile", "big_layers"}
    ns = dict(cell, profile="smoke", big_layers=12)
    got = sch.resolve(given_parameters(sch, ns, injected))
    smoke = sch.resolve({"profile": "smoke"})
    assert got["big_d"] == smoke["big_d"] != cell["big_d"]  # not given: the smoke value
    assert got["big_layers"] == 12 != smoke["big_layers"]  # injected, though equal to full's value
    edited = dict(cell, big_d=24)  # an edit in the cell, no papermill
    assert sch.resolve(given_parameters(sch, edited, set()))["big_d"] == 24
    with pytest.raises(ParameterError, match="unknown"):
        sch.resolve(given_parameters(sch, dict(cell, bogus=1), set()))
