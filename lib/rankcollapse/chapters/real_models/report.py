"""`real-models`, what the page records, glues and tabulates: the checkpoints trained here, the text, the
curves of Figure 2, BERT's numbers, the models left out of the verdicts, the per-weights verdict table and
the Q2 summary (``record_*``, ``table_*``, ``glue_*``).
"""

from __future__ import annotations

import math

import numpy as np

from ...book import checks
from ...hf import surgery as sg
from .experiments import ARCH_NAMES, COLLAPSED
from .verdicts import LEARNED_MARGIN, VERDICTS, _unlearned, evidence_c1, evidence_c2, evidence_c3, learned

ARCH_ORDER = ("bert", "albert", "xlnet")
STATE_NAMES = {"init": "random init", "trained": "trained here", "pretrained": "pretrained checkpoint"}


# -- what the page records and glues: the checkpoints trained here ---------------------------------------
def record_training(ch, trained: dict, p) -> None:
    """Record each trained checkpoint's held-out loss and its unigram baseline (nats per predicted byte);
    glue the recipe, how many learned (held-out loss at least :data:`LEARNED_MARGIN` below unigram) and the
    largest training CPU time."""
    for (arch, seed), r in sorted(trained.items()):
        ch.value(
            f"heldout_loss_{arch}_s{seed}",
            r["heldout_loss"],
            rtol=1e-3,
            note="held-out loss of the objective after training (float32 training: kernel-dependent)",
        )
        ch.value(
            f"unigram_loss_{arch}_s{seed}",
            r["unigram_loss"],
            rtol=1e-9,
            note="byte-frequency baseline on the same predicted bytes (float64, no training)",
        )
    n_ok = sum(learned(r) for r in trained.values())
    ch.glue("tr_n", len(trained))
    ch.glue("tr_learned", n_ok)
    ch.glue("tr_margin", LEARNED_MARGIN)
    ch.glue("tr_seeds", len(p.train_seeds))
    ch.glue("tr_layers", p.train_layers)
    ch.glue("tr_hidden", p.train_hidden)
    ch.glue("tr_heads", p.train_heads)
    ch.glue("tr_steps", p.train_steps)
    ch.glue("tr_batch", p.train_batch)
    ch.glue("tr_lr", p.train_lr)
    ch.glue("tr_ctx", p.n_tokens)
    ch.glue("tr_cpu_max", max((r["cpu_seconds"] for r in trained.values()), default=0.0))
    per_arch = {}
    for (arch, _), r in trained.items():
        per_arch[arch] = per_arch.get(arch, 0.0) + r["cpu_seconds"]
    ch.glue("tr_cpu_arch_max", max(per_arch.values(), default=0.0) / 60)


def table_training(trained: dict) -> str:
    """Markdown table: per checkpoint trained here (architecture and seed), the held-out loss against the
    unigram baseline, the last training loss and the training time."""
    rows = [
        f"| {ARCH_NAMES[arch]}, seed {seed} | {r['heldout_loss']:.3f} | {r['unigram_loss']:.3f} | "
        f"{r['unigram_loss'] - r['heldout_loss']:.3f} | {r['train_loss_last']:.3f} | "
        f"{r['cpu_seconds']:.0f} | {'yes' if learned(r) else 'no'} |"
        for (arch, seed), r in sorted(trained.items(), key=lambda kv: (ARCH_ORDER.index(kv[0][0]), kv[0][1]))
    ]
    return (
        "| checkpoint | held-out loss | unigram loss | below unigram | last training loss | "
        f"training CPU s | learned (≥ {LEARNED_MARGIN:g} below unigram) |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows)
    )


def table_verdicts_by_state(summ: dict) -> str:
    """Markdown table: the rules of C1, C2 and C3 applied to the models of one kind of weights at a time
    (random init, trained here, pretrained), so a reader sees where trained and random weights differ, and,
    in a last row, to the checkpoints trained here that did not learn (as marked by :func:`mark_learned`;
    they are counted in their state's row and in the ledger's verdict too). The ledger's verdict is the rule
    over every model together."""
    unlearned = _unlearned(summ)
    rows = []
    groups = {
        name: {k: s for k, s in summ.items() if s["_state"] == state} for state, name in STATE_NAMES.items()
    }
    groups["trained here, did not learn (counted above too)"] = {k: summ[k] for k in unlearned}
    for name, sub in groups.items():
        if not sub:
            continue
        cells = []
        for cid, evf in (("C1", evidence_c1), ("C2", evidence_c2), ("C3", evidence_c3)):
            v, why = VERDICTS[cid](evf(sub))
            cells.append(f"{v} ({why})")
        rows.append(f"| {name} | {len(sub)} | " + " | ".join(cells) + " |")
    return "| weights | models | C1 | C2 | C3 |\n|---|---|---|---|---|\n" + "\n".join(rows)


