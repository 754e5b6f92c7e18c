"""Chapter `mlp`, verdicts: the rules of C3 (MLPs slow the collapse through their Lipschitz constant) and Q3
(rank kept by strong MLPs trades against robustness) as text (``RULE_*``, with Q3's former rule
``RULE_Q3_OLD``) and as pure decision functions (``verdict_*``, listed in :data:`VERDICTS`) on plain
evidence dicts (``*_evidence``), and ``judge_*``, which record the verdicts; also why a smoke verdict would
differ from the full profile's (:data:`SMOKE_VERDICT_NOTES`).
"""

from __future__ import annotations

import math

# why a smoke verdict differs from the full profile's (shown next to the verdict at smoke;
# tests/test_records.py). Empty: since the smoke networks have full's width, tokens and depth (fewer seeds
# and a coarser lambda grid), both profiles reach the same verdicts.
SMOKE_VERDICT_NOTES: dict[str, str] = {}


RULE_C3 = (
    "per attention weight scale, rank preservation A against lambda: at every scale A rises by >= 1 "
    "decade to its peak and falls by <= 0.5 decade after it (a larger lambda, a slower collapse): "
    "supported; at some scale the largest lambda keeps >= 1 decade less rank than the smallest (a "
    "larger lambda, a faster collapse): refuted; otherwise (slowing over part of the range only): "
    "inconclusive"
)


def verdict_c3(evidence: dict) -> tuple[str, str]:
    """C3 by :data:`RULE_C3` from ``{"ws<s>": {rise, fall_after_peak, A_min_lambda, A_max_lambda}}`` (one
    entry per attention weight scale, as :func:`c3_evidence` builds it); other keys are not read, except
    ``where`` (the regime, in words), which ends the reason."""
    scales = {k: s for k, s in evidence.items() if k.startswith("ws")}
    where = f"; {evidence['where']}" if evidence.get("where") else ""
    desc = "; ".join(
        f"weight scale {k[2:]}: rise {s['rise']:.2f}, fall after peak {s['fall_after_peak']:.2f}, "
        f"A {s['A_min_lambda']:.2f} at the smallest lambda, {s['A_max_lambda']:.2f} at the largest"
        for k, s in scales.items()
    )
    faster = [k[2:] for k, s in scales.items() if s["A_min_lambda"] - s["A_max_lambda"] >= 1.0]
    if faster:
        return (
            "refuted",
            f"at weight scale {', '.join(faster)} the largest lambda keeps >= 1 decade less rank "
            f"({desc}{where})",
        )
    if all(s["rise"] >= 1.0 and s["fall_after_peak"] <= 0.5 for s in scales.values()):
        return "supported", f"at every weight scale a larger lambda keeps more rank ({desc}{where})"
    return "inconclusive", f"a larger lambda keeps more rank over part of the range only ({desc}{where})"


def c3_evidence(slow: dict) -> dict:
    """The C3 verdict's evidence from :func:`slowing` per weight scale."""
    return {
        f"ws{ws:g}": {
            "rise": s["rise"],
            "fall_after_peak": s["fall_after_peak"],
            "A_min_lambda": s["A"][0],
            "A_max_lambda": s["A"][-1],
            "peak_scale": s["peak_scale"],
            "rho_all": s["rho_all"],
        }
        for ws, s in slow.items()
    }


def c3_control_evidence(qslow: dict, ws: float, where: str) -> dict:
    """C3's control evidence: :func:`c3_evidence`'s form for one family of Q3's sweep
    (:func:`rankcollapse.chapters.mlp.experiments.q3_slowing`, at attention weight scale ``ws``)."""
    return c3_evidence({ws: qslow}) | {"where": where}


