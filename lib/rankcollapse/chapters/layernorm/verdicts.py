"""Chapter `layernorm`, verdicts: the rules of C4 (LN plays no role in the collapse) and LN2 (LN is
precisely affine-rank-neutral) as text (``RULE_*``) and as pure decision functions (``verdict_*``, listed in
:data:`VERDICTS`), the chapter's former C4 rule (:func:`old_verdict_c4`) shown beside it, and ``judge_*``,
which build each claim's evidence from the experiments and record the verdict.
"""

from __future__ import annotations

from .experiments import affine_random_example, ln2_control, random_inputs_checked


def fmt_matrix(M) -> str:
    """A small matrix as ``[a b; c d]``."""
    return "[" + "; ".join(" ".join(f"{x:g}" for x in row) for row in M) + "]"


ROLE_MARGIN = 5  # layers: |delta| above this somewhere = LN plays a role
NONE_MARGIN = 3  # layers: |delta| at most this everywhere = no role
RULE_C4 = (
    "Depth of collapse of a run: the first layer l = 1..L (L = n_layers, the horizon) with r(X_l) < "
    "collapse_tol, with LN the smaller of r before and after the normalisation and the earlier depth over "
    "LN eps 1e-5 and 1e-3; L + 1 when none. delta = depth with LN - depth of the same weights on the same "
    "input without LN. Two regimes: random init (SAN.random at every weight scale, post- and pre-LN; "
    "delta per configuration = the median over seeds of the paired delta) and adversary (constructed and "
    "gradient-searched weights with every head on beta_h = attack_beta, no bias, post-LN; delta per "
    f"setting). A regime shows a role of LN if |delta| > {ROLE_MARGIN} somewhere, no role if |delta| <= "
    f"{NONE_MARGIN} everywhere, else it is undecided. Refuted if either regime shows a role; supported "
    "if both show none and the horizon lets a role show (L + 1 - the earliest depth observed > "
    f"{ROLE_MARGIN}); inconclusive otherwise."
)


RULE_LN2 = (
    "Among inputs on which LN is defined (every token with nonzero variance over features; eps = 0): "
    "refuted if some input has a different affine rank after LN with both ranks clearly determined (at "
    "least min_gap_decades between the singular values of res(X) counted as nonzero and as zero, before "
    "and after LN); supported if none does among at least min_tested inputs checked (the search and the "
    "random inputs); inconclusive otherwise (fewer inputs checked, or rank changes only where a rank is "
    "not clearly determined)."
)


def _regime(deltas: list[float]) -> str:
    if not deltas:
        return "not run"
    m = max(abs(x) for x in deltas)
    return "role" if m > ROLE_MARGIN else ("none" if m <= NONE_MARGIN else "undecided")


def old_verdict_c4(diffs: list[dict]) -> str:
    """The chapter's former C4 rule, applied to this run's random networks (for the page's comparison): per
    weight scale and placement the median depth with LN against without (not paired), rank preservation
    ``dA`` and the collapsed shares."""
    ok = all(
        abs(d["depth_ln"] - d["depth_plain"]) <= 3
        and abs(d["dA"]) <= 2.0
        and d["collapsed_ln"] >= d["collapsed_san"] - 0.5
        for d in diffs
    )
    stops = any(
        d["collapsed_ln"] < d["collapsed_san"] - 0.5 or d["depth_ln"] - d["depth_plain"] > 5 for d in diffs
    )
    return "refuted" if stops else ("supported" if ok else "inconclusive")


