"""rcbook: list, run, check, record and build the chapters of the book.

    rcbook list [CHAPTER]                       chapters, parameters, defaults per profile
    rcbook run CHAPTER|all [-p NAME VALUE]... [--profile P] [--device D] [--out DIR] [--force] [-j N] [-v]
    rcbook check [CHAPTER...] [--profile P]     compare results with data/expected/<profile>/
    rcbook record [CHAPTER...] [--profile P]    re-record results after a deliberate change
    rcbook book [--profile P] [-j N] [-v]       run what changed, then build the HTML strictly

A run whose parameters are the profile's own writes build/<profile>/<chapter>/, which the book and
rcbook check read; any other run writes a folder of its own (build/reruns/..., or --out DIR) and says where.
-j N is the number of cores the run may use (default: every core this process may use).

Exit codes: 0 success, 1 a chapter failed / results mismatch / build failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

from ..chapters import CHAPTERS
from ..chapters import schema as chapter_schema
from . import kernels
from .params import PROFILES, ParameterError, parse_cli_value
from .records import MalformedRecord, format_value, load


def _names(arg: list[str]) -> list[str]:
    if not arg or arg == ["all"]:
        return list(CHAPTERS)
    unknown = [a for a in arg if a not in CHAPTERS]
    if unknown:
        raise ParameterError(f"unknown chapter(s) {', '.join(unknown)}; chapters: {', '.join(CHAPTERS)}")
    return arg


def variant_root(variant: str):
    """The build root of a kernel variant: ``build/`` for ``native``, ``build/kernels-<variant>/``
    otherwise."""
    from .runner import REPO

    return REPO / "build" if variant == "native" else REPO / "build" / f"kernels-{variant}"


def inductor_cache(variant: str) -> str:
    """``torch.compile``'s on-disk cache for the processes of ``variant``: a folder of its own beside torch's
    default (``$RCBOOK_INDUCTOR_CACHE`` or ``<tmp>/torchinductor_<user>``, then ``-rcbook-<variant>``).

    Inductor's cache keys do not include ATen's CPU capability, so a process under ``avx2`` finds the code
    compiled under ``native`` and runs it. Measured: the full repair driver (depth 12, width 48, compiled)
    under ``avx2`` with the cache its native run had filled gave NaN weights after 10 updates, every seed;
    with a cache of its own it trains (srank 3.10 at step 400, native 3.17). Set here, in the runner, and
    not in :mod:`rankcollapse.book.kernels`, which every chapter imports (its bytes are in their keys)."""
    kernels.env_for(variant)
    base = os.environ.get("RCBOOK_INDUCTOR_CACHE") or os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"
    )
    return f"{base}-rcbook-{variant}"


def use_kernels(variant: str) -> None:
    """Compute under ``variant`` (see :mod:`rankcollapse.book.kernels`), with its own compile cache
    (:func:`inductor_cache`), into its own build root unless ``$RCBOOK_BUILD`` names one."""
    kernels.apply(variant)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache(variant)
    if variant == "native":
        return
    if not os.environ.get("RCBOOK_BUILD"):
        os.environ["RCBOOK_BUILD"] = str(variant_root(variant))
    for var in (
        "RCBOOK_STATES",
        "RCBOOK_CACHE",
    ):  # a state trained under one variant is never used under another
        if os.environ.get(var):
            os.environ[var] = os.path.join(os.path.abspath(os.environ[var]), f"kernels-{variant}")


CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
JOBS_HELP = (
    "cores the run may use: up to N chapters at once, and each chapter's training jobs on whatever cores "
    "are free (default: the cores this process may use, here %(default)s)"
)


class Help(argparse.RawDescriptionHelpFormatter):
    """Help with the description as written and every option's default (unless its text says it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or action.option_strings == []:
            return text
        if "default" in text:
            return text
        return f"{text} (default: %(default)s)".lstrip()


def cmd_list(a) -> int:
    for name in _names(a.chapters):
        print(f"\n{name}")
        for row in chapter_schema(name).table():
            print(f"  {row['name']:<16} {row['allowed']}")
            if row["name"] != "profile":
                print(f"  {'':<16} smoke={row['smoke']!r}  full={row['full']!r}  paper={row['paper']!r}")
            print(f"  {'':<16} {row['doc']}")
    return 0