def judge_c3(ch, slow: dict, qslow: dict, p) -> str:
    """Record the C3 verdict: :func:`verdict_c3` on :func:`c3_evidence` (the deep networks of parts (a, b)),
    beside its control, the same rule on shallow networks of the same kind (``qslow``,
    :func:`rankcollapse.chapters.mlp.experiments.c3_control` summarised by
    :func:`rankcollapse.chapters.mlp.experiments.q3_slowing`), under ``evidence["control"]``. Glue the
    control's verdict and reason as ``c3_control_verdict`` and ``c3_control_reason``. Returns the
    verdict."""
    ws = ", ".join(f"{w:g}" for w in p.weight_scales)
    where = (
        f"at random initialisation, SAN+MLP without skips, {p.n_layers} layers, d = {p.d_model}, "
        f"H = {p.n_heads}, attention weight scales {ws}"
    )
    ev = c3_evidence(slow) | {"where": where}
    v, reason = verdict_c3(ev)
    cwhere = (
        f"at random initialisation, SAN+MLP without skips, {p.c3_control_layers} layers, d = {p.d_model}, "
        f"H = {p.n_heads}, attention weight scale {p.weight_scales[0]:g}"
    )
    cev = c3_control_evidence(qslow, p.weight_scales[0], cwhere)
    cv, creason = verdict_c3(cev)
    ch.glue("reason-C3", reason)
    ch.glue("c3_control_verdict", cv)
    ch.glue("c3_control_reason", creason)
    ch.glue("c3_control_layers", p.c3_control_layers)
    control = {
        "on": f"the same kind of network (SAN+MLP without skips, the seeds of part (c)), "
        f"{p.c3_control_layers} layers deep, where the rank survives at all but the smallest lambdas",
        "verdict": cv,
        "reason": creason,
        "evidence": cev,
    }
    return ch.verdict(
        "C3",
        v,
        claim="MLPs slow the collapse through their Lipschitz constant (Corollary 3.2)",
        rule=RULE_C3,
        evidence=ev | {"reason": reason, "control": control},
    )


Q3_RANK_FLOOR = (
    1e-8  # a family counts only if every median r(X_L) is above this (far above float64 round-off)
)
Q3_GAIN = 0.5  # decades of rank kept: the least gain in log10 r(X_L)/r(X_0) that counts as rank bought
Q3_PRICE = 0.3  # decades of residual sensitivity beyond the control: a price (a factor of 2)
Q3_FREE = 0.1  # decades: at most this beyond the control is no price
RULE_Q3 = (
    "two families in which the rank survives: SAN+MLP without skips and q3_layers deep (shallow), and "
    "SAN+MLP with skips around both sublayers (skip), each beside a control with every attention matrix "
    "replaced by the identity. Per family, between the smallest and the largest lambda: the gain in rank "
    "kept, G = log10 r(X_L)/r(X_0) (medians over networks), and the price, the rise of log10 S beyond the "
    "control's rise, with S the residual sensitivity (RMS over random input directions u of "
    "(||res(J u)||_F / ||res F(X)||_F) / (||u||_F / ||X||_F)). A family buys rank if every median r(X_L) "
    f">= {Q3_RANK_FLOOR:g} and its gain is >= {Q3_GAIN:g} decade. Supported: some family buys rank, and in "
    f"every family that does the price is >= {Q3_PRICE:g} decade; refuted: some family buys rank, and in "
    f"every family that does the price is <= {Q3_FREE:g} decade; inconclusive: no family buys rank, or the "
    "prices are in between or disagree"
)


# The rule this chapter used before (on the deep networks of (a, b), with the clipped rank preservation A
# and the Jacobian norm relative to the whole output); its verdict was "supported" at both profiles.
RULE_Q3_OLD = (
    "over the lambda range where rank preservation rises (>= 3 grid points, a rise >= 1 decade): "
    "relative sensitivity rises too (rank corr >= 0.8 for both): supported; relative sensitivity "
    "does not rise (rank corr <= 0): refuted; otherwise, or no such range: inconclusive"
)


def q3_evidence(qsum: dict) -> dict:
    """The Q3 verdict's evidence per family: the smallest median ``r(X_L)``, the gain ``G`` and the rises of
    log10 S (network and control) from the smallest to the largest lambda, and the price (their
    difference); with the same for the whole-output sensitivity, the control's gain, and the rise of log10 S
    up to the first lambda where G is within 0.1 decade of its largest value (the end of the rank's rise),
    for the page."""
    ev = {}
    for fam, pts in qsum.items():
        a, b = pts[0], pts[-1]
        gmax = max(q["G"] for q in pts)
        plat = next(q for q in pts if q["G"] >= gmax - 0.1)  # where the rank kept stops rising
        ev[fam] = {
            "lambda_plateau": plat["lambda"],
            "rise_S_to_plateau": plat["S"] - a["S"],
            "min_r_L": min(q["r_L"] for q in pts),
            "gain": b["G"] - a["G"],
            "rise_S": b["S"] - a["S"],
            "rise_S_control": b["S_ctl"] - a["S_ctl"],
            "price": (b["S"] - a["S"]) - (b["S_ctl"] - a["S_ctl"]),
            "rise_S_out": b["S_out"] - a["S_out"],
            "gain_control": b["G_ctl"] - a["G_ctl"],
            "min_r_L_control": min(q["r_L_ctl"] for q in pts),
            "lambda_min": a["lambda"],
            "lambda_max": b["lambda"],
        }
    return {"families": ev}


