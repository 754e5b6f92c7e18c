"""One content-addressed store: keys from the source the code really imports, one root, locks, atomic writes.

Cache keys hash the source that decides a result, and only that source:

* :func:`import_closure` -- the modules of this package reachable from some modules by *static* imports
  (``import rankcollapse.x``, ``from rankcollapse.x import y``, ``from . import x``, ``from ..lm import y``,
  imports inside functions included), read from the source files with :mod:`ast`, never imported. A module
  brings its parent packages (their ``__init__.py`` runs when it is imported). Imports made by name at run
  time (``importlib.import_module(name)``) are not followed.
* :func:`code_hash` -- sha256 over (relative path, bytes) of every file of a closure.
* :func:`chapter_modules` / :func:`chapter_code_hash` -- the same for a chapter: the modules its code cells
  import plus its module of :data:`rankcollapse.chapters.CHAPTERS`, and the chapter's own source.

So a docstring edit in ``cli.py`` re-executes no chapter, and an edit of ``metrics.py`` retrains the LM
states (which measure with it). This module's own source is left out of every hash, and so are
:mod:`rankcollapse.procs`', :mod:`rankcollapse.jobs`' and :mod:`rankcollapse.cores`' (:data:`KEY_EXEMPT`):
they decide where results are stored, where jobs run and how the processes computing them live and die,
not what the results are (none imports a module of the package outside this set;
``tests/test_store.py`` checks it).

Everything lies under one root, :func:`states_root`: ``$RCBOOK_STATES``, else ``$RCBOOK_BUILD/states``,
else ``<repo>/build/states``. :func:`lock` is an exclusive cross-process file lock (:mod:`filelock`);
:func:`atomic_write_bytes` / :func:`atomic_torch_save` write to a uniquely named temporary file in the
target's folder and rename it into place, so concurrent writers never share a temporary name and a reader
never sees a partial file. :func:`save_checked` / :func:`load_checked` store a file with its content hash and
refuse one that no longer matches it (:class:`CorruptState`, :func:`quarantine`); :func:`note_consumed` tells
the runner which stored states a chapter used, so its cached output is served only while they are unchanged
(:func:`changed_states`).
"""

from __future__ import annotations

import ast
import hashlib
import os
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

PACKAGE = "rankcollapse"
PACKAGE_ROOT = Path(__file__).resolve().parent
# relative paths in the environment are resolved against the working folder at the time this module is
# first imported (the runner exports absolute ones, so a kernel started elsewhere finds the same store)
_CWD = os.getcwd()
REPO = Path(os.path.abspath(os.environ.get("RCBOOK_ROOT") or PACKAGE_ROOT.parents[1]))
# modules whose source is not part of any key: they decide where results lie, not what they are
KEY_EXEMPT = frozenset({f"{PACKAGE}.store", f"{PACKAGE}.procs", f"{PACKAGE}.jobs", f"{PACKAGE}.cores"})
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def env_path(var: str) -> Path | None:
    """``$var`` as an absolute path (a relative one is taken relative to the folder this module was first
    imported in), or None when unset or empty."""
    v = os.environ.get(var)
    if not v:
        return None
    return Path(os.path.normpath(os.path.join(_CWD, os.path.expanduser(v))))


def states_root() -> Path:
    """The store's root: ``$RCBOOK_STATES``, else ``$RCBOOK_BUILD/states``, else ``<repo>/build/states``."""
    p = env_path("RCBOOK_STATES")
    if p is not None:
        return p
    b = env_path("RCBOOK_BUILD")
    if b is not None:
        return b / "states"
    r = env_path("RCBOOK_ROOT")
    return (r or REPO) / "build" / "states"


# -- import closures --------------------------------------------------------------------------------------
def _root(root) -> Path:
    return Path(root).resolve() if root is not None else PACKAGE_ROOT


def module_file(module: str, root: str | Path | None = None) -> Path | None:
    """The source file of a module of this package (``<root>/a/b.py`` or ``<root>/a/b/__init__.py``), or
    None."""
    parts = module.split(".")
    if parts[0] != PACKAGE or not all(p.isidentifier() for p in parts):
        return None
    base = _root(root).joinpath(*parts[1:])
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if len(parts) > 1 and (f := base.parent / f"{base.name}.py").is_file():
        return f
    return None


def _is_package(module: str, root: Path) -> bool:
    f = module_file(module, root)
    return f is not None and f.name == "__init__.py"


