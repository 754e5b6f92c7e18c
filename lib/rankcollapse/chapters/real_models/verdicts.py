"""`real-models`, the verdicts: which models are judged (a checkpoint trained here that did not learn is left
out), each claim's rule text (``RULE_*``), its evidence (``evidence_*``), its decision (``verdict_*``), the
previous Q2 rules shown beside it (``old_verdict_q2``, ``pretrained_only_verdict_q2``), ``VERDICTS``, the
smoke notes, and ``judge_*``, which record each verdict and glue its counts for the prose.
"""

from __future__ import annotations

import numpy as np

from .experiments import COLLAPSED

# -- which models are judged: the checkpoints trained here that learned ------------------------------------
LEARNED_MARGIN = 0.1  # nats per predicted byte below the unigram loss: "learned more than byte frequencies"


def learned(r: dict) -> bool:
    """A checkpoint trained here learned more than byte frequencies: held-out loss at least
    :data:`LEARNED_MARGIN` below the unigram loss."""
    return r["unigram_loss"] - r["heldout_loss"] >= LEARNED_MARGIN


def split_learned(summ: dict, trained: dict) -> tuple[dict, list[str]]:
    """The models the verdicts are decided on, and the keys left out: a checkpoint trained here that did not
    learn more than byte frequencies (:func:`learned`) sits on the unigram plateau, where every token is
    predicted alike; it is not a trained model in the paper's sense, so the verdicts leave it out and the
    page shows the rules on it apart (:func:`table_verdicts_by_state`). Marks every summary with
    ``_learned`` (True for random init and pretrained), which the figure and the tables read."""
    for s in summ.values():
        s["_learned"] = s["_state"] != "trained" or learned(trained[(s["_arch"], s["_seed"])])
    out = [k for k, s in summ.items() if not s["_learned"]]
    return {k: s for k, s in summ.items() if s["_learned"]}, out


def _unlearned(summ: dict) -> list[str]:
    """The keys :func:`split_learned` marked as not learned (none before it ran)."""
    return [k for k, s in summ.items() if not s.get("_learned", True)]


# -- verdict rules: verdict_<id>(evidence) -> (verdict, reason); evidence_<id> builds the evidence --------
RULE_C1 = (
    f"in every model the SAN variant's mean r(X_l) falls below {COLLAPSED:g} within the model's depth and "
    "ends below 1e-3 r(X_0): supported; never below it in some model: refuted; otherwise inconclusive (the "
    "cubic rate itself is tested in the collapse chapter)"
)
RULE_C2 = (
    f"SAN+skip and transformer keep mean r(X_l) >= {COLLAPSED:g} at every layer in every model: supported; "
    "in no model: refuted; otherwise inconclusive"
)
RULE_C3 = (
    f"first layer with mean r < {COLLAPSED:g} is at least one layer later with the MLP than without, in "
    "every model: supported; never later in any model: refuted; otherwise inconclusive"
)
RULE_Q2 = (
    "gamma a priori, from the attention entries of the forward pass and the layer's input (core.bounds."
    "attention_gamma; not fitted to the output), per head, layer and sequence; on every trained checkpoint "
    "(those trained here, per architecture and seed, and any pretrained checkpoint loaded): every value of "
    "4 gamma_h beta_h / sqrt(d_qk) < 1: supported; fewer than half below 1 on some checkpoint: refuted; "
    "otherwise inconclusive; 'not run' without a trained checkpoint. (Until #16 gamma was fitted as the "
    "smallest value making the inequality hold on the observed output, which holds by construction; until "
    "#19 the rule read the pretrained checkpoint alone. Both previous verdicts on this run are recorded "
    "beside, as old_rule_verdict and pretrained_only_verdict.)"
)


def evidence_c1(summ: dict) -> dict:
    """Per model: the SAN variant's first collapsed layer (-1: never), depth, r(X_0) and r(X_L)."""
    return {
        k: {
            "collapse_layer": s["SAN"]["collapse_layer"],
            "L": s["SAN"]["L"],
            "r0": s["SAN"]["r0"],
            "r_final": s["SAN"]["r_final"],
        }
        for k, s in summ.items()
    }


def verdict_c1(ev: dict) -> tuple[str, str]:
    """Pure SAN (skip and MLP removed) reaches mean r < COLLAPSED within the model's depth and ends more than
    three orders of magnitude below its start (r_L < 1e-3 r_0), in every model."""
    ok = [k for k, e in ev.items() if e["collapse_layer"] >= 0 and e["r_final"] < 1e-3 * e["r0"]]
    never = [k for k, e in ev.items() if e["collapse_layer"] < 0]
    v = "supported" if ev and len(ok) == len(ev) else "refuted" if never else "inconclusive"
    why = f"{len(ok)} of {len(ev)} models' SAN variant collapsed by the rule" + (
        f"; never collapsed: {', '.join(never)}" if never else ""
    )
    return v, why


