"""Bad parameters are refused before any work, through the runner and through raw papermill."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rankcollapse.chapters import schema
from rankcollapse.params import ParameterError

REPO = Path(__file__).resolve().parents[1]
RCBOOK = [sys.executable, "-m", "rankcollapse.cli"]
S = schema("decomposition")


def test_defaults_per_profile():
    smoke, full = S.resolve({"profile": "smoke"}), S.resolve({})
    assert full["profile"] == "full" and smoke["profile"] == "smoke"
    assert smoke["big_d"] < full["big_d"]
    assert S.resolve({"big_d": 100, "profile": "smoke"})["big_d"] == 100


@pytest.mark.parametrize("given,words", [
    ({"no_such_param": 1}, ["unknown parameter", "no_such_param", "valid names", "big_layers"]),
    ({"big_layers": "six"}, ["'big_layers'", "an integer"]),
    ({"big_layers": 2.5}, ["'big_layers'", "an integer"]),
    ({"big_layers": 0}, ["'big_layers'", "[1, 96]"]),
    ({"weight_scale": -1.0}, ["'weight_scale'", "[1e-06, 100.0]"]),
    ({"recon_heads": [1, "x"]}, ["'recon_heads'", "a list of integers"]),
    ({"profile": "huge"}, ["'profile'", "'smoke', 'full', 'paper'"]),
    ({"device": "tpu"}, ["'device'", "'auto', 'cpu', 'cuda'"]),
])
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


@pytest.mark.parametrize("args,words", [
    (["-p", "no_such_param", "1"], ["unknown parameter", "no_such_param", "valid names"]),
    (["-p", "big_layers", "six"], ["'big_layers'", "an integer"]),
    (["-p", "big_layers", "0"], ["'big_layers'", "[1, 96]"]),
])
def test_runner_refuses_before_work(tmp_path, args, words):
    r = subprocess.run(RCBOOK + ["run", "decomposition", "--profile", "smoke", *args], capture_output=True,
                       text=True, env=_env(tmp_path), cwd=REPO)
    assert r.returncode == 2, r.stdout + r.stderr
    for w in words:
        assert w in r.stderr
    assert not (tmp_path / "build").exists()  # nothing started, nothing left behind


def test_runner_refuses_unknown_chapter(tmp_path):
    r = subprocess.run(RCBOOK + ["run", "nope"], capture_output=True, text=True, env=_env(tmp_path), cwd=REPO)
    assert r.returncode == 2 and "unknown chapter" in r.stderr and "decomposition" in r.stderr


def _raw_papermill(tmp_path, *params):
    """The README's raw route: jupytext --to ipynb -o - chapters/X.md | papermill - out.ipynb -p NAME VALUE."""
    bindir = Path(sys.executable).parent
    cmd = (f"{bindir}/jupytext --to ipynb -o - {REPO}/chapters/decomposition.md | "
           f"{bindir}/papermill - {tmp_path}/out.ipynb -k python3 --cwd {tmp_path} " + " ".join(params))
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, MPLBACKEND="Agg"))


@pytest.mark.parametrize("params,words", [
    (["-p", "no_such_param", "1"], ["unknown parameter", "no_such_param", "valid names"]),
    (["-p", "big_layers", "six"], ["big_layers", "an integer"]),
    (["-p", "share_seeds", "0"], ["share_seeds", "[1, 1000]"]),
])
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