def glue_unlearned(ch, summ: dict) -> None:
    """Glue ``unl_sentence`` (Markdown): over the checkpoints trained here that did not learn, whether the
    two variants that keep the attention skip lost their residual (lowest mean r below :data:`COLLAPSED`),
    the unigram plateau seen as a collapse, or that every checkpoint learned; and how many models are
    judged (``n_judged``: every one) and how many of them did not learn (``n_unlearned``), as marked by
    :func:`mark_learned`."""
    unlearned = _unlearned(summ)
    ch.glue("n_judged", len(summ))
    ch.glue("n_unlearned", len(unlearned))
    if not unlearned:
        ch.glue("unl_sentence", "Every checkpoint trained in this build learned.")
        return
    lo = min(min(summ[k]["SAN+skip"]["min_r"], summ[k]["transformer"]["min_r"]) for k in unlearned)
    lost = lo < COLLAPSED
    ch.glue(
        "unl_sentence",
        f"Those checkpoints {'lost' if lost else 'kept'} their residual *with* the attention skip in place "
        f"(the lowest mean $r$ of the two skip variants is {lo:.2g}, against the $10^{{-2}}$ of ≈0)"
        + (
            ": a trained network whose tokens all look alike, the state Part III calls a collapse, there "
            "produced by weakening the skip, here by training that never left the unigram loss. That is why "
            "they count: sitting at the unigram loss is what a collapsed network does, so leaving them out "
            "would select on the outcome."
            if lost
            else "."
        ),
    )


def glue_trained(ch, summ: dict) -> None:
    """Glue, over the checkpoints trained here in ``summ`` (every one, learned or not), the
    layer where the pure SAN and SAN+MLP first reach ≈0 (smallest and largest over architectures and seeds),
    and the ends of the two skip variants (range)."""
    tr = [s for s in summ.values() if s["_state"] == "trained"]
    if not tr:
        return
    L = lambda s, v: s[v]["collapse_layer"] if s[v]["collapse_layer"] >= 0 else s[v]["L"] + 1  # noqa: E731
    for v, tag in (("SAN", "san"), ("SAN+MLP", "mlp")):
        ch.glue(f"tr_{tag}_cl_lo", min(L(s, v) for s in tr))
        ch.glue(f"tr_{tag}_cl_hi", max(L(s, v) for s in tr))
    for v, tag in (("SAN+skip", "skip"), ("transformer", "tr")):
        ch.glue(f"tr_{tag}_lo", min(s[v]["r_final"] for s in tr))
        ch.glue(f"tr_{tag}_hi", max(s[v]["r_final"] for s in tr))
    ch.glue("tr_L", tr[0]["SAN"]["L"])
    ch.glue("tr_r0_lo", min(s["SAN"]["r0"] for s in tr))
    ch.glue("tr_r0_hi", max(s["SAN"]["r0"] for s in tr))


# -- what the page records and glues: Figure 2 ------------------------------------------------------------
def record_text(ch, info: dict, p) -> None:
    """Record the hash of the text used; glue its short hash (as code), length and Python version, and the
    number and length of the windows, for the prose."""
    ch.value(
        "text_sha256", info["sha256"], note="hash of the text used (pydoc_data/topics.py, sorted topics)"
    )
    ch.glue("text_sha", f"`{info['sha256'][:16]}…`")
    ch.glue("text_chars", info["chars"])
    ch.glue("text_python", info["python"])
    ch.glue("n_seq", p.n_seq)
    ch.glue("n_tokens", p.n_tokens)


def record_curves(ch, summ: dict) -> None:
    """Record per model r(X_0), and per variant r(X_L) and the first collapsed layer, then every mean
    curve; glue the number of models for the verdicts' prose."""
    for key, s in summ.items():
        ch.value(
            f"r0_{key}", s["SAN"]["r0"], rtol=1e-3, atol=1e-5, note="float32 forward; same for every variant"
        )
        for v in sg.VARIANTS:
            tag = f"{key}_{v.replace('+', '_').lower()}"
            ch.value(
                f"rL_{tag}",
                s[v]["r_final"],
                rtol=2e-3,
                atol=1e-4,
                note="float32 forward through L layers; collapsed values sit at round-off, so atol 1e-4",
            )
            checks.against(
                ch,
                f"collapse_layer_{tag}",
                s[v]["collapse_layer"],
                limits=(-0.5,),  # C1 reads "collapsed within the depth" (>= 0) against "never" (-1)
                atol=1,
                note="first layer with mean r < 1e-2 (-1: never); integer, may move by one on another "
                "machine, never across 'never'",
            )
    ch.value(
        "curves",
        {k: {v: [round(x, 6) for x in s[v]["mean"]] for v in sg.VARIANTS} for k, s in summ.items()},
        rtol=2e-3,
        atol=1e-4,
        glue=False,
        note="mean r(X_l) per model and variant (float32 forwards)",
    )
    ch.glue("n_models", len(summ))


