"""Never-collapsed control drivers: a seed's model ramped only down to a held alpha
(:func:`held_control_job`), or the same run as a chain of two branches from the shared prefix split at a
step, so that another control following it until there branches from its saved state
(:func:`control_chain_job`, :func:`control_summary`); and whether a control collapsed after all
(:func:`control_collapsed`)."""

from __future__ import annotations

import copy
from pathlib import Path

from ..lm import training as tr
from .drivers import run_spec
from .recovery import median_around
from .spec import DriverSettings, StudySpec

MEASURED = ("m_step", "srank", "probe_loss", "alpha")  # one entry per measurement
PER_STEP = ("loss", "gnorm", "clipped", "term")  # one entry per update


def held_control_job(
    study: StudySpec, seed: int, alpha: float, steps: int, depth: int | None = None
) -> dict:
    """A control driver: the study's model and ``seed`` (or another ``depth``) ramped from ``ramp_start`` to
    ``ramp_end`` only down to ``alpha`` and held there until step ``steps``. Its first ``ramp_start`` updates
    are the shared plain prefix of its model and seed; its detector says whether it collapsed (a control that
    did is no control). With ``alpha = alpha_min`` and ``steps = driver_steps(study)`` it is
    :func:`rankcollapse.repair.drivers.driver_job`'s run (shared by content)."""
    d = study.driver
    return {
        "ds": tr.DriverSpec(
            run_spec(study, seed, depth, alpha), steps, d.threshold, d.window, d.settle_steps
        )
    }


def prefix_path(study: StudySpec, seed: int) -> str:
    """The saved shared prefix of ``seed``'s model (its first ``ramp_start`` updates at alpha = 1,
    :func:`rankcollapse.lm.training.prefix`): trained once for every driver of that seed, loaded here."""
    spec = run_spec(study, seed)
    pd = tr.prefix(spec, tr.prefix_end(spec))
    return str(tr.states_dir() / pd["key"] / "prefix.pt")


def control_chain_job(study: StudySpec, seed: int, alpha: float, split: int, steps: int, then=None) -> dict:
    """The never-collapsed control of :func:`held_control_job` (``seed``'s model ramped only down to
    ``alpha`` and held, to step ``steps``) as a chain of two branches from the shared prefix, split at step
    ``split``. Its state at ``split`` is saved, so a second control that follows it until ``split`` and then
    goes on under ``then`` (its spec from there on) branches from that state instead of training those steps
    again. The weights, measurements and steps are the driver's, update for update (the same loop from the
    same state; a resumed run is bit-identical); :func:`control_summary` makes its summary."""
    spec = run_spec(study, seed, alpha_min=alpha)
    P = tr.prefix_end(spec)
    if not P < split < steps:
        raise ValueError(f"split {split} must lie between the prefix's end {P} and the end {steps}")
    return {
        "parent": prefix_path(study, seed),
        "segments": [(spec, split - P), (then or spec, steps - split)],
    }


def control_summary(driver: DriverSettings, job: dict, legs: list[dict]) -> dict:
    """The summary :func:`rankcollapse.lm.training.driver` gives (``hist``, ``det``, ``final_probe``,
    ``step``, ``key``) for a control trained as :func:`control_chain_job` (``legs``: its branches'
    summaries): the prefix's history, then each leg's (a leg's first measurement repeats its parent's last:
    dropped), and the driver's detector replayed over the measurements (armed where the first leg's ramp
    starts)."""
    hist = copy.deepcopy(tr.load_dict(Path(job["parent"]))["hist"])
    for leg in legs:
        h = leg["hist"]
        dup = bool(hist["m_step"]) and h["m_step"][:1] == hist["m_step"][-1:]
        for k in MEASURED:
            hist[k] += copy.deepcopy(h[k][1:] if dup else h[k])
        wdup = bool(hist["w_step"]) and h["w_step"][:1] == hist["w_step"][-1:]
        for k in ("w_step", "wsrank"):
            hist[k] += copy.deepcopy(h[k][1:] if wdup else h[k])
        for k in PER_STEP:
            hist[k] += copy.deepcopy(h[k])
    spec = job["segments"][0][0]
    det = tr.Detector(driver.threshold, driver.window, driver.settle_steps, arm_step=spec.alpha_knots[1][0])
    for t, sr in zip(hist["m_step"], hist["srank"]):
        det.feed(t, sr[-1])
    last = legs[-1]
    return {
        "key": last["key"],
        "hist": hist,
        "det": det.to_dict(),
        "final_probe": last["final_probe"],
        "collapse": None,
        "step": last["step"],
    }


def control_collapsed(summary: dict, threshold: float, k: int = 10) -> bool:
    """Whether a control driver collapsed: its detector settled, or the median of its last ``k``
    measurements of the last block's srank lies below ``threshold``."""
    h = summary["hist"]
    return summary["det"].get("settled") is not None or median_around(h, h["m_step"][-1], k) < threshold
