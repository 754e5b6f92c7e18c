"""What a chapter notebook calls: parameter validation, seeding, results, figures and glue.

Each chapter starts with::

    import rankcollapse.book.notebook as rcnb
    _before = rcnb.snapshot(globals())

then its ``parameters`` cell (papermill injects overrides after it), then::

    ch = rcnb.start("decomposition", globals(), _before)

``start`` rejects unknown names (papermill injects any name silently), wrong
types and out-of-range values before any work, fixes seeds and threads, and
returns a :class:`Chapter` that records values, verdicts and figures. The last
cell calls ``ch.finish()``, which writes ``results.json``.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import platform
import random
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from .. import __version__, cores, store
from ..chapters import schema as chapter_schema
from . import kernels
from .device import resolve_device  # noqa: F401  (used by Chapter; re-exported)
from .panels import PNG_KEY, panels_per_row
from .params import ParameterError  # noqa: F401  (re-exported for chapters)
from .results import Results

LIB_ROOT = Path(__file__).resolve().parents[1]  # the package


def library_hash() -> str:
    """sha256 of every source file of the library (the cache key and the results' provenance use it)."""
    h = hashlib.sha256()
    for f in sorted(LIB_ROOT.rglob("*.py")):
        h.update(str(f.relative_to(LIB_ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def snapshot(namespace: dict) -> set:
    """Names defined before the parameters cell."""
    return set(namespace) | {"_before"}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


PROGRESS_LOG = "progress.log"  # a chapter's progress lines, in its output folder


def control_text(ctl: dict | None) -> str:
    """A verdict's control in one phrase, for the page (glued as ``verdict-<ID>-control``): the same rule's
    outcome on the control run, and whether the claim's verdict therefore counts."""
    if not ctl:
        return "no control in this build: the verdict does not count as evidence"
    counts = (
        "the outcomes differ, so the verdict counts"
        if ctl["counts"]
        else "the same outcome, so the verdict does not count as evidence here"
    )
    return f"**{ctl['verdict']}** on its control ({ctl['on']}): {counts}"


class Chapter:
    """A running chapter: validated parameters ``p``, ``device``, output folder ``out``, results."""

    def __init__(self, name: str, params: dict):
        self.name = name
        cores.hold()  # one core of the run's budget while the kernel computes (rankcollapse.cores)
        self.p = SimpleNamespace(**params)
        self.params = params
        self.device = resolve_device(params["device"], params.get("profile"))
        self.p.device = str(self.device)  # what `auto` became: the chapter's jobs train where tensors live
        out = params.get("output_dir") or os.path.join("_output", f"{name}-{params['profile']}")
        self.out = Path(out)
        self.fig_dir = self.out / "figures"
        self.fig_dir.mkdir(parents=True, exist_ok=True)
        self._t0 = time.perf_counter()
        self.results = Results(
            name,
            {
                "profile": params["profile"],
                "params": params,
                "seed": params["seed"],
                "device": str(self.device),
                "library_version": __version__,
                "library_hash": library_hash(),
                "code_hash": store.chapter_code_hash(name),
                "torch_version": torch.__version__,
                "python": platform.python_version(),
                "kernels": kernels.active(),
            },
        )
        if self.device.type == "cpu":
            torch.set_num_threads(int(os.environ.get("RCBOOK_THREADS", "1")))
        seed_everything(params["seed"])

    # -- values and verdicts, glued for the prose --------------------------------------
    def value(
        self, name: str, v: Any, *, rtol: float = 0.0, atol: float = 0.0, note: str = "", glue: bool = True
    ) -> Any:
        """Record ``v`` in results.json (with its tolerance) and glue it under the same name."""
        v = self.results.value(name, v, rtol=rtol, atol=atol, note=note)
        if glue:
            self.glue(name, v)
        return v

    def verdict(self, claim_id: str, verdict: str, *, claim: str, rule: str, evidence: dict) -> str:
        """Record a claim verdict and glue it as ``verdict-<id>``."""
        v = self.results.verdict(claim_id, verdict, claim=claim, rule=rule, evidence=evidence)
        note = self.smoke_note(claim_id)
        if (
            note
        ):  # the smoke miniature cannot show what full shows: say so next to the verdict, and record why
            self.results.verdicts[claim_id]["smoke_note"] = note
            self.glue(
                f"verdict-{claim_id}",
                f"{v} (at the smoke profile; the full profile's verdict differs: {note})",
            )
        else:
            self.glue(f"verdict-{claim_id}", v)
        self.glue(
            f"verdict-{claim_id}-control", control_text(self.results.verdicts[claim_id].get("control"))
        )
        return v

    def smoke_note(self, claim_id: str) -> str:
        """The chapter module's stated reason (``SMOKE_VERDICT_NOTES[claim_id]``) why its smoke verdict on
        ``claim_id`` differs from the full profile's, when this run is at smoke; else ``""``."""
        if self.params.get("profile") != "smoke":
            return ""
        from ..chapters import module

        return getattr(module(self.name), "SMOKE_VERDICT_NOTES", {}).get(claim_id, "")

    @staticmethod
    def glue(name: str, v: Any) -> None:
        """Glue for the prose: numbers with ``{glue:text}`name:fmt```, strings with ``{glue:md}`name```."""
        try:
            from myst_nb import glue
        except ImportError:  # pragma: no cover - myst-nb is a dependency
            return
        if isinstance(v, str):
            v = as_markdown(v)
        glue(name, v, display=False)

    def figure(self, name: str, fig) -> None:
        """Save a figure made by a library function as ``figures/<name>.png`` and glue that image as
        ``name``.

        The chapter places it with a ``{glue:figure}`` directive carrying ``:name:`` and a caption. The PNG
        carries the figure's panels per row as a text chunk (:mod:`rankcollapse.book.panels`).
        """
        import matplotlib.pyplot as plt

        path = self.fig_dir / f"{name}.png"
        # the panels side by side, for the browser test of each panel's width on the page (book/panels.py)
        meta = {"Software": None, PNG_KEY: str(panels_per_row(fig))}
        fig.savefig(path, dpi=110, bbox_inches="tight", metadata=meta)
        plt.close(fig)
        try:
            from IPython.display import Image
            from myst_nb import glue
        except ImportError:  # pragma: no cover
            return
        glue(name, Image(filename=str(path)), display=False)

    def progress(self, msg: str) -> None:
        """One line per stage, with elapsed time, into the log, never into the page: appended to
        ``progress.log`` in the output folder, and written to the kernel's own stderr (the runner's
        terminal) when ``$RCBOOK_VERBOSE`` is set (``rcbook run -v``)."""
        line = f"[{self.name} {time.perf_counter() - self._t0:7.1f}s] {msg}\n"
        with open(self.out / PROGRESS_LOG, "a") as f:
            f.write(line)
        if os.environ.get("RCBOOK_VERBOSE") and sys.__stderr__ is not None:
            sys.__stderr__.write(line)
            sys.__stderr__.flush()

    def finish(self) -> Path:
        path = self.results.save(self.out / "results.json", time.perf_counter() - self._t0)
        n_values, n_verdicts = len(self.results.values), len(self.results.verdicts)
        self.progress(f"results: {path} ({n_values} values, {n_verdicts} verdicts)")
        return path


# names IPython itself adds as cells run (input/output history), and the annotations of the typed
# parameters cell; any other name, "_x" included, is a parameter papermill injected, and an unknown one is
# an error
_IPYTHON_NAME = re.compile(r"^(_|__|___|_i|_ii|_iii|_i\d+|_\d+|_oh|_dh|_ih|In|Out|__annotations__)$")


def injected_names(namespace: dict) -> set:
    """The names papermill assigned in the cell it injects after the parameters cell (its source begins with
    ``# Parameters``), read from IPython's input history; empty when the notebook runs without papermill."""
    for src in reversed(namespace.get("In", []) or []):
        if src.lstrip().startswith("# Parameters"):
            try:
                tree = ast.parse(src)
            except SyntaxError:
                return set()
            return {
                t.id
                for n in tree.body
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
    return set()


def given_parameters(schema, assigned: dict, injected: set) -> dict:
    """What the reader chose: every name papermill injected, and every name of the parameters cell whose
    value is not the full profile's (an edit in the cell); the rest take the profile's values. An unknown
    name is kept, so that :meth:`Schema.resolve` refuses it."""
    full = schema.resolve({}, "full")
    given = {}
    for k, v in assigned.items():
        if k in injected or k not in schema.all:
            given[k] = v
            continue
        try:
            same = schema.all[k].coerce(v) == full[k] if v is not None else full[k] is None
        except ValueError:
            same = False
        if not same:
            given[k] = v
    return given


def start(name: str, namespace: dict, before: set) -> Chapter:
    """Validate the parameters the notebook holds (defaults + papermill's injections) and start the
    chapter."""
    # everything assigned since the snapshot: the parameters cell and papermill's injected cell
    # (modules, classes and functions imported meanwhile are not parameters)
    assigned = {
        k: v
        for k, v in namespace.items()
        if k not in before and not _IPYTHON_NAME.match(k) and not callable(v) and not inspect.ismodule(v)
    }
    schema = chapter_schema(name)
    params = schema.resolve(given_parameters(schema, assigned, injected_names(namespace)))
    ch = Chapter(name, params)
    try:
        from IPython.display import Markdown, display

        rows = "\n".join(f"| `{k}` | `{v!r}` |" for k, v in params.items() if k != "output_dir")
        display(Markdown(f"| parameter | value |\n|---|---|\n{rows}"))
    except ImportError:  # pragma: no cover
        pass
    return ch


def as_markdown(text: str):
    """IPython ``Markdown`` holding ``text`` as text. (``Markdown(text)`` reads ``text`` as a file name when
    a file or folder of that name exists: glueing "." would read the working folder.)"""
    from IPython.display import Markdown

    m = Markdown("")
    m.data = text
    return m