def evidence_c2(summ: dict) -> dict:
    """Per model: the smallest mean r over layers of the two variants that keep the attention skip."""
    return {
        k: {"SAN+skip_min_r": s["SAN+skip"]["min_r"], "transformer_min_r": s["transformer"]["min_r"]}
        for k, s in summ.items()
    }


def verdict_c2(ev: dict) -> tuple[str, str]:
    """Both variants with the attention skip (SAN+skip, transformer) never reach mean r < COLLAPSED."""
    kept = [k for k, e in ev.items() if min(e.values()) >= COLLAPSED]
    v = "supported" if ev and len(kept) == len(ev) else "refuted" if not kept else "inconclusive"
    lo = min((min(e.values()) for e in ev.values()), default=float("nan"))
    return (
        v,
        f"both skip variants kept mean r >= {COLLAPSED:g} in {len(kept)} of {len(ev)} models "
        f"(lowest {lo:.3g})",
    )


def evidence_c3(summ: dict) -> dict:
    """Per model: first collapsed layer of SAN and SAN+MLP (L+1 if never) and the MLP's delay."""
    ev = {}
    for k, s in summ.items():
        a, b = s["SAN"]["collapse_layer"], s["SAN+MLP"]["collapse_layer"]
        a = a if a >= 0 else s["SAN"]["L"] + 1
        b = b if b >= 0 else s["SAN+MLP"]["L"] + 1
        ev[k] = {"SAN_collapse_layer": a, "SAN+MLP_collapse_layer": b, "delay": b - a}
    return ev


def verdict_c3(ev: dict) -> tuple[str, str]:
    """MLP slows collapse if SAN+MLP collapses later than SAN (or not at all): first collapsed layers."""
    d = [e["delay"] for e in ev.values()]
    v = (
        "supported"
        if d and all(x >= 1 for x in d)
        else "refuted"
        if all(x <= 0 for x in d)
        else "inconclusive"
    )
    return v, f"the MLP delayed the collapse by >= 1 layer in {sum(x >= 1 for x in d)} of {len(d)} models"


def _q2_counts(cond: np.ndarray) -> dict:
    return {
        "frac_heads_holding": float((cond < 1).mean()),
        "max": float(cond.max()),
        "median": float(np.median(cond)),
    }


def evidence_q2(qs: dict) -> dict:
    """Per trained checkpoint (state ``trained``: trained here; ``pretrained``: loaded): the share of (layer,
    head, sequence) with 4 gamma_h beta_h / sqrt(d_qk) < 1 (a-priori gamma), its largest and median value,
    the scale-aware factor's share below 1, and the same condition with the old fitted gamma; per random-init
    model the same shares (the control: a condition every random network meets does not single out trained
    ones)."""
    ev = {"trained": {}, "init": {}}
    for k, q in qs.items():
        e = _q2_counts(q["cond_head"]) | {
            "state": q["state"],
            "frac_scaled_holding": float((q["scaled"] < 1).mean()),
            "scaled_median": float(np.median(q["scaled"])),
            "frac_holding_fitted_gamma": float((q["cond_head_fitted"] < 1).mean()),
        }
        ev["init" if q["state"] == "init" else "trained"][k] = e
    return ev


def _q2_rule(fr: list[float]) -> str:
    if not fr:
        return "not run"
    return "supported" if min(fr) == 1.0 else "refuted" if min(fr) < 0.5 else "inconclusive"


def verdict_q2(ev: dict) -> tuple[str, str]:
    """On every trained checkpoint: every head of every layer satisfies 4 gamma_h beta_h < sqrt(d_qk),
    gamma a priori (:data:`RULE_Q2`)."""
    pre, ini = ev.get("trained", {}), ev.get("init", {})
    v = _q2_rule([e["frac_heads_holding"] for e in pre.values()])
    if v == "not run":
        return v, "no trained checkpoint"
    worst = max(e["max"] for e in pre.values())
    scaled = min(e["frac_scaled_holding"] for e in pre.values())
    ctrl = min((e["frac_heads_holding"] for e in ini.values()), default=None)
    share = min(e["frac_heads_holding"] for e in pre.values())
    why = (
        f"on {len(pre)} trained checkpoint(s) the smallest share of (layer, head, sequence) satisfying it "
        f"is {share:.3f}, the largest value {worst:.2g}; the scale-aware form f ||res X||^2 < 1, which the "
        f"depth bound needs, holds for a share {scaled:.3f} at least"
    )
    if ctrl is not None:
        why += f"; random-init control: share {ctrl:.3f} satisfy the condition"
    return v, why


