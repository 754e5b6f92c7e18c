"""Packaging as users expect: every direct dependency of pyproject.toml (and of its extras) is pinned in
requirements.lock by a version its range admits."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    out = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_every_direct_dependency_is_locked_within_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"]:  # every extra make.sh installs
        reqs += project["optional-dependencies"][extra]
    pins = _pins()
    assert len(pins) > len(reqs)  # the transitive ones too
    for r in map(Requirement, reqs):
        name = r.name.lower().replace("_", "-")
        assert name in pins, f"{r.name} is not pinned in requirements.lock (bash make.sh lock)"
        assert r.specifier.contains(Version(pins[name]), prereleases=True), (r, pins[name])


def test_no_cuda_build_is_locked():
    assert not [p for p in _pins() if p.startswith(("nvidia-", "triton", "cuda-"))]


def test_what_the_book_build_and_the_browser_test_load_is_declared():
    import yaml

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {Requirement(r).name.lower() for r in project["optional-dependencies"]["book"]}
    cfg = yaml.safe_load((REPO / "_config.yml").read_text())
    for ext in cfg["sphinx"]["extra_extensions"]:
        if not ext.startswith("rankcollapse."):
            assert ext.lower() in declared, f"the Sphinx extension {ext} is not in the book extra"
    tests_need = {Requirement(r).name.lower() for r in project["optional-dependencies"]["test"]}
    assert {"pytest", "playwright", "ruff"} <= tests_need
