"""Chapter `decomposition`'s claims D1 (the output is exactly the sum over paths) and C5 (SANs with skips
behave like ensembles of shallow paths): their rule texts (``RULE_*``, and C5's previous rule
``RULE_C5_OLD`` with :func:`old_verdict_c5`), C5's thresholds and regime, the decisions (``verdict_*``), C5's
evidence, :data:`VERDICTS` and the ``judge_*`` that record the verdicts.
"""

from __future__ import annotations

IDENTITY_TOL = 0.1  # C5: truncation error at which paths of length <= k "reproduce" res(Y) (k90)


EXPLODE = 10.0  # C5: ||Y||_F / ||X||_F above this: the forward pass has exploded (no meaningful question)


RULE_D1 = (
    "supported if the relative Frobenius error of the explicit path sum against the forward pass is "
    "< 1e-12 in float64 and < 1e-5 in float32 in every configuration enumerated, and < 1e-12 (float64) for "
    "the length recursion at scale; refuted if any float64 error exceeds 1e-6 (far above round-off: the "
    "identity fails); inconclusive otherwise (errors above round-off without a failure of the identity) "
    "or when no configuration was enumerated"
)


RULE_C5 = (
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


def c5_regime(scales: list[dict]) -> list[dict]:
    """The rows of ``scales`` (each with ``scale``, ``trunc0``, ``growth``) in C5's meaningful regime."""
    return [r for r in scales if r["trunc0"] > IDENTITY_TOL and r["growth"] <= EXPLODE]


def verdict_c5(evidence: dict) -> tuple[str, str]:
    """C5 from ``L`` and ``scales``: one row per weight scale with ``scale``, ``trunc0`` (truncation error
    keeping the length-0 path only), ``trunc_half`` (keeping lengths <= floor(L/2)) and ``growth``
    (``||Y||_F/||X||_F``)."""
    L, rows = evidence["L"], sorted(evidence["scales"], key=lambda r: r["scale"])
    reg = c5_regime(rows)
    low = [r["scale"] for r in rows if r["trunc0"] <= IDENTITY_TOL]
    high = [r["scale"] for r in rows if r["growth"] > EXPLODE]
    where = (
        f"the identity path alone reproduces res(Y) at scales {_fmt(low)} and the forward pass explodes at "
        f"{_fmt(high)}"
    )
    if len(reg) < 2:
        return "inconclusive", (
            f"Only {len(reg)} scale(s) of the grid ({_fmt([r['scale'] for r in reg])}) lie in the "
            f"meaningful regime ({where}), too few to decide."
        )
    holds = [r["scale"] for r in reg if r["trunc_half"] <= IDENTITY_TOL]
    span = f"{reg[0]['scale']:g} to {reg[-1]['scale']:g}"
    errs = ", ".join(f"{r['trunc_half']:.2g} at {r['scale']:g}" for r in reg)
    text = (
        f"in the meaningful regime, scales {span} of the grid ({where}), paths of length <= {L // 2} of "
        f"{L} leave a residual error of {errs}"
    )
    if len(holds) == len(reg):
        return "supported", f"At random initialisation, {text}: at most 10% at every scale."
    if not holds:
        return "refuted", f"At random initialisation, {text}: above 10% at every scale."
    return "inconclusive", f"At random initialisation, {text}: at most 10% only at scales {_fmt(holds)}."


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


def judge_c5(ch, evidence: dict) -> str:
    """Record C5 (:func:`verdict_c5`) from :func:`record_shares`' evidence."""
    v, reason = verdict_c5(evidence)
    ch.glue("c5_reason", reason)
    return ch.verdict(
        "C5",
        v,
        claim="SANs with skips behave like ensembles of shallow paths (at random initialisation, in the "
        "regime of weight scales where the question is meaningful)",
        rule=RULE_C5,
        evidence=evidence | {"reason": reason},
    )


def judge_d1(ch, recon: list[dict], worst: dict, big: dict) -> str:
    """Record D1 (:func:`verdict_d1`): the identity holds to round-off in every configuration and at
    scale."""
    evidence = {
        "configs": len(recon),
        "err_f64": worst["float64"],
        "err_f32": worst["float32"],
        "big_err_f64": big["err_float64"],
    }
    v, reason = verdict_d1(evidence)
    ch.glue("d1_reason", reason)
    return ch.verdict(
        "D1",
        v,
        claim="the SAN output is exactly the sum over paths plus 1b^T",
        rule=RULE_D1,
        evidence=evidence | {"reason": reason},
    )
