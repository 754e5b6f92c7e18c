"""The collapse events the treatment branches start from: for every seed whose driver settled, the switch
step, the healthy srank there and the recovery thresholds (:func:`collapse_events`), and each loss term's
beta, solved on the raw terms of the branch's first training batches (:func:`prepare_events`,
:func:`switch_raws`)."""

from __future__ import annotations

import statistics

import torch

from ..lm import training as tr
from ..lm.model import corpus
from .drivers import run_spec
from .recovery import median_around, q_of
from .spec import StudySpec

LITERAL_FRAC = 0.5  # the paper's rule: recovered when the 50-step median reaches half the healthy srank


def collapse_events(study: StudySpec, drivers: dict, healthy: dict, recover_frac: float) -> list[dict]:
    """For every seed whose driver settled, what a branch from its saved collapse is read against: the
    switch step, the healthy srank and Q there, and the recovery thresholds (``recover_frac``: the recovery
    rule's fraction, :class:`~rankcollapse.repair.spec.RecoverySettings`). No loss term is calibrated here:
    the branches without one (``untreated``, ``reversed-ramp``) need nothing more
    (:func:`rankcollapse.repair.treatments.branch_job`); :func:`prepare_events` adds each term's beta.

    Keys of each event: ``seed``, ``start`` (the switch step), ``collapse`` (the saved state),
    ``healthy_srank`` (10-measurement median of the healthy network at ``start``), ``s0`` (its Q),
    ``rec_threshold`` (the book's stricter rule: ``threshold + recover_frac * (healthy_srank -
    threshold)``), ``rec_threshold_literal`` (the paper's: ``LITERAL_FRAC * healthy_srank``)."""
    d = study.driver
    ev = []
    for s in d.seeds:
        dr = drivers[s]
        if dr["collapse"] is None:
            continue
        t = dr["det"]["settled"]
        hs = median_around(healthy[s]["hist"], t)
        ev.append(
            {
                "seed": s,
                "start": t,
                "collapse": dr["collapse"],
                "healthy_srank": hs,
                "s0": q_of(hs),
                "rec_threshold": d.threshold + recover_frac * (hs - d.threshold),
                "rec_threshold_literal": LITERAL_FRAC * hs,
            }
        )
    return ev


def prepare_events(study: StudySpec, drivers: dict, healthy: dict, log=None) -> list[dict]:
    """For every seed whose driver settled: :func:`collapse_events` (the switch step, the healthy srank and
    Q there (s0), the recovery thresholds), and each loss term's beta solved so that it adds Lambda when it
    is switched on. Needs the study's recovery rule (``study.recovery``).

    Keys of each event: those of :func:`collapse_events`, and ``betas`` (the 1x beta of each kind,
    :func:`switch_raws`), ``calib`` (per kind the raw term on each calibration batch, their mean, and what
    the former calibration on the probe batch would have set)."""
    d, rec = study.driver, study.recovery
    if rec is None:
        raise ValueError("prepare_events needs the study's recovery rule (study.recovery)")
    ev = collapse_events(study, drivers, healthy, rec.recover_frac)
    steps = study.branch.calib_steps
    for e in ev:
        s, t, s0 = e["seed"], e["start"], e["s0"]
        dr = drivers[s]
        raws = switch_raws(dr["collapse"], s0, d.alpha_min, s, t, steps, d.batch, run_spec(study, s).engine)
        betas, calib = {}, {}
        for kind, r in raws.items():
            raw = statistics.fmean(r)
            if raw <= 0:
                raise ValueError(f"seed {s}: term {kind} is zero at the saved state, so it cannot be set")
            betas[kind] = rec.added_loss / raw
            probe_raw = tr.calibrate(dr["collapse"], kind, rec.added_loss, d.alpha_min, s, s0)[1]
            calib[kind] = {"raws": r, "raw": raw, "probe_raw": probe_raw}
        e["betas"] = betas
        e["calib"] = calib
    return ev


# -- calibration: beta such that the term adds its target when it is switched on --------------------------
def switch_raws(
    path, s0: float, alpha: float, seed: int, start: int, steps: int, batch: int, engine: str = "eager"
) -> dict:
    """Each raw term (beta = 1; the hinge with ``s0``) of the saved state at ``path`` on the training
    batches of the branch's first ``steps`` updates (steps ``start`` .. ``start + steps - 1``, the batches
    the training loop draws there), before any update: ``{kind: [raw per batch]}``.

    At the saved state the added loss is ``beta * raw``, linear in beta, so ``beta = target / mean raw``
    makes the term add its target there, averaged over those batches, exactly; the former calibration took
    ``raw`` on the probe batch instead, whose value differs from the training batches'. What the term adds
    over the following updates is its response, not its setting: the branch's history records it
    (:func:`rankcollapse.repair.treatments.added_loss`). Solving beta for that response by trial branches
    was tried and dropped: from a collapsed state it is not a smooth function of beta (smoke, avx2 kernels,
    seed 0, hinge 1x, 10 updates: beta 0.0854, 0.0912, 0.0928, 0.0964, 0.0976 added 0.0875, 0.0935,
    0.1087, 0.1054, 0.1157 against 0.1).

    The raws are taken through the forward the branch trains with (``engine``, :func:`tr.forward_of`), with
    gradients enabled as in a training step: the compiled forward rounds otherwise than the eager one, and
    at full a calibration taken eagerly missed the compiled branch's first term by up to 1%
    (``calibration_batches_aligned`` false)."""
    m = tr.load_model(path, alpha)
    fwd = tr.forward_of(m, engine)
    c = corpus()
    out = {k: [] for k in tr.TERMS}
    with torch.no_grad() if engine == "eager" else torch.enable_grad():
        for t in range(start, start + steps):
            x, _ = c.batch(seed, t, batch, m.cfg.ctx)
            _, hs, _ = fwd(x, hidden=True)
            for k in tr.TERMS:
                out[k].append(float(tr.term_value(tr.Term(k, 1.0, s0), hs).detach()))
    return out