def cmd_cell(a) -> int:
    """Print (or, with --write, put into chapters/<name>.md) the parameters cell made from the schema."""
    from .build import write_parameters_cell
    from .params import parameters_cell

    for name in _names(a.chapters):
        if a.write:
            print(f"{name}: {'rewritten' if write_parameters_cell(name) else 'already current'}")
        else:
            print(f"# {name}\n{parameters_cell(chapter_schema(name))}\n")
    return 0


def paper_guard(a, names) -> int | None:
    """The paper profile expects a GPU: without one, say so and estimate the time on one CPU core and on one
    GPU (under :data:`estimates.GPU_BASIS`) instead of starting."""
    if a.profile != "paper" or a.device == "cuda" or getattr(a, "allow_cpu", False):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    from .estimates import GPU_BASIS, gpu_hours, paper_factor
    from .runner import expected_seconds, scratch_costs

    costs = scratch_costs("full")
    lines, total, missing = [], 0.0, 0
    for n in names:
        base = expected_seconds(n, "full")  # CPU time from an empty store, else the recorded wall time
        factor = paper_factor(n)
        if factor is None or base == float("inf"):
            missing += 1
            lines.append(f"  {n:<20} no estimate (no recorded full run, or no basis for a paper factor)")
            continue
        f, how = factor
        total += base * f
        src = "full CPU time from an empty store" if n in costs else "recorded full time"
        lines.append(
            f"  {n:<20} ~{base * f / 3600:8.1f} h on one CPU core, {gpu_hours(base * f)} h on one GPU "
            f"({src} x {f:.3g}: {how})"
        )
    if missing:
        lines.append(f"  ({missing} chapter(s) without an estimate are not in the total)")
    print(
        "rcbook: the 'paper' profile runs the papers' own sizes and expects a CUDA GPU; "
        "none is available here.\n"
        "Estimated time instead:\n" + "\n".join(lines) + f"\n  total ~{total / 3600:.1f} h on one CPU core, "
        f"{gpu_hours(total)} h on one GPU ({GPU_BASIS}).\n"
        "Run it on a GPU machine with --device cuda (bash make.sh paper), "
        "or add --allow-cpu to start anyway.",
        file=sys.stderr,
    )
    return 2


def scheduler_arg(p) -> None:
    p.add_argument(
        "--scheduler",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="hand the chapters' training jobs to a Dask distributed scheduler at ADDRESS "
        "(tcp://host:port), or to a LocalCluster started here when no address is given; "
        "default: the local process pool",
    )


def use_scheduler(a) -> int | None:
    """Check ``--scheduler`` before any work and name it to the chapters (``$RCBOOK_SCHEDULER``, read by
    :func:`rankcollapse.jobs.run_parallel`); 2 (after saying why on stderr) when it cannot be used."""
    s = getattr(a, "scheduler", None)
    if s is None:
        return None
    import re

    from ..jobs import SCHEDULER_ENV

    if s != "local" and not re.fullmatch(r"(tcp|tls|inproc|ucx)://[^\s/]+(:\d+)?|[\w.-]+:\d+", s):
        print(
            f"rcbook: --scheduler {s!r}: allowed: an address such as tcp://host:8786 (or host:8786), "
            "or no value for a LocalCluster on this machine",
            file=sys.stderr,
        )
        return 2
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("rcbook: --scheduler needs dask.distributed: pip install 'dask[distributed]'", file=sys.stderr)
        return 2
    os.environ[SCHEDULER_ENV] = s
    return None


def run_folders(names: list[str], overrides: dict, profile: str, device: str, out: str | None) -> dict:
    """chapter -> where its outputs go: ``--out DIR`` (``DIR/<chapter>`` for several chapters), else the
    book's ``build/<profile>/<chapter>`` for a run with the profile's own parameters, else a folder named
    from the chapter and its parameters (:func:`rankcollapse.book.runner.rerun_dir`): a rerun never replaces
    what the book and ``rcbook check`` read."""
    from .runner import build_dir, is_book_run, rerun_dir

    folders = {}
    for n in names:
        if out:
            folders[n] = Path(out).absolute() / (n if len(names) > 1 else "")
        elif is_book_run(n, overrides, profile, device):
            folders[n] = build_dir(profile) / n
        else:
            folders[n] = rerun_dir(n, overrides, profile, device)
    book = {n: build_dir(profile) / n for n in names}
    if out and any(folders[n].resolve() == book[n].resolve() for n in names):
        raise ParameterError(
            f"--out {out} is the book's own folder build/{profile}/: a run with --out never replaces the "
            "book (run without --out to write it)"
        )
    return folders