@lru_cache(maxsize=256)
def _statements(source: bytes) -> tuple | None:
    """The import statements anywhere in ``source`` (functions included): ``(level, module, names)`` for
    ``from`` imports, ``(None, name, ())`` for plain ones; None when it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((None, a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module, tuple(a.name for a in node.names)))
    return tuple(out)


def _imported(statements: tuple, module: str | None, root: Path) -> set[str]:
    """Modules of this package named by ``statements`` (see :func:`_statements`). ``module``: the dotted name
    of the module they come from (None for notebook code: no relative imports)."""
    out: set[str] = set()
    pkg = None
    if module is not None:
        pkg = module if _is_package(module, root) else module.rpartition(".")[0]
    for level, name, names in statements:
        if level is None:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                out.add(name)
            continue
        if level:
            if not pkg:
                continue
            parts = pkg.split(".")
            up = level - 1
            if up >= len(parts):
                continue
            base = ".".join(parts[: len(parts) - up])
            if name:
                base = f"{base}.{name}"
        else:
            base = name or ""
            if not (base == PACKAGE or base.startswith(PACKAGE + ".")):
                continue
        out.add(base)
        for a in names:  # `from pkg import name`: name may be a submodule
            if a != "*" and module_file(f"{base}.{a}", root) is not None:
                out.add(f"{base}.{a}")
    return out


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_closure(*modules: str, root: str | Path | None = None) -> list[str]:
    """Sorted dotted names of the modules of this package reachable from ``modules`` (dotted names, e.g.
    ``"rankcollapse.lm.training"``) by static imports, the modules themselves and their parent packages
    included. Reads the sources under ``root`` (default: this package's folder); imports nothing."""
    r = _root(root)
    todo = []
    for m in modules:
        if module_file(m, r) is None:
            raise ModuleNotFoundError(f"no module {m!r} under {r}")
        todo.append(m)
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        for x in _with_parents(m):
            if x in seen:
                continue
            f = module_file(x, r)
            if f is None:  # a name, not a module (`from rankcollapse.x import y`): nothing to follow
                continue
            seen.add(x)
            st = _statements(f.read_bytes())
            if (
                st is not None
            ):  # one that does not parse cannot be imported either; its bytes are still hashed
                todo.extend(sorted(_imported(st, x, r) - seen))
    return sorted(seen)


def _all_modules(root: Path) -> list[str]:
    out = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).with_suffix("").parts
        if "__pycache__" in rel:
            continue
        if rel[-1] == "__init__":
            rel = rel[:-1]
        out.append(".".join((PACKAGE,) + rel))
    return out