def verdict_c4(ev: dict) -> tuple[str, str]:
    """C4 from the per-regime depth differences; see :data:`RULE_C4`.

    ``ev``: ``horizon`` (L), ``random`` and ``attack`` (lists of dicts with ``delta``, ``depth_ln``,
    ``depth_plain`` and a ``label``), ``beta``."""
    L = ev["horizon"]
    parts = {}
    for name in ("random", "attack"):
        rows = ev[name]
        parts[name] = (_regime([r["delta"] for r in rows]), rows)
    depths = [
        r[k] for rows in (ev["random"], ev["attack"]) for r in rows for k in ("depth_ln", "depth_plain")
    ]
    reachable = bool(depths) and L + 1 - min(depths) > ROLE_MARGIN

    def describe(name):
        reg, rows = parts[name]
        where = (
            "at random init"
            if name == "random"
            else f"under the adversary (every head at a fixed budget beta_h = {ev['beta']:g}, "
            f"{ev.get('attack_weights', 'constructed or searched weights')}, no bias, post-LN)"
        )
        if reg == "not run":
            return f"{where} nothing was run"
        up = max(rows, key=lambda r: r["delta"])
        down = min(rows, key=lambda r: r["delta"])
        words = {"role": "LN plays a role", "none": "LN plays no role", "undecided": "undecided"}[reg]
        return (
            f"{where} {words}: delta from {down['delta']:+g} ({down['label']}: collapse at layer "
            f"{down['depth_ln']:g} with LN, {down['depth_plain']:g} without) to {up['delta']:+g} "
            f"({up['label']}: {up['depth_ln']:g} with LN, {up['depth_plain']:g} without; "
            f"{L + 1} = none within {L} layers)"
        )

    regs = {k: v[0] for k, v in parts.items()}
    text = describe("attack") + "; " + describe("random")
    if "role" in regs.values():
        if regs["random"] != "role":
            at_random = {"none": "where it plays none", "undecided": "where it is undecided"}
            text = (
                f"LN plays a role at a fixed beta budget with "
                f"{ev.get('attack_weights', 'constructed or searched weights')}, not at random "
                f"initialisation, {at_random.get(regs['random'], 'where nothing was run')}: " + text
            )
        return "refuted", text
    if regs["random"] == "none" and regs["attack"] == "none" and reachable:
        return "supported", text
    if not reachable:
        text += f"; the horizon of {L} layers cannot show a change of more than {ROLE_MARGIN} layers"
    return "inconclusive", text


def c4_control_evidence(ev: dict) -> dict:
    """C4's control evidence: :func:`verdict_c4`'s evidence ``ev`` with the adversary's settings replaced
    by the search's random starting points on the same budget (before any step of the search), each run
    with and without LN as the searched weights are; the random-init regime as it is."""
    starts = [
        {
            "label": f"{r['label']}, before the search",
            "delta": r["start_delta"],
            "depth_ln": r["start_depth_ln"],
            "depth_plain": r["start_depth_plain"],
        }
        for r in ev["attack"]
        if "start_delta" in r
    ]
    return {
        "horizon": ev["horizon"],
        "beta": ev["beta"],
        "random": ev["random"],
        "attack": starts,
        "attack_weights": "random weights on the budget (the search's starting points)",
    }


def judge_c4(ch, diffs: list[dict], attack_rows: list[dict], at: dict, rw: dict) -> str:
    """Verdict C4 (LN plays no role) from the random-init differences and the adversary's settings; the
    paper's rewrite errors go into the evidence."""
    evidence = {
        "horizon": at["horizon"],
        "beta": at["beta"],
        "random": [
            {
                "label": f"weight scale {d['ws']:g}, {d['ln']}-LN",
                **{k: d[k] for k in ("delta", "depth_ln", "depth_plain")},
            }
            for d in diffs
        ],
        "attack": attack_rows,
        "rewrite_err_paper": rw["err_paper"],
        "rewrite_err_correct": rw["err_correct"],
    }
    v, reason = verdict_c4(evidence)
    cev = c4_control_evidence(evidence)
    cv, creason = verdict_c4(cev)
    ch.glue("c4_reason", reason)
    ch.glue("c4_control_verdict", cv)
    ch.glue("c4_control_reason", creason)
    evidence["control"] = {
        "on": "the adversary's random starting points on the same beta budget, before the search (with "
        "the same random-init networks)",
        "verdict": cv,
        "reason": creason,
        "evidence": cev,
    }
    ch.glue("c4_old_verdict", old_verdict_c4(diffs))
    ch.glue("role_margin", ROLE_MARGIN)
    ch.glue("none_margin", NONE_MARGIN)
    return ch.verdict(
        "C4",
        v,
        claim="layer normalisation plays no role in the rank collapse of SANs (at random init and under a "
        "norm-bounded adversary)",
        rule=RULE_C4,
        evidence=evidence | {"reason": reason},
    )


LN2_MIN_TESTED = 100
LN2_MIN_GAP = 6.0


