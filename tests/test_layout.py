"""The house's layout (#40): each chapter's code is found by its role, the science never sees a chapter's
parameters, and no option is off everywhere.

* every chapter is a package ``chapters/<name>/`` with exactly ``__init__``, ``experiments``, ``figures``,
  ``verdicts`` and ``report``;
* figures, rules and records are defined in their role's file (``fig_*`` in figures, ``verdict_*``,
  ``old_verdict_*``, ``judge_*``, ``RULE_*`` and ``VERDICTS`` in verdicts, ``record_*`` and ``table_*`` in
  report), so "where is the rule for H3, and its control?" has one answer;
* roles import downwards only (experiments < verdicts < report < figures < __init__), and chapters never
  import one another;
* no module is named by a vague word (common, runs, util, utils, helpers, misc, shared);
* nothing in the science or in Part III's study layer (``core``, ``toy``, ``lm``, ``hf``, ``repair``) imports
  the runner or a chapter, and no function of ``lm`` or ``repair`` takes a chapter's parameter namespace
  ``p``;
* no boolean parameter is off in every profile (an option no chapter takes);
* ``book/`` has no import circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rankcollapse import store
from rankcollapse.chapters import CHAPTERS, schema

PKG = Path(store.__file__).resolve().parent
ROLES = ("experiments", "verdicts", "report", "figures", "__init__")  # each imports only roles before it
OWN = {
    "figures": ("fig_",),
    "verdicts": ("verdict_", "old_verdict_", "judge_", "RULE_", "VERDICTS"),
    "report": ("record_", "table_"),
}
VAGUE = {"common", "runs", "util", "utils", "helpers", "misc", "shared"}
SCIENCE = ("core", "toy", "lm", "hf", "repair")
NAMES = [n.replace("-", "_") for n in CHAPTERS]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _defined(tree: ast.Module) -> set[str]:
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    out.add(t.id)
    return out


def _sibling_imports(tree: ast.Module) -> set[str]:
    """Roles of the same chapter a role file imports (``from .x import ...``, ``from . import x``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out |= {a.name for a in node.names}
    return out


def _owner(name: str) -> str | None:
    for role, prefixes in OWN.items():
        if any(name == p or name.startswith(p) for p in prefixes):
            return role
    return None


@pytest.mark.parametrize("name", NAMES)
def test_chapter_is_a_package_of_roles(name):
    d = PKG / "chapters" / name
    assert d.is_dir(), f"chapters/{name} is not a package"
    files = {f.stem for f in d.glob("*.py")}
    assert files == set(ROLES), f"chapters/{name} holds {sorted(files)}, not exactly {sorted(ROLES)}"


@pytest.mark.parametrize("name", NAMES)
def test_names_live_in_their_role(name):
    d = PKG / "chapters" / name
    if not d.is_dir():
        pytest.skip("not a package yet")
    wrong = []
    for role in ROLES:
        for n in _defined(_tree(d / f"{role}.py")):
            owner = _owner(n)
            if owner is not None and owner != role:
                wrong.append(f"{role}.py defines {n} (belongs in {owner}.py)")
    assert not wrong, "; ".join(wrong)


@pytest.mark.parametrize("name", NAMES)
def test_roles_import_downwards(name):
    d = PKG / "chapters" / name
    if not d.is_dir():
        pytest.skip("not a package yet")
    bad = []
    for i, role in enumerate(ROLES):
        tree = _tree(d / f"{role}.py")
        for other in _sibling_imports(tree):
            if other in ROLES and ROLES.index(other) >= i:
                bad.append(f"{role}.py imports {other}")
        for node in ast.walk(tree):  # no chapter imports another
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                top = node.module.split(".")[0]
                if node.level == 2 and top in NAMES and top != name:
                    bad.append(f"{role}.py imports chapter {top}")
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[:2] == ["rankcollapse", "chapters"] and len(parts) > 2 and parts[2] != name:
                    bad.append(f"{role}.py imports chapter {parts[2]}")
    assert not bad, "; ".join(bad)


def test_no_vague_module_names():
    vague = [
        f.relative_to(PKG).as_posix()
        for f in PKG.rglob("*.py")
        if "__pycache__" not in f.parts and (f.stem in VAGUE or f.parent.name in VAGUE)
    ]
    assert not vague, f"modules named by a vague word: {vague}"


def test_the_science_never_sees_a_chapter():
    bad = []
    for sub in SCIENCE:
        for f in sorted((PKG / sub).rglob("*.py")) if (PKG / sub).is_dir() else []:
            tree = _tree(f)
            rel = f.relative_to(PKG).as_posix()
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = [a.arg for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs]
                    if "p" in args and sub in ("lm", "repair"):  # toy/nets' ``p`` is a network's weights
                        bad.append(f"{rel}: {node.name}(p, ...)")
                if isinstance(node, ast.ImportFrom):
                    mod = node.module or ""
                    absolute = mod if node.level == 0 else None
                    if node.level >= 2 and mod.split(".")[0] in ("book", "chapters"):
                        bad.append(f"{rel} imports {mod}")
                    if absolute and absolute.split(".")[:2] in (
                        ["rankcollapse", "book"],
                        ["rankcollapse", "chapters"],
                    ):
                        bad.append(f"{rel} imports {absolute}")
    assert not bad, "; ".join(bad)


def test_no_option_is_off_in_every_profile():
    off = []
    for name in CHAPTERS:
        for prm in schema(name).params:
            if prm.kind == "bool" and not any(prm.default(pr) for pr in ("smoke", "full", "paper")):
                off.append(f"{name}: {prm.name}")
    assert not off, f"boolean parameters off in every profile (an option no chapter takes): {off}"


def test_no_import_circle_in_the_runner():
    mods = {f.stem: f for f in (PKG / "book").glob("*.py") if f.stem != "__init__"}
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(_tree(f)):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                graph[m] |= {n for n in names if n in mods and n != m}
    seen, stack, circles = set(), [], []

    def visit(m):
        if m in stack:
            circles.append(stack[stack.index(m) :] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for n in sorted(graph[m]):
            visit(n)
        stack.pop()

    for m in sorted(graph):
        visit(m)
    assert not circles, f"import circles in book/: {[' -> '.join(c) for c in circles]}"