def cmd_run(a) -> int:
    from .runner import RUNNER_SET, run_many

    if (rc := use_scheduler(a)) is not None:
        return rc

    overrides = {}
    for name, value in a.param or []:
        overrides[name] = parse_cli_value(value)
    if "workers" in overrides:
        raise ParameterError(
            f"parameter 'workers' is set by the runner, not with -p: use {RUNNER_SET['workers']}"
        )
    names = _names([a.chapter])
    if (rc := paper_guard(a, names)) is not None:
        return rc
    folders = run_folders(names, overrides, a.profile, a.device, a.out)
    if a.verbose:  # stream every cell's output and the chapter's progress lines as it runs
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    outcomes = run_many(
        names,
        overrides,
        a.profile,
        a.device,
        force=a.force,
        jobs=a.jobs,
        log_output=a.verbose,
        outs=folders,
        progress=not a.verbose,
    )
    failed = [o for o in outcomes if o.status == "failed"]
    for o in failed:
        print(o.message, file=sys.stderr)
    if not failed:
        from .runner import build_dir

        own = [o.out for o in outcomes if o.out != build_dir(a.profile) / o.chapter]
        where = "\n".join(f"  {p}" for p in own) if own else f"  {build_dir(a.profile)}/<chapter>/"
        print(
            (
                "outputs (a rerun's own folder: the book is unchanged):\n"
                if own
                else "outputs (the book's):\n"
            )
            + where
            + "\n  each: the executed notebook, results.json, figures/, progress.log"
        )
    return 1 if failed else 0


def cmd_check(a) -> int:
    from .build import check_chapter, staleness
    from .records import expected_path, largest_deviation
    from .runner import build_dir

    bad = 0
    for name in _names(a.chapters):
        try:
            status, rows = check_chapter(a.profile, name)
        except MalformedRecord as e:
            print(f"\n{name} ({a.profile}): MALFORMED: {e}")
            bad += 1
            continue
        print(f"\n{name} ({a.profile}): {status}")
        stale = staleness(a.profile, name)
        if stale:
            print(f"  note: {stale}")
        if status not in ("not run", "no record") and "tolerance_rule" not in load(
            expected_path(a.profile, name)
        ):
            print(
                "  note: the recorded tolerances were set by the chapter, "
                "not derived from a measured spread "
                f"between kernel variants (bash make.sh record {a.profile})"
            )
        if status in ("not run", "no record"):
            bad += 1
            continue
        missing = load(expected_path(a.profile, name)).get("spread_missing") or []
        if missing:
            print(
                f"  note: the recorded tolerances never saw kernel variant(s) {', '.join(missing)}"
                + (f", this check's ('{a.kernels}')" if a.kernels in missing else "")
                + f" (rcbook run {name} --profile {a.profile} --kernels V, then rcbook record --spread)"
            )
        w = max([len(r.name) for r in rows] + [5])
        print(f"  {'value':<{w}}  {'recorded':>14}  {'now':>14}  {'tolerance':<22} result")
        for r in rows:
            print(
                f"  {r.name:<{w}}  {format_value(r.recorded):>14}  {format_value(r.now):>14}  "
                f"{r.tolerance:<22} {'pass' if r.ok else 'FAIL'}"
            )
        bad += sum(not r.ok for r in rows)
        dev = largest_deviation(
            load(expected_path(a.profile, name)), load(build_dir(a.profile) / name / "results.json")
        )
        print(
            "  largest deviation from the record: "
            + (
                "none (every value identical)"
                if dev is None
                else f"'{dev[0]}' rel {dev[1]:.3g} (abs {dev[2]:.3g})"
            )
        )
    print(
        f"\ncheck ({a.profile}, kernels '{a.kernels}'): "
        f"{'all results match the recorded ones' if not bad else f'{bad} mismatch(es)'}"
    )
    other = corpus_differs(a.profile)
    if other:
        print(f"note: {other}")
    return 1 if bad else 0