def code_hash(*modules: str, root: str | Path | None = None) -> str:
    """sha256 over (relative path, bytes) of every file in the import closure of ``modules``, in path order
    (:data:`KEY_EXEMPT` left out)."""
    r = _root(root)
    files = sorted(
        (module_file(m, r).relative_to(r).as_posix(), module_file(m, r))
        for m in import_closure(*modules, root=r)
        if m not in KEY_EXEMPT
    )
    h = hashlib.sha256()
    for rel, f in files:
        data = f.read_bytes()
        name = f"{PACKAGE}/{rel}".encode()
        h.update(len(name).to_bytes(8, "little") + name + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


# -- chapters ---------------------------------------------------------------------------------------------
def _package_of(repo, package) -> Path:
    if package is not None:
        return _root(package)
    return Path(repo).resolve() / "lib" / PACKAGE if repo is not None else PACKAGE_ROOT


def chapter_path(name: str, repo: str | Path | None = None) -> Path:
    return Path(repo or REPO) / "chapters" / f"{name}.md"


def toc_pages(repo: str | Path | None = None) -> list[str]:
    """The pages ``chapters/<name>`` of ``<repo>/_toc.yml``, in book order (the root page first)."""
    import yaml

    toc = yaml.safe_load((Path(repo or REPO) / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc.get("root")]
    for part in toc.get("parts", []):
        files.extend(c.get("file") for c in part.get("chapters", []))
    return [f.split("/", 1)[1] for f in files if f and f.startswith("chapters/")]


def chapter_registry(root: str | Path | None = None) -> dict:
    """The chapters, in book order, read from ``_toc.yml``: every page ``chapters/<name>`` whose module
    ``rankcollapse.chapters.<name with _ for ->`` exists (the others, intro and status, are plain pages).
    ``root``: the package folder (its repository, two levels up, holds ``_toc.yml``)."""
    r = _root(root)
    repo = REPO if r == PACKAGE_ROOT else r.parents[1]
    out = {}
    for name in toc_pages(repo):
        mod = f"{PACKAGE}.chapters.{name.replace('-', '_')}"
        if module_file(mod, r) is not None:
            out[name] = mod
    return out


def code_cells(text: str) -> list[str]:
    """The Python of every ```` ```{code-cell} ```` of a Jupytext MyST chapter: cell options (``:key: value``
    lines or a ``---`` block at the top) and IPython lines (starting with ``%`` or ``!``) removed."""
    cells, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        s = lines[i].strip()
        fence = len(s) - len(s.lstrip("`"))
        if fence >= 3 and s[fence:].startswith("{code-cell}"):
            body, i = [], i + 1
            while i < len(lines) and not (
                lines[i].strip().startswith("`" * fence) and not lines[i].strip().strip("`")
            ):
                body.append(lines[i])
                i += 1
            if body and body[0].strip() == "---":  # YAML options block
                end = next((k for k in range(1, len(body)) if body[k].strip() == "---"), None)
                if end is not None:
                    body = body[end + 1 :]
            while body and body[0].lstrip().startswith(":"):
                body = body[1:]
            cells.append("\n".join(ln for ln in body if not ln.lstrip().startswith(("%", "!"))))
        i += 1
    return cells


def chapter_modules(
    name: str, repo: str | Path | None = None, package: str | Path | None = None
) -> list[str]:
    """The roots of a chapter's code: the modules of this package its code cells import, plus its module
    of ``CHAPTERS``. ``repo``: the folder holding ``chapters/`` (and, unless ``package`` is given,
    ``lib/rankcollapse``). A cell that does not parse makes every module of the package a root."""
    pkg = _package_of(repo, package)
    reg = chapter_registry(pkg)
    if name not in reg:
        raise KeyError(f"unknown chapter '{name}'; chapters: {', '.join(reg)}")
    mods = {reg[name]}
    for cell in code_cells(chapter_path(name, repo).read_text(encoding="utf-8")):
        st = _statements(cell.encode())
        if st is None:
            return sorted(set(_all_modules(pkg)) | mods)
        mods |= _imported(st, None, pkg)
    return sorted(m for m in mods if module_file(m, pkg) is not None)


def chapter_code_hash(name: str, repo: str | Path | None = None, package: str | Path | None = None) -> str:
    """sha256 of the chapter's source and the :func:`code_hash` of the closure of :func:`chapter_modules`."""
    pkg = _package_of(repo, package)
    h = hashlib.sha256(chapter_path(name, repo).read_bytes())
    h.update(code_hash(*chapter_modules(name, repo, pkg), root=pkg).encode())
    return h.hexdigest()


# -- locks and atomic writes ------------------------------------------------------------------------------
@contextmanager
def lock(path: str | Path):
    """Hold an exclusive cross-process lock on the file ``path`` (created with its folder) while inside."""
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    held = FileLock(str(path))
    try:
        held.acquire(timeout=0)
    except Timeout:  # another process holds it (training what this one needs): wait without holding a core
        from . import cores

        with cores.released():
            held.acquire()
    try:
        yield path
    finally:
        held.release()


@contextmanager
def _atomic(path: Path):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(
                f.fileno(), 0o666 & ~_UMASK
            )  # as a plainly created file would be (mkstemp makes it 0600)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a uniquely named temporary file in the same folder."""
    with _atomic(Path(path)) as f:
        f.write(data)


def atomic_torch_save(obj, path: str | Path) -> None:
    """``torch.save(obj, path)`` through a uniquely named temporary file in the same folder."""
    import torch

    with _atomic(Path(path)) as f:
        torch.save(obj, f)


# -- stored files that prove their integrity ---------------------------------------------------------------
# Every trained state, checkpoint and cached network is written with a *sidecar* ``<file>.sha256`` holding
# the sha256 and the byte length of its content; :func:`load_checked` refuses a file whose bytes do not
# match it.
# The sidecar is written before the file itself (both atomically), so a file that exists always has its
# sidecar, and a file with no sidecar, a short one or changed bytes is corrupt, never used.
SIDECAR = ".sha256"
STATES_LOG = "RCBOOK_STATES_LOG"


class CorruptState(RuntimeError):
    """A stored file whose content does not match its recorded hash (truncated, overwritten, unreadable)."""

    def __init__(self, path, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"corrupt stored file {path}: {reason}")


def sidecar(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + SIDECAR)


def _read_sidecar(path: Path) -> tuple[str, int] | None:
    try:
        parts = sidecar(path).read_text().split()
        return parts[0], int(parts[1])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def save_checked(obj, path: str | Path, *, record: bool = True) -> str:
    """``torch.save(obj)`` to ``path`` with its content hash beside it (the sidecar first, then the file,
    both atomically). ``record``: note the file among the states the running chapter consumed (see
    :func:`note_consumed`); checkpoints, which a finished run deletes, are not noted. Returns the sha256."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    path = Path(path)
    atomic_write_bytes(sidecar(path), f"{digest} {len(data)}\n".encode())
    atomic_write_bytes(path, data)
    if record:
        note_consumed(path, digest)
    return digest


def remove_checked(path: str | Path) -> None:
    """Remove a file written by :func:`save_checked` and its sidecar (the file first)."""
    Path(path).unlink(missing_ok=True)
    sidecar(path).unlink(missing_ok=True)


def check_bytes(path: str | Path) -> tuple[bytes, str]:
    """The bytes of ``path`` and their sha256, after checking them against the sidecar; raises
    :class:`CorruptState` (naming the path and what is wrong) otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptState(path, f"cannot be read ({e})") from e
    want = _read_sidecar(path)
    if want is None:
        raise CorruptState(path, f"no content hash beside it ({sidecar(path).name} missing or unreadable)")
    digest, size = want
    if len(data) != size:
        raise CorruptState(path, f"{len(data)} bytes where {size} were written (truncated or extended)")
    got = hashlib.sha256(data).hexdigest()
    if got != digest:
        raise CorruptState(path, f"content hash {got[:12]} where {digest[:12]} was written (bytes changed)")
    return data, digest


def verify(path: str | Path) -> str | None:
    """None when ``path`` matches its content hash, else what is wrong with it."""
    try:
        check_bytes(path)
    except CorruptState as e:
        return e.reason
    return None


def load_checked(path: str | Path, *, map_location=None, record: bool = True):
    """``torch.load`` of a file written by :func:`save_checked`, after checking its content hash. Raises
    :class:`CorruptState` naming the path on any mismatch, or when the checked bytes still do not load."""
    import io

    import torch

    data, digest = check_bytes(path)
    try:
        obj = torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
    except Exception as e:  # noqa: BLE001 -- matching bytes that do not load: written by something else
        raise CorruptState(path, f"does not load ({type(e).__name__}: {e})") from e
    if record:
        note_consumed(Path(path), digest)
    return obj


def quarantine(path: str | Path, reason, then: str = "", log=None) -> Path | None:
    """Move a corrupt file (and its sidecar) aside to ``<name>.corrupt-<time>-<pid>`` in its folder, and say
    so on stderr (and through ``log``): the path, what was wrong, where it went, ``then`` (what happens
    next). Returns the new path (None if the file was already gone: moved by a concurrent run)."""
    import sys
    import time

    path = Path(path)
    reason = getattr(reason, "reason", reason)
    dest = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    try:
        os.replace(path, dest)
    except FileNotFoundError:
        dest = None
    if dest is not None:
        try:
            os.replace(sidecar(path), sidecar(dest))
        except FileNotFoundError:
            pass
    msg = f"rcbook store: {path} is corrupt ({reason})" + (f"; moved aside to {dest.name}" if dest else "")
    msg += f"; {then}" if then else ""
    print(msg, file=sys.stderr, flush=True)
    if log is not None and log is not print:
        log(msg)
    return dest


# -- which stored states a chapter consumed ----------------------------------------------------------------
def note_consumed(path: str | Path, digest: str) -> None:
    """Append ``path`` and its hash to the file named by ``$RCBOOK_STATES_LOG`` (set by the runner for each
    chapter it executes, inherited by the chapter's kernel and its workers); nothing when unset. One line,
    one ``write`` to a file opened for appending, so concurrent processes do not interleave."""
    log = os.environ.get(STATES_LOG)
    if not log:
        return
    line = (json_line({"path": str(Path(path).resolve()), "sha256": digest}) + "\n").encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def json_line(d: dict) -> str:
    import json

    return json.dumps(d, sort_keys=True)


def consumed(log: str | Path) -> dict[str, str]:
    """``{path: sha256}`` from a log written by :func:`note_consumed` (empty when there is none)."""
    import json

    out: dict[str, str] = {}
    try:
        text = Path(log).read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        out[d["path"]] = d["sha256"]
    return dict(sorted(out.items()))


def changed_states(states: dict[str, str]) -> list[str]:
    """The paths of ``states`` (``{path: sha256}``) that are no longer stored with that hash (by their
    sidecars: replaced, moved aside or removed). A chapter output is served from the cache only while this is
    empty."""
    bad = []
    for p, digest in states.items():
        want = _read_sidecar(Path(p))
        if want is None or want[0] != digest or not Path(p).exists():
            bad.append(p)
    return bad