def old_verdict_q2(ev: dict) -> str:
    """The rule before #16 (same thresholds, gamma fitted to the observed output), on this run's trained
    checkpoints."""
    return _q2_rule([e["frac_holding_fitted_gamma"] for e in ev.get("trained", {}).values()])


def pretrained_only_verdict_q2(ev: dict) -> str:
    """The rule before #19 (a-priori gamma, the same thresholds) on the loaded pretrained checkpoint(s)
    alone, without those trained here."""
    return _q2_rule(
        [e["frac_heads_holding"] for e in ev.get("trained", {}).values() if e.get("state") == "pretrained"]
    )


VERDICTS = {"C1": verdict_c1, "C2": verdict_c2, "C3": verdict_c3, "Q2": verdict_q2}
# why a smoke verdict differs from the full one (checked by tests/test_records.py against the records)
SMOKE_VERDICT_NOTES: dict[str, str] = {
    "C1": (
        "the smoke checkpoints trained here have 4 layers: the trained XLNet's pure SAN falls below 1e-2 "
        "only at its last layer and ends less than three orders of magnitude below its start, so the rule "
        "cannot call it collapsed; at full (6 layers) every model's SAN ends more than three orders below "
        "its start"
    ),
}


# -- verdicts: record, and glue for the prose how many models show what ---------------------------------
def _judge(ch, cid: str, claim: str, rule: str, ev: dict) -> str:
    v, why = VERDICTS[cid](ev)
    return ch.verdict(cid, v, claim=claim, rule=rule, evidence=ev | {"reason": why})


def judge_c1(ch, summ: dict) -> str:
    """Verdict C1 (:func:`verdict_c1`); glue how many models' SAN variant collapsed by the rule."""
    e1 = evidence_c1(summ)
    ch.glue(
        "c1_collapsed", sum(e["collapse_layer"] >= 0 and e["r_final"] < 1e-3 * e["r0"] for e in e1.values())
    )
    claim = "pure SANs lose rank fast with depth (real architectures, skip and MLP removed by surgery)"
    return _judge(ch, "C1", claim, RULE_C1, e1)


def judge_c2(ch, summ: dict) -> str:
    """Verdict C2 (:func:`verdict_c2`); glue in how many models both variants with the attention skip kept
    their residual."""
    e2 = evidence_c2(summ)
    ch.glue("c2_kept", sum(min(e.values()) >= COLLAPSED for e in e2.values()))
    return _judge(ch, "C2", "skip connections prevent the collapse (real architectures)", RULE_C2, e2)


def judge_c3(ch, summ: dict) -> str:
    """Verdict C3 (:func:`verdict_c3`); glue in how many models the MLP delayed the collapse by at least one
    layer."""
    e3 = evidence_c3(summ)
    ch.glue("c3_delayed", sum(e["delay"] >= 1 for e in e3.values()))
    return _judge(ch, "C3", "MLPs slow the collapse (real architectures: SAN+MLP against SAN)", RULE_C3, e3)


def judge_q2(ch, qs: dict) -> str:
    """Verdict Q2 (:func:`verdict_q2`); glue whether, on the trained checkpoints, the condition and its
    scale-aware form hold "everywhere" or "not everywhere", and the previous rules' verdicts on the same
    data."""
    eq = evidence_q2(qs)
    pre = [q for q in qs.values() if q["state"] != "init"]
    if pre:
        ch.glue("q2_where", "everywhere" if all(q["cond_head"].max() < 1 for q in pre) else "not everywhere")
        ch.glue(
            "q2_scaled_where",
            "everywhere"
            if all(q["scaled"].max() < 1 for q in pre)
            else "nowhere"
            if all((q["scaled"] >= 1).all() for q in pre)
            else "not everywhere",
        )
    ch.glue("q2_old_verdict", old_verdict_q2(eq))
    ch.glue("q2_pretrained_only_verdict", pretrained_only_verdict_q2(eq))
    ch.glue("q2_n_trained", len(pre))
    v, why = verdict_q2(eq)
    return ch.verdict(
        "Q2",
        v,
        claim="trained models satisfy 4 gamma beta < sqrt(d_qk)",
        rule=RULE_Q2,
        evidence=eq
        | {
            "reason": why,
            "old_rule_verdict": old_verdict_q2(eq),
            "pretrained_only_verdict": pretrained_only_verdict_q2(eq),
        },
    )