def corpus_differs(profile: str) -> str:
    """A sentence when this Python's standard library, the Part III language model's corpus
    (:func:`rankcollapse.lm.model.corpus`), is not the one the records were made with (the repair-driver
    record's ``corpus_sha256``), else ``""``: then every Part III value comes from other training bytes."""
    import platform

    from .records import expected_path

    path = expected_path(profile, "repair-driver")
    if not path.exists():
        return ""
    rec = load(path)["values"].get("corpus_sha256", {}).get("value")
    if not rec:
        return ""
    from ..lm.model import corpus

    now = corpus().sha256[: len(rec)]
    if now == rec:
        return ""
    return (
        f"this Python's standard library (Python {platform.python_version()}), which Part III trains on, is "
        f"not the one the records were made with (corpus sha256 {now} here, {rec} recorded): every Part III "
        "value comes from other bytes and cannot be expected to match. Set up with the Python the records "
        "name in README.md (PYTHON=/path/to/that/python bash make.sh setup)"
    )


def cmd_record(a) -> int:
    from .records import (
        RECORDED,
        RecordError,
        expected_path,
        kernel_fragile,
        moved,
        record_with_spread,
        seen_text,
    )
    from .runner import build_dir

    variants = [v.strip() for v in (a.spread or "").split(",") if v.strip()]
    if a.fragile and not (variants or a.with_recorded):
        raise ParameterError(
            "--fragile needs --spread (or --with-recorded): fragility is seen between variants"
        )
    for v in variants:
        if v not in kernels.VARIANTS:  # unknown names stop here, before anything is written
            raise ParameterError(
                f"--spread names kernel variant '{v}'; allowed: {', '.join(kernels.VARIANTS)}"
            )
        if v == a.kernels:
            raise ParameterError(
                f"--spread names '{v}', the variant being recorded; name the other variants"
            )
    docs = {}
    for name in _names(a.chapters):
        src = build_dir(a.profile) / name / "results.json"
        if not src.exists():
            print(
                f"{name}: not run at profile '{a.profile}' (run: rcbook run {name} --profile {a.profile})",
                file=sys.stderr,
            )
            return 1
        doc = load(src)
        vdocs = {}
        for v in variants:
            vp = variant_root(v) / a.profile / name / "results.json"
            if not vp.exists():
                print(
                    f"{name}: no run under kernel variant '{v}' ({vp}); run: rcbook run {name} "
                    f"--profile {a.profile} --kernels {v}",
                    file=sys.stderr,
                )
                return 1
            vdocs[v] = load(vp)
        if a.moved:  # the code moved without changing a number: carry the record's measured tolerances
            old, prev = expected_path(a.profile, name), Path(a.moved) / name / "results.json"
            if variants or a.with_recorded or not old.exists() or not prev.exists():
                print(
                    f"{name}: --moved takes no --spread and needs a record ({old}) and the old code's run "
                    f"({prev})",
                    file=sys.stderr,
                )
                return 1
            rec = load(old)
            removed = tuple(k for k in rec.get("params", {}) if k not in chapter_schema(name).all)
            try:
                docs[name] = (src, moved(rec, load(prev), doc, removed))
            except RecordError as e:
                print(f"rcbook record: {e}", file=sys.stderr)
                return 1
            continue
        if a.with_recorded:  # the record being replaced: what another host (or an earlier run) measured
            old = expected_path(a.profile, name)
            if not old.exists():
                print(f"{name}: --with-recorded, but nothing is recorded at {old}", file=sys.stderr)
                return 1
            vdocs[RECORDED] = load(old)
        if vdocs:
            try:
                doc = record_with_spread(doc, vdocs, fragile=a.fragile)
            except RecordError as e:
                print(f"rcbook record: {e}", file=sys.stderr)
                return 1
        docs[name] = (src, doc)
    for name, (src, doc) in docs.items():  # nothing is written unless every chapter could be recorded
        dst = expected_path(a.profile, name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(json.dumps(doc, indent=1) + "\n")
        print(
            f"recorded {src} -> {dst}"
            + (
                f" (tolerances from the spread over {', '.join(variants + [RECORDED] * a.with_recorded)})"
                if variants or a.with_recorded
                else " (moved: bit-identical, the recorded tolerances kept)"
                if a.moved
                else ""
            )
        )
        for cid, v in doc.get("verdicts", {}).items():
            for what, seen in (kernel_fragile(v) or {}).items():
                if seen:
                    label = f"verdict {cid}" + (" on its control" if what == "control" else "")
                    print(f"  KERNEL-FRAGILE: {label}: {seen_text(seen)}")
        for vname, e in doc.get("values", {}).items():
            if e.get("seen") or e.get("straddled_limits"):
                print(f"  KERNEL-FRAGILE: value {vname}")
    return 0


def cmd_costs(a) -> int:
    """Record what each chapter cost from an empty store (data/costs/<profile>.json), from a run log."""
    from .runner import build_dir, record_costs

    if a.table:
        from .schedule import cost_table, readme_with_costs

        if a.readme:
            from .runner import REPO

            path = REPO / "README.md"
            path.write_text(readme_with_costs(path.read_text(), cost_table()))
            print(f"the cost table in {path} now reads data/costs/")
        else:
            print(cost_table())
        return 0
    if not a.how:
        raise ParameterError(
            "rcbook costs: --how is required to record (say how the run was made), or --table"
        )
    src = Path(a.source) if a.source else build_dir(a.profile) / "last-run.json"
    print(f"recorded {src} -> {record_costs(a.profile, src, a.how)}")
    return 0


def cmd_book(a) -> int:
    from .build import build
    from .runner import run_many

    if (rc := paper_guard(a, list(CHAPTERS))) is not None:
        return rc
    if (rc := use_scheduler(a)) is not None:
        return rc
    if a.verbose:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    outcomes = run_many(
        list(CHAPTERS), {}, a.profile, a.device, jobs=a.jobs, log_output=a.verbose, progress=not a.verbose
    )
    failed = [o for o in outcomes if o.status == "failed"]
    for o in failed:
        print(o.message, file=sys.stderr)
    if failed:
        return 1
    rc, html = build(a.profile)
    if rc != 0:
        print("book build FAILED (strict: -W -n --keep-going); see the warnings above", file=sys.stderr)
        return 1
    print(f"book: {html / 'index.html'}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="rcbook",
        description=__doc__.split("\n\nExit codes")[0],
        epilog="Exit codes: 0 success, 1 a chapter failed / results mismatch / build failed, 2 bad input.",
        formatter_class=Help,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    _add = sub.add_parser
    sub.add_parser = lambda *args, **kw: _add(
        *args, formatter_class=Help, **kw
    )  # every subcommand: defaults

    def common(p, device=True):
        p.add_argument(
            "--profile",
            default="full",
            choices=PROFILES,
            help="scale: smoke (minutes, CI), full (the book), paper (the papers' sizes, a GPU)",
        )
        p.add_argument(
            "--kernels",
            default="native",
            choices=tuple(kernels.VARIANTS),
            help="floating-point kernel variant (another machine, simulated); a variant other than "
            "native uses its own build root build/kernels-<variant>/",
        )
        if device:
            p.add_argument(
                "--device",
                default="auto",
                choices=("auto", "cpu", "cuda"),
                help="auto: the CPU at smoke and full (their records were made on the CPU), a CUDA GPU at "
                "paper when there is one",
            )
            p.add_argument(
                "--allow-cpu", action="store_true", help="run the paper profile even without a GPU"
            )

    p = sub.add_parser("list", help="chapters and their parameters")
    p.add_argument("chapters", nargs="*")
    p.set_defaults(fn=cmd_list)
    p = sub.add_parser("cell", help="the parameters cell generated from a chapter's schema")
    p.add_argument("chapters", nargs="*")
    p.add_argument("--write", action="store_true", help="put it into chapters/<name>.md")
    p.set_defaults(fn=cmd_cell)
    p = sub.add_parser("run", help="execute a chapter (or all) with papermill")
    p.add_argument("chapter")
    p.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="a chapter parameter (rcbook list CHAPTER shows them); profile, device, output_dir and workers "
        "are set by the flags above",
    )
    p.add_argument("--force", action="store_true", help="execute even if the cache is up to date")
    p.add_argument(
        "-o",
        "--out",
        default=None,
        metavar="DIR",
        help="write the outputs here (DIR/<chapter> for several chapters) instead of build/reruns/... "
        "(a run with other parameters than the profile's) or build/<profile>/ (the book's own run)",
    )
    p.add_argument("-j", "--jobs", type=int, default=CORES, help=JOBS_HELP)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="stream the chapter's cell output while it runs"
    )
    scheduler_arg(p)
    common(p)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("check", help="compare results with the recorded ones")
    p.add_argument("chapters", nargs="*")
    common(p, device=False)
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser("record", help="re-record results (after a deliberate change)")
    p.add_argument("chapters", nargs="*")
    p.add_argument(
        "--spread",
        default="",
        metavar="V1,V2",
        help="kernel variants already run (rcbook run --kernels V); every tolerance is derived from the "
        "deviations between them and this run",
    )
    p.add_argument(
        "--with-recorded",
        action="store_true",
        help="count the record being replaced (written on another host, or by an earlier run with the same "
        "parameters) as one more variant of the spread: what another machine measured widens the tolerance",
    )
    p.add_argument(
        "--fragile",
        action="store_true",
        help="with --spread: record a verdict, a control's verdict or a non-numeric value that differs "
        "between the kernel variants as kernel-fragile (every outcome seen is kept and accepted by rcbook "
        "check, and the ledger shows the claim decided on no machine) instead of refusing the record",
    )
    p.add_argument(
        "--moved",
        default=None,
        metavar="DIR",
        help="the code moved without changing a number: DIR/<chapter>/results.json is a run of the code "
        "that wrote the record, on this host under the same kernels as this run; refused unless every "
        "value, verdict and parameter of the two runs is bit-identical, then the record keeps its "
        "tolerances and takes this run's code keys",
    )
    common(p, device=False)
    p.set_defaults(fn=cmd_record)
    p = sub.add_parser(
        "costs",
        help="record each chapter's wall and CPU time from a run that trained everything from an empty "
        "store (the runner starts the costliest chapters first)",
    )
    p.add_argument("--profile", default="full", choices=PROFILES)
    p.add_argument(
        "--from", dest="source", default=None, help="the run log (default build/<profile>/last-run.json)"
    )
    p.add_argument("--how", default=None, help="how that run was made: commit, empty store, machine")
    p.add_argument(
        "--table",
        action="store_true",
        help="print the cost table of README.md (recorded, and simulated on 2, 4, 8, 16 cores) instead",
    )
    p.add_argument("--readme", action="store_true", help="with --table: write it into README.md")
    p.set_defaults(fn=cmd_costs)
    p = sub.add_parser("book", help="run changed chapters and build the HTML book")
    p.add_argument("-j", "--jobs", type=int, default=CORES, help=JOBS_HELP)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="stream every chapter's cell output while it runs"
    )
    scheduler_arg(p)
    common(p)
    p.set_defaults(fn=cmd_book)
    return ap


def main(argv: list[str] | None = None) -> int:
    from .kernel_launcher import terminate_gracefully

    terminate_gracefully()  # SIGTERM (timeout, kill) cleans up as Ctrl-C does
    for var in ("RCBOOK_BUILD", "RCBOOK_CACHE", "RCBOOK_STATES", "RCBOOK_EXPECTED"):
        if os.environ.get(var):  # absolute, so chapter kernels (started in other folders) see the same paths
            os.environ[var] = os.path.abspath(os.environ[var])
    a = parser().parse_args(argv)
    try:
        if getattr(a, "jobs", 1) < 1:
            raise ParameterError(
                f"-j/--jobs = {a.jobs} is not allowed: the number of chapters run at once is an integer >= 1"
            )
        if hasattr(a, "kernels"):
            use_kernels(a.kernels)
        return a.fn(a)
    except ParameterError as e:
        print(f"rcbook: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(
            f"rcbook: interrupted ({e or 'Ctrl-C'}): partial outputs removed; a rerun resumes from the last "
            "saved checkpoint",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