def table_curves(summ: dict, tokenizers: dict) -> str:
    """Markdown tables, two so that each fits the page's column: per model its state, tokenizer, depth and
    r(X_0); then r(X_L) of each variant and the layer where SAN and SAN+MLP reach ≈0."""
    first, second = [], []
    for key, s in summ.items():
        cl = lambda v: str(s[v]["collapse_layer"]) if s[v]["collapse_layer"] >= 0 else "never"  # noqa: E731
        first.append(
            f"| {s['_label']} | {s['_state']} | {tokenizers[key]} | {s['SAN']['L']} | {s['SAN']['r0']:.3f} |"
        )
        second.append(
            f"| {s['_label']} | "
            + " | ".join(f"{s[v]['r_final']:.2e}" for v in sg.VARIANTS)
            + f" | {cl('SAN')} | {cl('SAN+MLP')} |"
        )
    return (
        "*The models:*\n\n| model | state | tokenizer | L | r(X₀) |\n|---|---|---|---|---|\n"
        + "\n".join(first)
        + "\n\n*Their last hidden state, r(X_L), per variant, and where r reaches ≈0:*\n\n"
        "| model | SAN | SAN+MLP | SAN+skip | transformer | SAN ≈0 at layer | SAN+MLP ≈0 at layer |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(second)
    )


def glue_bert(ch, summ: dict) -> None:
    """Glue BERT's numbers for the prose (random init and pretrained, where run), and how the pretrained
    SAN's collapse layer compares with the random one's ("later than", "at the same layer as", "earlier
    than")."""
    bi, bp = summ.get("bert_init"), summ.get("bert_pretrained")
    if bi:
        ch.glue("bi_r0", bi["SAN"]["r0"])
        ch.glue("bi_skip", bi["SAN+skip"]["r_final"])
        ch.glue("bi_tr", bi["transformer"]["r_final"])
        ch.glue("bi_san_cl", bi["SAN"]["collapse_layer"])
        ch.glue("bi_san", bi["SAN"]["r_final"])
        ch.glue("bi_L", bi["SAN"]["L"])
        ch.glue("bi_mlp_cl", bi["SAN+MLP"]["collapse_layer"])
    if bp:
        ch.glue("bp_r0", bp["SAN"]["r0"])
        ch.glue("bp_skip", bp["SAN+skip"]["r_final"])
        ch.glue("bp_tr", bp["transformer"]["r_final"])
        ch.glue("bp_san_cl", bp["SAN"]["collapse_layer"])
        ch.glue("bp_mlp_cl", bp["SAN+MLP"]["collapse_layer"])
        ch.glue("bp_L", bp["SAN"]["L"])
    if bi and bp:
        a, b = bi["SAN"]["collapse_layer"], bp["SAN"]["collapse_layer"]
        ch.glue(
            "bp_vs_bi", "later than" if b > a else ("at the same layer as" if b == a else "earlier than")
        )


# -- what the page records and glues: Q2 ------------------------------------------------------------------
Q2_RECORDED = (
    "beta_median",
    "beta_max",
    "cond_head_median",
    "cond_head_max",
    "cond_head_frac_holds",
    "scaled_median",
    "scaled_max",
    "scaled_frac_holds",
    "res_in_median",
    "tightness_median",
    "cond_fitted_median",
    "gamma_layer_spread",
)


def record_q2(ch, q2: dict, q2_seq: int) -> None:
    """Record the Q2 summary of every model (:data:`Q2_RECORDED`); glue the number of sequences used."""
    ch.glue("q2_seq", q2_seq)
    for k, s in q2.items():
        ch.value(
            f"q2_{k}",
            {n: s[n] for n in Q2_RECORDED},
            rtol=5e-3,
            atol=1e-9,
            glue=False,
            note="float64 norms of float32 activations and weights",
        )


