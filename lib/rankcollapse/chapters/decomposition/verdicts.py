"""Chapter `decomposition`'s claims D1 (the output is exactly the sum over paths) and C5 (SANs with skips
behave like ensembles of shallow paths): their rule texts (``RULE_*``, and C5's previous rule
``RULE_C5_OLD`` with :func:`old_verdict_c5`), C5's thresholds and regime, the decisions (``verdict_*``), C5's
evidence, :data:`VERDICTS` and the ``judge_*`` that record the verdicts.
"""

from __future__ import annotations

from ...core import explosion

IDENTITY_TOL = 0.1  # C5: truncation error at which paths of length <= k "reproduce" res(Y) (k90)

# C5: ||Y||_F / ||X||_F above this (or not finite): the forward pass has exploded. Stated once, for every
# chapter, in rankcollapse.core.explosion.
EXPLODE = explosion.EXPLODE


RULE_D1 = (
    "supported if the relative Frobenius error of the explicit path sum against the forward pass is "
    "< 1e-12 in float64 and < 1e-5 in float32 in every configuration enumerated, and < 1e-12 (float64) for "
    "the length recursion at scale; refuted if any float64 error exceeds 1e-6 (far above round-off: the "
    "identity fails); inconclusive otherwise (errors above round-off without a failure of the identity) "
    "or when no configuration was enumerated"
)


RULE_C5 = (
    "at random initialisation, over the weight-scale grid: a scale is in the question's regime when the "
    "path that skips every layer alone misses more than 10% of res(Y) (truncation error at length 0 > 0.1; "
    "below that the input alone reproduces the residual and path lengths are moot); a scale holds when "
    "paths of length <= L/2 reproduce res(Y) to 10% (truncation error at length floor(L/2) <= 0.1) and the "
    f"forward pass has not exploded ({explosion.TREATMENT}: an exploded scale is reported apart and counts "
    "as not holding, whatever its truncation error); within the regime: supported if every scale holds, "
    "refuted if none does, inconclusive if some do, or if fewer than two scales of the grid fall in the "
    "regime; the reason gives the regime's boundaries on the grid and the exploded scales"
)


RULE_C5_PREV = (
    "at random initialisation, over the weight-scale grid: a scale is in the meaningful regime when the "
    "path that skips every layer alone misses more than 10% of res(Y) (truncation error at length 0 > 0.1; "
    "below that the input alone reproduces the residual and path lengths are moot) and the forward pass has "
    "not exploded (||Y||_F/||X||_F <= 10; above that the attention saturates and every layer multiplies "
    "the output); within the regime: supported if paths of length <= L/2 reproduce res(Y) to 10% "
    "(truncation error at length floor(L/2) <= 0.1) at every scale, refuted if at none, inconclusive if at "
    "some, or if fewer than two scales of the grid fall in the regime; the reason gives the regime's "
    "boundaries on the grid"
)


RULE_C5_OLD = (
    "paths of length <= L/2 reproduce res(output) to 10% (k90 <= L/2) at every weight scale tested: "
    "supported; at none: refuted; at some: inconclusive"
)


def verdict_d1(evidence: dict) -> tuple[str, str]:
    """D1 from ``configs`` (configurations enumerated), ``err_f64``, ``err_f32`` (worst path-sum errors) and
    ``big_err_f64`` (the recursion at scale)."""
    e64, e32, big = evidence["err_f64"], evidence["err_f32"], evidence["big_err_f64"]
    nums = f"worst error {e64:.1e} (float64), {e32:.1e} (float32), {big:.1e} at scale (float64)"
    if not evidence["configs"]:
        return "inconclusive", "No configuration was enumerated, so the identity was not checked."
    if max(e64, big) > 1e-6:
        return "refuted", f"The path sum misses the forward pass far beyond round-off: {nums}."
    if e64 < 1e-12 and e32 < 1e-5 and big < 1e-12:
        n = evidence["configs"]
        return (
            "supported",
            f"In all {n} configurations and at scale the path sum is exact to round-off: {nums}.",
        )
    return "inconclusive", f"The errors exceed round-off but are no failure of the identity: {nums}."


def _identity(r: dict) -> bool:
    return r["trunc0"] <= IDENTITY_TOL  # a NaN (no residual left to split) is not the identity


