"""The content-addressed store: keys from the import closure, one root, locks and atomic writes."""

import multiprocessing as mp
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rankcollapse import store
from rankcollapse.lm import training as lm_train
from rankcollapse.toy import training as tr

REPO = Path(__file__).resolve().parents[1]
LM_CHAPTERS = {"repair-driver", "repair-treatments", "repair-path", "repair-lr-burst"}


# -- closures -------------------------------------------------------------------------------------------
def test_closures_of_the_real_package():
    assert {"rankcollapse.lm.training", "rankcollapse.lm.model", "rankcollapse.core.metrics"} <= set(
        store.import_closure("rankcollapse.lm.training")
    )
    assert "rankcollapse.toy.training" in store.import_closure("rankcollapse.chapters.toy_tasks")
    # `from .chapters import schema` brings the package, not every chapter module
    nb = store.import_closure("rankcollapse.book.notebook")
    assert "rankcollapse.chapters" in nb and not any(m.startswith("rankcollapse.chapters.") for m in nb)
    # chapter modules never import one another (shared pieces live in the science, parameters in .common)
    reg = store.chapter_registry()
    for name, mod in reg.items():
        assert not (set(store.import_closure(mod)) & set(reg.values())) - {mod}, name
    # the science never imports the runner
    for m in store._all_modules(store.PACKAGE_ROOT):
        if m.split(".")[1:2] and m.split(".")[1] in ("core", "toy", "lm", "hf"):
            assert not [x for x in store.import_closure(m) if x.startswith("rankcollapse.book")], m
    for name in store.chapter_registry():
        c = store.import_closure(*store.chapter_modules(name))
        # nor the comparing and recording machinery: editing a check's rule re-executes no chapter
        runner_side = {"cli", "build", "runner", "records", "progress", "ledger", "pages"}
        assert not {f"rankcollapse.book.{m}" for m in runner_side} & set(c), name
        assert "rankcollapse.book.notebook" in c and store.chapter_registry()[name] in c
    assert store.import_closure("rankcollapse.lm.training") == sorted(
        store.import_closure("rankcollapse.lm.training")
    )
    with pytest.raises(ModuleNotFoundError):
        store.import_closure("rankcollapse.no_such_module")