def table_q2(q2: dict, summ: dict) -> str:
    """Markdown tables, two so that each fits the page's column: per model, beta and the residual of the
    input; then the condition per head and the scale-aware factor per layer (median, max, share below 1)."""
    first = (
        "*β and the input's residual:*\n\n"
        "| model | state | $d_{qk}$ | median $\\beta_h$ | max $\\beta_h$ | "
        "median $\\|\\mathrm{res}X\\|_{1,\\infty}$ |\n"
        "|---|---|---|---|---|---|\n"
    ) + "\n".join(
        f"| {summ[k]['_label']} | {summ[k]['_state']} | {s['d_qk']} | {s['beta_median']:.3g} | "
        f"{s['beta_max']:.3g} | {s['res_in_median']:.3g} |"
        for k, s in q2.items()
    )
    second = (
        "*The condition per head and the scale-aware factor per layer:*\n\n"
        "| model | median $4\\gamma_h\\beta_h/\\sqrt{d_{qk}}$ | max | share $<1$ | "
        "median $\\times\\|\\mathrm{res}X\\|^2$ (layer) | max | share $<1$ |\n"
        "|---|---|---|---|---|---|---|\n"
    ) + "\n".join(
        f"| {summ[k]['_label']} | {s['cond_head_median']:.2e} | {s['cond_head_max']:.2e} | "
        f"{s['cond_head_frac_holds']:.3f} | {s['scaled_median']:.3g} | {s['scaled_max']:.3g} | "
        f"{s['scaled_frac_holds']:.3f} |"
        for k, s in q2.items()
    )
    return first + "\n\n" + second


def glue_q2(ch, q2: dict, summ: dict) -> None:
    """Glue the Q2 numbers for the prose: of the first pretrained model, beta, the condition and the
    scale-aware factor, with the answer as the condition is written ("yes"/"no": its largest value below
    one or not), how many orders of magnitude that largest value lies from one, whether every attention
    layer shrinks the residual of its input ("every"/"not every") and so whether the model sits inside
    the convergence region ("does"/"does not"); beta against the same architecture at init; of the random
    models, the median beta and the largest condition."""
    # the loaded checkpoint, else one trained here
    pre = [k for k in q2 if summ[k]["_state"] == "pretrained"]
    pre = pre or [k for k in q2 if summ[k]["_state"] == "trained"]
    ini = [k for k in q2 if summ[k]["_state"] == "init"]
    if pre:
        k = pre[0]
        ch.glue("q2p_beta", q2[k]["beta_median"])
        ch.glue("q2p_cond", q2[k]["cond_head_median"])
        ch.glue("q2p_condmax", q2[k]["cond_head_max"])
        ch.glue("q2p_frac", q2[k]["cond_head_frac_holds"])
        ch.glue("q2_answer", "yes" if q2[k]["cond_head_max"] < 1 else "no")
        ch.glue("q2p_decades", abs(log10(q2[k]["cond_head_max"])))
        ch.glue("q2p_res", q2[k]["res_in_median"])
        ch.glue("q2p_scaled", q2[k]["scaled_median"])
        ch.glue("q2p_scaledmax", q2[k]["scaled_max"])
        ch.glue("q2p_label", summ[k]["_label"])
        ch.glue(
            "q2p_scaled_all",
            "every" if q2[k]["scaled_max"] < 1 else "no" if q2[k]["scaled_frac_holds"] == 0 else "not every",
        )
        ch.glue("q2p_inside", "does" if q2[k]["scaled_max"] < 1 else "does not")
        ch.glue("q2p_tight", q2[k]["tightness_median"])
        ch.glue("q2p_tight_decades", -log10(q2[k]["tightness_median"]))
        ch.glue("q2p_fitted", q2[k]["cond_fitted_median"])
        ch.glue("q2p_gspread", q2[k]["gamma_layer_spread"])
        if ini:
            ki = next((x for x in ini if summ[x]["_arch"] == summ[k]["_arch"]), ini[0])
            ch.glue("q2_beta_ratio", q2[k]["beta_median"] / q2[ki]["beta_median"])
    if ini:
        ch.glue("q2i_beta", float(np.median([q2[k]["beta_median"] for k in ini])))
        ch.glue("q2i_cond", float(max(q2[k]["cond_head_max"] for k in ini)))
        smax = float(max(q2[k]["scaled_max"] for k in ini))
        ch.glue("q2i_scaledmax", smax)
        ch.glue("q2i_inside", "does" if smax < 1 else "does not")
        if pre:
            p_in, i_in = q2[pre[0]]["scaled_max"] < 1, smax < 1
            ch.glue(
                "q2_training_effect",
                "training moves the attention out of the region the theorem certifies, which the condition "
                "as written cannot see"
                if i_in and not p_in
                else "the certificate holds before and after training"
                if i_in and p_in
                else "the certificate fails at random initialisation too, so this measurement cannot say "
                "what training changes",
            )


def log10(x: float) -> float:
    return math.log10(x) if x > 0 else float("-inf")
