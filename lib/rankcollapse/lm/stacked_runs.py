"""Branches of one stage trained as stacks: the store side of the stacked engine (:mod:`.stacked`).

:func:`train_branches` takes the branch jobs of a stage (``{"parent", "spec", "steps"}``, as
:func:`rankcollapse.lm.runs.run_jobs` receives them), loads the ones already saved, and trains the others
in stacks of networks that can share one batched computation (:func:`stack_groups`: one start step, one
length, the fields of :data:`~rankcollapse.lm.stacked.STACK_SAME` equal). What every trained branch of
:func:`rankcollapse.lm.training.branch` has, a stacked branch has too:

* **its own content key** (:func:`branch_key`), in a namespace of its own: the stacked engine rounds
  otherwise than the eager loop (``baddbmm`` against ``addmm``), so a stacked branch is never mistaken for
  an eager one. Which networks a branch is stacked with is *not* part of the key: tests/test_stacked.py
  shows a network's numbers do not depend on it, bitwise;
* **checkpoints** every ``ckpt_every`` steps (the state before that step's measurement, the eager loop's
  convention), from which an interrupted stage resumes and ends bit-identical;
* for a held branch (one alpha, no term), its state every ``MILESTONE_EVERY`` steps saved as the shorter
  branch of that length and indexed on its trajectory, so a longer branch continues the longest saved one;
* a lock per branch, so two processes asking for overlapping stages train each branch once.

:func:`run_jobs` is the runner's side: :func:`rankcollapse.lm.runs.run_jobs` with the branch jobs of a
stage grouped into stacks, one pool (or Dask) job per stack. Not yet what the chapters call: switching them
moves the repair chapters' numbers to the stacked engine's and is done with their re-record (issue #21).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from .. import store
from . import stacked as st
from . import training as tr

KEY_TAG = "branch-stacked"


def engine_hash() -> str:
    """sha256 of the sources that decide a stacked branch beyond the eager loop's (:func:`~rankcollapse.lm.
    training.source_hash`): this module and everything it imports (``stacked.py``, ``training.py``, ...)."""
    return store.code_hash(__name__)


def branch_key(parent_dir: str, start: int, spec: tr.RunSpec, n: int) -> str:
    """The content key of the stacked branch of ``n`` steps from the state saved in ``parent_dir`` at step
    ``start`` under ``spec``: it holds the stacked engine's source too, so editing ``stacked.py`` trains its
    branches again."""
    return tr.content_key(KEY_TAG, engine_hash(), parent_dir, start, spec, n)


def trajectory_key(parent_dir: str, start: int, spec: tr.RunSpec) -> str:
    return tr.content_key(KEY_TAG + "-trajectory", engine_hash(), parent_dir, start, spec)


def stack_groups(items: list[dict], starts: list[int]) -> list[list[int]]:
    """Indices of ``items`` grouped so that each group can train as one stack: one start step (``starts``),
    one length, a loss term or none, and stackable specs (:func:`rankcollapse.lm.stacked.stackable`).
    Groups keep the items' order; the grouping decides only the wall time, never a number."""
    groups: dict = {}
    for i, (it, s) in enumerate(zip(items, starts)):
        spec = it["spec"]
        # runs with a loss term apart: in a stack every network pays for the term's forward (all blocks'
        # outputs), which slowed a mixed stage below the eager loop (bench/stage_throughput.py)
        sig = (s, it["steps"], spec.term is None, tuple(repr(getattr(spec, f)) for f in st.STACK_SAME))
        groups.setdefault(sig, []).append(i)
    return list(groups.values())


class _Branch:
    """One branch job with its paths and, while it trains, its state."""

    def __init__(self, item: dict, root: Path):
        self.parent, self.spec, self.steps = str(item["parent"]), item["spec"], int(item["steps"])
        self.pd = tr.load_dict(Path(self.parent))
        self.start = self.pd["step"]
        self.pdir = Path(self.parent).parent.name
        self.root = root
        self.key = self.key_of(self.steps)
        self.tkey = trajectory_key(self.pdir, self.start, self.spec)
        self.dir = root / self.key
        self.done = self.dir / "branch.pt"
        self.ckpt = self.dir / "ckpt.pt"
        self.state: tr.TrainState | None = None

    def key_of(self, n: int) -> str:
        return branch_key(self.pdir, self.start, self.spec, n)

    def saved(self, log) -> dict | None:
        if not self.done.exists():
            return None
        out = tr._load_or_quarantine(self.done, "training the branch again", log)
        return None if out is None else tr._branch_summary(self.key, out)

    def prepare(self, log) -> None:
        """The state to continue: the branch's checkpoint, else the longest shorter branch of its trajectory
        already saved, else the parent."""
        s = tr._resume(self.spec, self.ckpt, log)
        if s is None:
            s = tr._longest_shorter(self.spec, self.steps, self.key_of, self.tkey, self.root, log)
        if s is None:
            s = tr.state_from_dict(self.spec, self.pd)
            s.hist = tr.empty_hist()
            s.extra = {"start": self.start, "lineage": self.pd.get("extra", {}).get("lineage")}
        self.state = s

    @property
    def end(self) -> int:
        return self.start + self.steps

    def save(self, path: Path) -> dict:
        out = self.state.to_dict()
        out["final_probe"] = tr.final_probe(self.state.model, self.spec)
        tr.save_state(out, path)
        return out


def train_branches(
    items: list[dict],
    *,
    root: Path | None = None,
    log=None,
    ckpt_every: int = 200,
    stop_at: int | None = None,
) -> list[dict]:
    """Train (or load) every branch job of ``items`` (``{"parent", "spec", "steps"}``) with the stacked
    engine; returns their summaries in order (as :func:`rankcollapse.lm.training.branch` does). ``stop_at``:
    raise :class:`rankcollapse.lm.training.Stop` after the checkpoints at that step (to test resumption)."""
    root = Path(root or tr.states_dir())
    bs = [_Branch(it, root) for it in items]
    out: list = [b.saved(log) for b in bs]
    todo = [i for i, o in enumerate(out) if o is None]
    for grp in stack_groups([items[i] for i in todo], [bs[i].start for i in todo]):
        idx = [todo[j] for j in grp]
        with contextlib.ExitStack() as locks:
            for i in sorted(idx, key=lambda i: bs[i].key):  # one order: two processes never deadlock
                locks.enter_context(store.lock(root / "locks" / f"{bs[i].key}.lock"))
            left = []
            for i in idx:  # trained by another process while this one waited
                out[i] = bs[i].saved(log)
                if out[i] is None:
                    bs[i].prepare(log)
                    left.append(i)
            # states resumed at different steps train in stacks of their own (the numbers do not depend on
            # the stack): each sub-stack to the end
            by_step: dict = {}
            for i in left:
                by_step.setdefault(bs[i].state.step, []).append(i)
            for sub in by_step.values():
                for i, o in zip(sub, _train_stack([bs[i] for i in sub], ckpt_every, log, stop_at)):
                    out[i] = o
    return out


def _boundaries(bs: list[_Branch], t0: int, ckpt_every: int) -> list[int]:
    """The steps after ``t0`` where the stack stops to save: checkpoints, held branches' milestones, the
    end."""
    end = bs[0].end
    marks = {end}
    marks.update(range((t0 // ckpt_every + 1) * ckpt_every, end, ckpt_every))
    for b in bs:
        if tr.held(b.spec):
            marks.update(
                t for t in range(t0 + 1, end) if (t - b.start) % tr.MILESTONE_EVERY == 0 and t > b.start
            )
    return sorted(t for t in marks if t0 < t <= end)


def _train_stack(bs: list[_Branch], ckpt_every: int, log, stop_at) -> list[dict]:
    t0 = bs[0].state.step
    specs, states = [b.spec for b in bs], [b.state for b in bs]
    if log is not None:
        log(f"stack of {len(bs)} branches: steps {t0} to {bs[0].end}")
    for t in _boundaries(bs, t0, ckpt_every):
        st.train_stacked(specs, states, t)  # ends with the measurement at step t
        if t == bs[0].end:
            break
        for b in bs:  # a held branch of t - start steps is saved on the way, with that measurement
            k = t - b.start
            if tr.held(b.spec) and k % tr.MILESTONE_EVERY == 0:
                mk = b.root / b.key_of(k) / "branch.pt"
                if not mk.exists():
                    b.save(mk)
                tr._index_branch(b.root, b.tkey, k, b.key_of(k))
        for s in states:  # the next stretch takes step t's measurement again, as one uninterrupted run does
            tr._drop_measurement_at(s.hist, t)
        if t % ckpt_every == 0:
            for b in bs:
                tr.save_state(b.state, b.ckpt, record=False)
        if stop_at is not None and t == stop_at:
            raise tr.Stop(t)
    outs = []
    for b in bs:
        o = b.save(b.done)
        store.remove_checked(b.ckpt)
        tr._index_branch(b.root, b.tkey, b.steps, b.key)
        outs.append(tr._branch_summary(b.key, o))
    return outs


# -- the runner's side ----------------------------------------------------------------------------------
def run_jobs(jobs: list[tuple[str, dict]], workers: int, log=None, labels=None) -> list:
    """:func:`rankcollapse.lm.runs.run_jobs` with the stage's ``branch`` and ``chain`` jobs trained as
    stacks; every other job (drivers, healthy runs) runs as before. Results come back in job order (a chain's
    as the list of its segments' summaries).

    A chain's segments are stages: segment ``i`` of every chain trains in stage ``i``, from the saved end of
    its segment ``i - 1``. Within a stage, branches of one trajectory (same parent and spec) that differ in
    length train in rounds, shortest first, so each longer one continues the shorter saved one and no step
    is trained twice; identical branch jobs train once. In each round the branches are grouped
    (:func:`stack_groups`) and each group is one job of the pool (or the Dask cluster)."""
    labels = labels or [str(i) for i in range(len(jobs))]
    out: list = [None] * len(jobs)
    chains = {i: list(kw["segments"]) for i, (k, kw) in enumerate(jobs) if k == "chain"}
    done: dict = {i: [] for i in chains}
    stage = [(i, k, kw, labels[i]) for i, (k, kw) in enumerate(jobs) if k != "chain"]
    stage += [
        (i, "branch", {"parent": jobs[i][1]["parent"], "spec": seg[0][0], "steps": seg[0][1]}, labels[i])
        for i, seg in chains.items()
        if seg
    ]
    while stage:
        res = _run_stage([(k, kw) for _, k, kw, _ in stage], workers, log, [lab for *_, lab in stage])
        nxt = []
        for (i, _k, _kw, lab), r in zip(stage, res):
            if i not in chains:
                out[i] = r
                continue
            done[i].append(r)
            seg = chains[i]
            if len(done[i]) < len(seg):
                spec, steps = seg[len(done[i])]
                parent = str(tr.states_dir() / r["key"] / "branch.pt")
                nxt.append((i, "branch", {"parent": parent, "spec": spec, "steps": steps}, lab))
        stage = nxt
    for i in chains:
        out[i] = done[i]
    return out


def trajectory_rounds(items: list[dict]) -> list[int]:
    """The round of each branch job: ``k`` when ``k`` shorter branches of its trajectory (same parent, same
    spec) are in ``items``, so a longer branch trains after the shorter ones and continues the longest."""
    by_traj: dict = {}
    for it in items:
        by_traj.setdefault((str(it["parent"]), repr(it["spec"])), set()).add(int(it["steps"]))
    return [sorted(by_traj[(str(it["parent"]), repr(it["spec"]))]).index(int(it["steps"])) for it in items]


def _run_stage(jobs: list[tuple[str, dict]], workers: int, log, labels: list[str]) -> list:
    from ..jobs import run_parallel

    out: list = [None] * len(jobs)
    bi = [i for i, (k, _) in enumerate(jobs) if k == "branch"]
    uniq: dict = {}  # identical branch jobs train once
    for i in bi:
        kw = jobs[i][1]
        uniq.setdefault((str(kw["parent"]), repr(kw["spec"]), int(kw["steps"])), []).append(i)
    first = [v[0] for v in uniq.values()]
    rounds = trajectory_rounds([jobs[i][1] for i in first])
    rest = [i for i, (k, _) in enumerate(jobs) if k != "branch"]
    for r in range(max(rounds, default=-1) + 1):
        bi_r = [i for i, rr in zip(first, rounds) if rr == r]
        starts = [tr.load_dict(Path(jobs[i][1]["parent"]))["step"] for i in bi_r]
        groups = [[bi_r[j] for j in g] for g in stack_groups([jobs[i][1] for i in bi_r], starts)]
        # the longest stacks first (a network step costs about the same in any stack): the pool's tail short
        groups.sort(key=lambda g: -len(g) * int(jobs[g[0]][1]["steps"]))
        tasks = [{"kind": "stack", "kw": {"items": [jobs[i][1] for i in g]}} for g in groups]
        names = [f"stack of {len(g)}: " + ", ".join(labels[i] for i in g) for g in groups]
        others = rest if r == 0 else []
        tasks += [{"kind": jobs[i][0], "kw": jobs[i][1]} for i in others]
        names += [labels[i] for i in others]
        res = run_parallel(_dispatch, tasks, workers, log, names)
        for g, rs in zip(groups, res):  # a stack returns its branches' summaries in order
            for i, o in zip(g, rs):
                out[i] = o
        for i, o in zip(others, res[len(groups) :]):
            out[i] = o
    for v in uniq.values():
        for i in v[1:]:
            out[i] = out[v[0]]
    return out


def _dispatch(kind: str, kw: dict):
    """One task of :func:`run_jobs`: a stack of branches, or any job of :func:`rankcollapse.lm.runs.run_jobs`
    (under its lock)."""
    if kind == "stack":
        return train_branches(**kw)
    from . import runs

    return runs._dispatch(kind, kw)