def test_import_resolution_rules(tmp_path):
    """Relative and absolute imports, function-level imports, submodules named in `from pkg import name`."""
    pkg = tmp_path / "rankcollapse"
    files = {
        "__init__.py": "",
        "a.py": "from . import b\nfrom .sub import helper\n\ndef f():\n    from .sub import c\n",
        "b.py": "import os\nx = 1\n",
        "sub/__init__.py": "def helper():\n    pass\n",
        "sub/c.py": "from ..b import x\nimport rankcollapse.d\n"
        "from rankcollapse import e as _e, __version__\n",
        "d.py": "",
        "e.py": "",
        "unreached.py": "import rankcollapse.a\n",
        "sub/broken.py": "def (:\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    got = store.import_closure("rankcollapse.a", root=pkg)
    assert got == [
        "rankcollapse",
        "rankcollapse.a",
        "rankcollapse.b",
        "rankcollapse.d",
        "rankcollapse.e",
        "rankcollapse.sub",
        "rankcollapse.sub.c",
    ]
    assert store.import_closure("rankcollapse.sub.broken", root=pkg) == [
        "rankcollapse",
        "rankcollapse.sub",
        "rankcollapse.sub.broken",
    ]
    h = store.code_hash("rankcollapse.a", root=pkg)
    (pkg / "unreached.py").write_text("# edited\n")
    assert store.code_hash("rankcollapse.a", root=pkg) == h
    (pkg / "d.py").write_text("# edited\n")
    assert store.code_hash("rankcollapse.a", root=pkg) != h


def test_code_cells_of_a_myst_chapter():
    text = """# title

```python
import rankcollapse.book.cli  # not a code cell
```

```{code-cell} ipython3
:tags: [remove-cell]

%matplotlib inline
!echo hi
import rankcollapse.book.notebook as rcnb
```

````{code-cell} ipython3
---
tags: [parameters]
---
from rankcollapse.repair import drivers
````
"""
    cells = store.code_cells(text)
    assert len(cells) == 2
    assert "%" not in cells[0] and "!" not in cells[0] and "import rankcollapse.book.notebook" in cells[0]
    assert cells[1].strip() == "from rankcollapse.repair import drivers"


# -- edits in a temporary copy ----------------------------------------------------------------------------
@pytest.fixture
def copy(tmp_path):
    shutil.copytree(
        REPO / "lib" / "rankcollapse",
        tmp_path / "lib" / "rankcollapse",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copytree(REPO / "chapters", tmp_path / "chapters")
    shutil.copy(REPO / "_toc.yml", tmp_path / "_toc.yml")
    return tmp_path


def _edit(repo: Path, rel: str) -> None:
    with open(repo / "lib" / "rankcollapse" / rel, "a") as f:
        f.write("\n# an edit\n")


def _chapter_hashes(repo: Path) -> dict:
    return {
        n: store.chapter_code_hash(n, repo=repo)
        for n in store.chapter_registry(repo / "lib" / "rankcollapse")
    }


def test_copy_hashes_like_the_real_package(copy):
    pkg = copy / "lib" / "rankcollapse"
    assert store.code_hash("rankcollapse.lm.training", root=pkg) == store.code_hash(
        "rankcollapse.lm.training"
    )
    assert store.chapter_code_hash("toy-tasks", repo=copy) == store.chapter_code_hash("toy-tasks")


def test_editing_metrics_changes_the_lm_states_key(copy):
    pkg = copy / "lib" / "rankcollapse"
    before = store.code_hash("rankcollapse.lm.training", root=pkg)
    _edit(copy, "core/metrics.py")
    assert store.code_hash("rankcollapse.lm.training", root=pkg) != before


@pytest.mark.parametrize(
    "module", ["book/cli.py", "book/build.py", "book/runner.py", "store.py", "procs.py"]
)
def test_editing_the_runner_or_cli_changes_no_chapter(copy, module):
    before = _chapter_hashes(copy)
    _edit(copy, module)
    assert _chapter_hashes(copy) == before


def test_editing_lm_changes_exactly_the_lm_chapters(copy):
    before = _chapter_hashes(copy)
    _edit(copy, "lm/model.py")
    after = _chapter_hashes(copy)
    assert {n for n in before if before[n] != after[n]} == LM_CHAPTERS


def test_editing_a_chapter_source_changes_that_chapter_only(copy):
    before = _chapter_hashes(copy)
    with open(copy / "chapters" / "skip.md", "a") as f:
        f.write("\nOne more sentence.\n")
    after = _chapter_hashes(copy)
    assert {n for n in before if before[n] != after[n]} == {"skip"}


def test_editing_toy_tasks_changes_the_toy_network_key(copy):
    pkg = copy / "lib" / "rankcollapse"
    mods = ("rankcollapse.chapters.toy_tasks.experiments",)
    spec = {"task": "sort", "steps": 10}
    before, default = tr.content_key(spec, mods, root=pkg), tr.content_key(spec, root=pkg)
    assert before == tr.content_key(spec, mods) and before != default
    _edit(copy, "chapters/toy_tasks/experiments.py")
    assert tr.content_key(spec, mods, root=pkg) != before
    assert tr.content_key(spec, root=pkg) == default  # the default roots do not reach the chapter module
    _edit(copy, "toy/tasks.py")
    assert tr.content_key(spec, root=pkg) != default


def test_lm_key_holds_the_corpus(monkeypatch):
    a = lm_train.content_key("driver", 1)
    monkeypatch.setattr(lm_train.lm, "corpus", lambda: SimpleNamespace(sha256="another corpus"))
    assert lm_train.content_key("driver", 1) != a


# -- root, atomic writes ----------------------------------------------------------------------------------
def test_states_root(monkeypatch, tmp_path):
    for v in ("RCBOOK_STATES", "RCBOOK_BUILD", "RCBOOK_ROOT", "RCBOOK_CACHE"):
        monkeypatch.delenv(v, raising=False)
    assert store.states_root() == REPO / "build" / "states"
    assert tr.cache_root() == REPO / "build" / "states" / "toy"
    monkeypatch.setenv("RCBOOK_BUILD", str(tmp_path / "b"))
    assert store.states_root() == tmp_path / "b" / "states" == lm_train.states_dir()
    monkeypatch.setenv("RCBOOK_STATES", "rel/states")
    monkeypatch.setenv("RCBOOK_CACHE", "rel/cache")
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the folder of the first import, not the cwd
    assert store.states_root() == Path(store._CWD) / "rel" / "states"
    assert tr.cache_root() == Path(store._CWD) / "rel" / "cache"


def test_atomic_writes_leave_no_temporary_files(tmp_path):
    p = tmp_path / "d" / "x.pt"
    store.atomic_torch_save({"a": torch.arange(3)}, p)
    store.atomic_write_bytes(tmp_path / "d" / "y.json", b"{}")
    with pytest.raises(Exception):
        store.atomic_torch_save({"f": lambda: 0}, p)  # cannot be pickled: the old file stays whole
    assert torch.equal(torch.load(p)["a"], torch.arange(3))
    assert sorted(f.name for f in (tmp_path / "d").iterdir()) == ["x.pt", "y.json"]
    assert oct((tmp_path / "d" / "y.json").stat().st_mode & 0o777) == oct(0o666 & ~store._UMASK)


# -- two processes, one training --------------------------------------------------------------------------
def _toy():
    from rankcollapse.toy import nets as tn
    from rankcollapse.toy import tasks as tt

    cfg = tn.ToyNetConfig(2, 2, 8, 10, skip=True, vocab=10, n_pos=8)

    def loss(p, batch):
        x, y = batch
        out = tn.forward(cfg, p, x)
        return torch.nn.functional.cross_entropy(out.reshape(-1, 10), y.reshape(-1))

    return cfg, (lambda: tn.init_params(cfg, 0)), loss, (lambda g, step: tt.sort_batch(g, 4))


SPEC = {"task": "concurrent", "width": 8}


def _worker(markers: str, barrier, queue) -> None:
    torch.set_num_threads(1)
    _, init, loss, batch = _toy()

    def slow_init():  # runs only in the process that trains: leave a mark and hold the lock a while
        (Path(markers) / str(os.getpid())).write_text("trained")
        time.sleep(1.0)
        return init()

    barrier.wait()
    r = tr.cached_train(SPEC, slow_init, loss, batch, 6, lr=1e-2, seed=1, log=lambda s: None, ckpt_every=2)
    queue.put((r.cached, {k: v.numpy() for k, v in r.params.items()}))


def test_two_processes_train_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RCBOOK_CACHE", str(tmp_path / "cache"))
    markers = tmp_path / "markers"
    markers.mkdir()
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(markers), barrier, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        out = [queue.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    assert sorted(c for c, _ in out) == [False, True]
    assert len(list(markers.iterdir())) == 1
    _, init, loss, batch = _toy()
    ref = tr.train(init(), loss, batch, 6, lr=1e-2, seed=1, log=lambda s: None)  # the numbers are unchanged
    for _, params in out:
        assert set(params) == set(ref.params)
        for k in ref.params:
            assert torch.equal(torch.from_numpy(params[k]), ref.params[k]), k
    (folder,) = (tmp_path / "cache").iterdir()
    assert folder.name.startswith("concurrent-")
    assert {f.name for f in folder.iterdir()} - {".lock"} == {"final.pt", "final.pt.sha256", "spec.json"}


# -- stored files prove their integrity -------------------------------------------------------------------
def _truncate(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _zero_block(p):
    """256 bytes set to zero, from the middle on where they are not zero already (a change, not a no-op)."""
    data = bytearray(p.read_bytes())
    at = next(i for i in range(len(data) // 2, len(data)) if data[i])
    data[at : at + 256] = bytes(len(data[at : at + 256]))
    p.write_bytes(bytes(data))


def _random_bytes(p):
    p.write_bytes(os.urandom(len(p.read_bytes())))


CORRUPTIONS = {
    "truncate": _truncate,
    "zero a block": _zero_block,
    "random bytes": _random_bytes,
    "empty": lambda p: p.write_bytes(b""),
    "no sidecar": lambda p: store.sidecar(p).unlink(),
}


def test_exempt_modules_import_nothing_that_computes():
    # what is left out of every key may decide where results lie and how processes live, never what they are
    for m in store.KEY_EXEMPT:
        assert set(store.import_closure(m)) <= set(store.KEY_EXEMPT) | {"rankcollapse"}, m


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_a_corrupt_file_is_refused_by_path(tmp_path, how):
    p = tmp_path / "s" / "state.pt"
    store.save_checked({"w": torch.arange(1000.0)}, p)
    assert store.verify(p) is None
    assert torch.equal(store.load_checked(p)["w"], torch.arange(1000.0))
    CORRUPTIONS[how](p)
    assert store.verify(p) is not None
    with pytest.raises(store.CorruptState) as e:
        store.load_checked(p)
    assert str(p) in str(e.value)
    dest = store.quarantine(p, e.value, then="retraining")
    assert not p.exists() and dest.exists() and dest.parent == p.parent and ".corrupt-" in dest.name


def test_consumed_states_are_logged_and_their_change_seen(tmp_path, monkeypatch):
    log = tmp_path / "states.log"
    monkeypatch.setenv(store.STATES_LOG, str(log))
    a, b, c = (tmp_path / f"{n}.pt" for n in "abc")
    store.save_checked({"x": 1}, a)
    store.save_checked({"x": 2}, b)
    store.save_checked({"x": 3}, c, record=False)  # a checkpoint: not among what the chapter consumed
    store.load_checked(a)
    got = store.consumed(log)
    assert sorted(got) == [str(a.resolve()), str(b.resolve())]
    assert store.changed_states(got) == []
    store.save_checked({"x": 22}, b, record=False)  # replaced by another content
    assert store.changed_states(got) == [str(b.resolve())]
    store.remove_checked(a)
    assert store.changed_states(got) == [str(a.resolve()), str(b.resolve())]