def verdict_ln2(ev: dict) -> tuple[str, str]:
    """LN2 from the inputs checked and the affine-rank changes found; see :data:`RULE_LN2`.

    ``ev``: ``tested`` (inputs on which LN is defined that were checked), ``counterexamples`` (dicts with
    ``source``, ``before``, ``after``, ``rank_gap_decades``), ``min_tested``, ``min_gap_decades``."""
    where = f" ({ev['where']})" if ev.get("where") else ""
    clear = [
        c
        for c in ev["counterexamples"]
        if c["before"] != c["after"] and c["rank_gap_decades"] >= ev["min_gap_decades"]
    ]
    if clear:
        c = clear[0]
        return "refuted", (
            f"{len(clear)} clear affine-rank changes among {ev['tested']} inputs checked, e.g. "
            f"{c['source']}: affine rank {c['before']} before LN, {c['after']} after "
            f"(rank gap {c['rank_gap_decades']:.1f} decades){where}"
        )
    if ev["tested"] >= ev["min_tested"] and not ev["counterexamples"]:
        return "supported", f"no affine-rank change among {ev['tested']} inputs checked{where}"
    return "inconclusive", (
        f"{ev['tested']} inputs checked (at least {ev['min_tested']} needed); "
        f"{len(ev['counterexamples'])} rank changes, none with a rank gap of {ev['min_gap_decades']:g} "
        f"decades{where}"
    )


LN2_KEYS = ("affine_rank_equal|no bias", "affine_rank_equal|bias")


def judge_ln2(ch, ce: dict, aff_many: dict, tested: dict, p) -> str:
    """Verdict LN2 (LN is precisely affine-rank-neutral) from the search's smallest counterexamples (with
    and without LN bias; ``tested``: the inputs each search checked), the random inputs of
    :func:`random_claims`, and one random input with more tokens than features."""
    tested_search = sum(tested[k] for k in LN2_KEYS)
    tested_random = random_inputs_checked(p.n_tokens, p.d_model, p.random_trials)
    rnd = affine_random_example(p.d_model, p.seed)
    cex = [
        {
            "source": f"search ({k.split('|')[1]}), {v['n']}x{v['d']} {fmt_matrix(v['X'])}",
            "before": v["before"]["affine_rank"],
            "after": v["after"]["affine_rank"],
            "rank_gap_decades": v["rank_gap_decades"],
        }
        for k in LN2_KEYS
        if (v := ce[k]) is not None
    ]
    if aff_many["affine_rank_equal"] < 1.0:
        cex.append(rnd)
    evidence = {
        "tested": int(tested_search + tested_random),
        "counterexamples": cex,
        "min_tested": LN2_MIN_TESTED,
        "min_gap_decades": LN2_MIN_GAP,
        "random_n_gt_d_preserved_share": aff_many["affine_rank_equal"],
        "where": f"LN with eps 0; integer inputs of the search (n + d <= {p.search_max_size}) and random "
        f"Gaussian inputs (n = {p.n_tokens}, d = {p.d_model} and the families of (b))",
    }
    v, reason = verdict_ln2(evidence)
    ctl = ln2_control(p.n_tokens, p.d_model, p.seed, LN2_MIN_TESTED, LN2_MIN_GAP)
    cv, creason = verdict_ln2(ctl)
    ch.glue("ln2_reason", reason)
    ch.glue("ln2_control_verdict", cv)
    ch.glue("ln2_control_reason", creason)
    ch.glue("ln2_control_n", ctl["n"])
    ch.glue("ln2_control_d", ctl["d"])
    evidence["control"] = {
        "on": f"{ctl['tested']} random Gaussian inputs with fewer tokens than features "
        f"(n = {ctl['n']} < d = {ctl['d']})",
        "verdict": cv,
        "reason": creason,
        "evidence": ctl,
    }
    ch.glue("ln2_min_tested", LN2_MIN_TESTED)
    ch.glue("ln2_min_gap", LN2_MIN_GAP)
    return ch.verdict(
        "LN2",
        v,
        claim="LN is precisely affine-rank-neutral: it preserves the affine rank of the token set exactly",
        rule=RULE_LN2,
        evidence=evidence | {"reason": reason},
    )


VERDICTS = {"C4": verdict_c4, "LN2": verdict_ln2}