def c5_regime(scales: list[dict]) -> list[dict]:
    """The rows of ``scales`` (each with ``scale``, ``trunc0``, ``growth``) in C5's regime: the input alone
    misses more than :data:`IDENTITY_TOL` of res(Y). Exploded scales are in it (they count as not
    holding)."""
    return [r for r in scales if not _identity(r)]


def c5_holds(r: dict) -> bool:
    """A scale holds: paths of length <= L/2 reproduce res(Y) to 10% and the forward pass did not explode."""
    return not explosion.exploded(r["growth"], r.get("layers")) and r["trunc_half"] <= IDENTITY_TOL


def verdict_c5(evidence: dict) -> tuple[str, str]:
    """C5 from ``L`` and ``scales``: one row per weight scale with ``scale``, ``trunc0`` (truncation error
    keeping the length-0 path only), ``trunc_half`` (keeping lengths <= floor(L/2)) and ``growth``
    (``||Y||_F/||X||_F``); ``regime`` (optional) names the networks (default: random SANs with skips)."""
    L, rows = evidence["L"], sorted(evidence["scales"], key=lambda r: r["scale"])
    nets = evidence.get("regime") or "random SANs with skips"
    reg = c5_regime(rows)
    low = [r["scale"] for r in rows if _identity(r)]
    high = [r["scale"] for r in rows if explosion.exploded(r["growth"], r.get("layers"))]
    where = (
        f"the identity path alone reproduces res(Y) at scales {_fmt(low)}; the forward pass explodes "
        f"(growth > {EXPLODE:g}) at {_fmt(high)}, counted as not holding"
    )
    if len(reg) < 2:
        return "inconclusive", (
            f"In {nets} at initialisation, only {len(reg)} scale(s) of the grid "
            f"({_fmt([r['scale'] for r in reg])}) lie in the regime ({where}), too few to decide."
        )
    holds = [r["scale"] for r in reg if c5_holds(r)]
    span = f"{reg[0]['scale']:g} to {reg[-1]['scale']:g}"
    errs = ", ".join(
        f"{r['trunc_half']:.2g} at {r['scale']:g}"
        + (" (exploded)" if explosion.exploded(r["growth"], r.get("layers")) else "")
        for r in reg
    )
    text = (
        f"In {nets} at initialisation, in the regime, scales {span} of the grid ({where}), paths of length "
        f"<= {L // 2} of {L} leave a residual error of {errs}"
    )
    if len(holds) == len(reg):
        return "supported", f"{text}: at most 10% at every scale, none exploded."
    if not holds:
        return "refuted", f"{text}: no scale holds."
    return "inconclusive", f"{text}: the scales hold only at {_fmt(holds)}."


def prev_verdict_c5(evidence: dict) -> tuple[str, str]:
    """C5's previous rule (:data:`RULE_C5_PREV`: exploded scales left out of the regime), kept to show its
    verdict on the same networks beside the new one."""
    L, rows = evidence["L"], sorted(evidence["scales"], key=lambda r: r["scale"])
    reg = [
        r
        for r in rows
        if r["trunc0"] > IDENTITY_TOL and not explosion.exploded(r["growth"], r.get("layers"))
    ]
    if len(reg) < 2:
        return "inconclusive", f"Only {len(reg)} scale(s) in the previous rule's regime."
    holds = [r for r in reg if r["trunc_half"] <= IDENTITY_TOL]
    text = f"{len(holds)} of the {len(reg)} scales {_fmt([r['scale'] for r in reg])} hold (L = {L})"
    if len(holds) == len(reg):
        return "supported", f"{text}."
    return ("refuted" if not holds else "inconclusive"), f"{text}."


def _fmt(xs) -> str:
    return ", ".join(f"{x:g}" for x in xs) if xs else "none"


VERDICTS = {"D1": verdict_d1, "C5": verdict_c5}


def old_verdict_c5(k90s: list[int], L: int) -> str:
    """C5's previous rule (:data:`RULE_C5_OLD`) on the k90 of every scale of the grid; kept to show its
    verdict beside the new one."""
    shallow = [k <= L / 2 for k in k90s]
    return "supported" if all(shallow) else ("refuted" if not any(shallow) else "inconclusive")


