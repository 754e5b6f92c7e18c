"""What chapter `decomposition` records: the values of parts (a) to (d) with their tolerances and the glued
numbers of the prose (``record_*``), and part (b)'s table (:func:`table_architectures`).
"""

from __future__ import annotations

import numpy as np

from ...book import checks
from ...core import explosion
from .experiments import DTYPES
from .verdicts import (
    EXPLODE,
    IDENTITY_TOL,
    RULE_C5_OLD,
    _fmt,
    c5_evidence,
    c5_holds,
    c5_regime,
    old_verdict_c5,
)


def record_reconstruction(ch, recon: list[dict]) -> dict:
    """Part (a): the configurations checked and the worst errors of the path sum and of the length
    recursion, each held to its dtype's round-off. Returns the worst path-sum error by dtype (read by D1)."""
    worst = {dt: max(r["err_paths"] for r in recon if r["dtype"] == dt) for dt in DTYPES}
    worst_rec = {
        dt: max(max(r["err_recursion"], r["err_rec_vs_paths"]) for r in recon if r["dtype"] == dt)
        for dt in DTYPES
    }
    checks.exact(ch, "recon_configs", len(recon), why="the parameters set it (depths x heads x dtypes)")
    checks.exact(
        ch, "recon_max_paths", max(r["paths"] for r in recon), why="the parameters set it: (1 + heads)^depth"
    )
    ch.value(
        "recon_err_f64",
        worst["float64"],
        atol=1e-13,
        note="float64 round-off; any value below 1e-13 is exact",
    )
    ch.value(
        "recon_err_f32", worst["float32"], atol=5e-6, note="float32 round-off; any value below 5e-6 is exact"
    )
    ch.value(
        "recon_err_f64_in_eps",
        worst["float64"] / np.finfo(np.float64).eps,
        atol=500,
        note="error in units of float64 epsilon; round-off scale",
    )
    ch.value("recursion_err_f64", worst_rec["float64"], atol=1e-13, note="float64 round-off")
    ch.value("recursion_err_f32", worst_rec["float32"], atol=5e-6, note="float32 round-off")
    return worst


def record_architectures(ch, archs: list[dict]) -> None:
    """Part (b): the path-length statistics of BERT-Base and GPT-3 (exact combinatorics)."""
    bert = next(a for a in archs if a["name"].startswith("BERT-Base"))
    ch.value("bert_mean_length", bert["mean_length"], rtol=1e-12, note="exact combinatorics")
    ch.value("bert_share_half", bert["share_half_or_shorter"], rtol=1e-9, note="exact combinatorics")
    ch.value("bert_share_len0", bert["share_len0"], rtol=1e-9, note="exact combinatorics")
    ch.value(
        "gpt3_share_half",
        next(a for a in archs if a["name"] == "GPT-3")["share_half_or_shorter"],
        rtol=1e-9,
        note="exact combinatorics",
    )
    ch.value("arch_mean_lengths", {a["name"]: a["mean_length"] for a in archs}, glue=False)


def table_architectures(archs: list[dict]) -> str:
    """Part (b)'s table, as Markdown."""
    head = (
        "| architecture | H | L | paths $(H+1)^L$ | mean length | share with length ≤ L/2 |\n"
        "|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(
        f"| {a['name']} | {a['H']} | {a['L']} | {float(a['H'] + 1) ** a['L']:.2e} | "
        f"{a['mean_length']:.2f} | {a['share_half_or_shorter']:.2e} |"
        for a in archs
    )


def record_recursion(ch, big: dict, p) -> None:
    """Part (c): the exact recursion at scale, held to round-off; its timing is glued, not checked."""
    ch.value("big_paths", float(big["paths"]), rtol=1e-12, note="exact count (H+1)^L")
    ch.value("big_err_f64", big["err_float64"], atol=1e-12, note="float64 round-off")
    ch.value("big_err_f32", big["err_float32"], atol=2e-5, note="float32 round-off")
    ch.glue("big_recursion_in_forwards", big["recursion_in_forwards"])
    ch.glue("big_recursion_s", big["recursion_s"])
    for name, v in [
        ("big_L", p.big_layers),
        ("big_H", p.big_heads),
        ("big_n", p.big_tokens),
        ("big_dm", p.big_d),
    ]:
        ch.glue(name, v)


def record_shares(ch, shares: list[dict], p) -> dict:
    """Part (d): k90, the truncation error and the output's growth at each weight scale, the regime where
    C5 is asked (its boundaries on the grid), and the old rule's verdict beside it. Returns C5's
    evidence."""
    for r in shares:
        tag = f"{r['scale']:g}".replace(".", "p")
        checks.count(
            ch,
            f"k90_scale{tag}",
            r["k90"],
            of=p.big_layers,
            note="path lengths that carry 90% of the output; moves where a share sits at the line",
        )
        ch.value(f"trunc_err_scale{tag}", r["trunc_err"], rtol=1e-6, atol=1e-12, note="float64 norms")
    ch.value(
        "growth_by_scale",
        {f"{r['scale']:g}": r["growth"] for r in shares},
        rtol=1e-6,
        note="float64; ||Y||_F / ||X||_F, mean over seeds",
    )
    ev = c5_evidence(shares, p.big_layers)
    reg = c5_regime(ev["scales"])
    ch.value(
        "c5_regime",
        [reg[0]["scale"], reg[-1]["scale"]] if reg else None,
        note="smallest and largest grid scale in the meaningful regime (None: empty)",
    )
    checks.count(ch, "c5_regime_count", len(reg), of=len(ev["scales"]), note="grid scales in the regime")
    ch.glue("c5_regime_md", _fmt([r["scale"] for r in reg]))
    ch.glue("c5_identity_md", _fmt([r["scale"] for r in ev["scales"] if r["trunc0"] <= IDENTITY_TOL]))
    ch.glue(
        "c5_explode_md",
        _fmt([r["scale"] for r in ev["scales"] if explosion.exploded(r["growth"], r.get("layers"))]),
    )
    ch.glue("c5_holds_md", _fmt([r["scale"] for r in reg if c5_holds(r)]))
    checks.count(
        ch,
        "c5_exploded_count",
        sum(explosion.exploded(r["growth"], r.get("layers")) for r in ev["scales"]),
        of=len(ev["scales"]),
        note="grid scales whose forward pass exploded (growth > 10): in the regime, counted as not holding",
    )
    ch.glue("c5_half", p.big_layers // 2)
    ch.glue("identity_tol", IDENTITY_TOL)
    ch.glue("explode", EXPLODE)
    ref = min(shares, key=lambda r: abs(r["scale"] - 1.0))
    checks.count(ch, "k90_ref", ref["k90"], of=p.big_layers, note="path lengths for 90% at scale 1")
    ch.glue("ref_scale", ref["scale"])
    ch.glue("k90_list", ", ".join(f"{r['k90']} (scale {r['scale']:g})" for r in shares))
    old = old_verdict_c5([r["k90"] for r in shares], p.big_layers)
    ch.value("c5_old_rule_verdict", old, note="the verdict the old rule (every scale of the grid) gives")
    ch.glue("c5_old_rule", RULE_C5_OLD)
    return ev