def verdict_q3(evidence: dict) -> tuple[str, str]:
    """Q3 by :data:`RULE_Q3` from :func:`q3_evidence` (``{"families": {name: {min_r_L, gain, price}}}``)."""
    fams = evidence["families"]
    where = f"; {evidence['where']}" if evidence.get("where") else ""
    desc = (
        "; ".join(
            f"{k}: min r(X_L) {f['min_r_L']:.2g}, gain {f['gain']:+.2f}, price {f['price']:+.2f} decades"
            for k, f in fams.items()
        )
        + where
    )
    buying = {
        k: f
        for k, f in fams.items()
        if f["min_r_L"] >= Q3_RANK_FLOOR and f["gain"] >= Q3_GAIN and math.isfinite(f["price"])
    }
    if not buying:
        return "inconclusive", f"no family buys rank with lambda ({desc})"
    names = ", ".join(buying)
    if all(f["price"] >= Q3_PRICE for f in buying.values()):
        return "supported", f"rank bought by a larger lambda is paid for in sensitivity in {names} ({desc})"
    if all(f["price"] <= Q3_FREE for f in buying.values()):
        return (
            "refuted",
            f"rank bought by a larger lambda costs no sensitivity beyond the control in {names} ({desc})",
        )
    return "inconclusive", f"the price of the rank bought is neither clear nor absent in {names} ({desc})"


def q3_where(p) -> str:
    """Where Q3 is measured, in words (it ends the reason)."""
    return (
        f"at random initialisation, attention weight scale {p.weight_scales[0]:g}, d = {p.d_model}, "
        f"H = {p.n_heads}: shallow family {p.q3_layers} layers without skips, skip family {p.n_layers} "
        "layers"
    )


def q3_control_evidence(ev: dict, where: str) -> dict:
    """Q3's control evidence from :func:`q3_evidence`: per family, the identity-attention control in the
    network's place (its smallest median r(X_L), its gain, and as its price its own rise of log10 S, there
    being no further control beside it)."""
    return {
        "families": {
            k: {
                "min_r_L": f["min_r_L_control"],
                "gain": f["gain_control"],
                "price": f["rise_S_control"],
            }
            for k, f in ev["families"].items()
        },
        "where": where + "; every attention matrix replaced by the identity",
    }


def judge_q3(ch, ev: dict, p) -> str:
    """Record the Q3 verdict: :func:`verdict_q3` on :func:`q3_evidence` (with where it holds,
    :func:`q3_where`), beside its control, the same rule on the identity-attention controls
    (:func:`q3_control_evidence`), under ``evidence["control"]``. Glue the control's verdict and reason as
    ``q3_control_verdict`` and ``q3_control_reason``."""
    where = q3_where(p)
    ev = ev | {"where": where}
    v, reason = verdict_q3(ev)
    cev = q3_control_evidence(ev, where)
    cv, creason = verdict_q3(cev)
    ch.glue("reason-Q3", reason)
    ch.glue("q3_control_verdict", cv)
    ch.glue("q3_control_reason", creason)
    control = {
        "on": "the same networks with every attention matrix replaced by the identity (each token attends "
        "only to itself)",
        "verdict": cv,
        "reason": creason,
        "evidence": cev,
    }
    return ch.verdict(
        "Q3",
        v,
        claim="rank preservation by strong MLPs trades against robustness",
        rule=RULE_Q3,
        evidence=ev | {"reason": reason, "control": control},
    )


VERDICTS = {"C3": verdict_c3, "Q3": verdict_q3}