def c5_evidence(shares: list[dict], L: int) -> dict:
    """C5's evidence from :func:`length_shares`' rows."""
    return {
        "L": L,
        "scales": [
            {
                "scale": r["scale"],
                "trunc0": r["trunc_err"][0],
                "trunc_half": r["trunc_err"][L // 2],
                "growth": r["growth"],
                "k90": r["k90"],
            }
            for r in shares
        ],
    }


C5_CONTROL_ON = (
    "the same networks without skips (same seeds, weights and scales, skip connections removed): every "
    "path has length L, so short paths carry nothing"
)
D1_CONTROL_ON = (
    "the same path sums with the longest paths (length L) left out, in every configuration and at scale: "
    "the exactness check must fail"
)


def judge_c5(ch, evidence: dict, control: dict | None = None) -> str:
    """Record C5 (:func:`verdict_c5`) from :func:`record_shares`' evidence, with its control: the same rule
    on ``control``, the evidence of the same networks without skips (:func:`c5_evidence` of
    ``length_shares(..., skip=False)``); the previous rule's verdict on the same networks beside."""
    v, reason = verdict_c5(evidence)
    if control is not None:
        vc, rc = verdict_c5(control | {"regime": "the same random SANs without skips"})
    else:
        vc, rc = "not run", "The networks without skips were not run."
    prev, prev_reason = prev_verdict_c5(evidence)
    ch.glue("c5_reason", reason)
    ch.glue("c5_control_reason", rc)
    ch.value(
        "c5_prev_rule_verdict",
        prev,
        note="the previous rule (exploded scales left out of the regime) on this run",
    )
    ch.glue("c5_prev_rule", RULE_C5_PREV)
    return ch.verdict(
        "C5",
        v,
        claim="SANs with skips behave like ensembles of shallow paths (at random initialisation, over a "
        "grid of weight scales, exploded networks counted apart as not holding)",
        rule=RULE_C5,
        evidence=evidence
        | {
            "reason": reason,
            "control": {"on": C5_CONTROL_ON, "verdict": vc, "reason": rc},
            "prev_verdict": prev,
            "prev_reason": prev_reason,
            "rule_prev": RULE_C5_PREV,
        },
    )


def d1_control_evidence(recon: list[dict], big: dict) -> dict:
    """D1's control: the evidence :func:`verdict_d1` reads, from the path sums with their longest paths
    left out (``err_drop_longest`` of every configuration, ``err_drop_longest_float64`` at scale), with the
    smallest such error over the configurations beside (every one must fail, not only the worst)."""
    f64 = [r["err_drop_longest"] for r in recon if r["dtype"] == "float64"]
    f32 = [r["err_drop_longest"] for r in recon if r["dtype"] == "float32"]
    return {
        "configs": len(recon),
        "err_f64": max(f64) if f64 else float("nan"),
        "err_f32": max(f32) if f32 else float("nan"),
        "big_err_f64": big["err_drop_longest_float64"],
        "min_err": min(f64 + f32) if f64 + f32 else float("nan"),
    }


def judge_d1(ch, recon: list[dict], worst: dict, big: dict) -> str:
    """Record D1 (:func:`verdict_d1`): the identity holds to round-off in every configuration and at
    scale; its control is the same rule on the path sums with their longest paths left out
    (:func:`d1_control_evidence`)."""
    evidence = {
        "configs": len(recon),
        "err_f64": worst["float64"],
        "err_f32": worst["float32"],
        "big_err_f64": big["err_float64"],
    }
    v, reason = verdict_d1(evidence)
    cev = d1_control_evidence(recon, big)
    vc, rc = verdict_d1(cev)
    rc = f"{rc[:-1]}; the smallest error over the configurations is {cev['min_err']:.1e}."
    ch.glue("d1_reason", reason)
    ch.glue("d1_control_reason", rc)
    return ch.verdict(
        "D1",
        v,
        claim="the SAN output is exactly the sum over paths plus 1b^T",
        rule=RULE_D1,
        evidence=evidence
        | {"reason": reason, "control": {"on": D1_CONTROL_ON, "verdict": vc, "reason": rc, "evidence": cev}},
    )
