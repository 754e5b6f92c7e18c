"""Chapter `mlp`, report: what the page records (``record_*``: checked values and glued numbers of parts
(a) to (c)) and the Markdown table it shows (``table_*``).
"""

from __future__ import annotations

import numpy as np

from ...book import checks
from .experiments import FLOOR, slowing
from .verdicts import RULE_Q3, RULE_Q3_OLD


def record_lambda_check(ch, chk: dict) -> None:
    """Record the estimator check (:func:`lambda_check`): the power iteration's worst error against exact
    constants, the product of norms where it is exact, and both for the linear MLP; glue the product's slack
    (product over exact) on the linear MLP."""
    ch.value(
        "lam_check_power_err",
        chk["max_rel_err_power"],
        atol=1e-6,
        note="power iteration against exact constants; converges to ~1e-10 in float64",
    )
    ch.value(
        "lam_check_product_err",
        chk["max_rel_err_product_exact_cases"],
        atol=1e-12,
        note="product of norms is exact when W1 W2 has aligned singular vectors",
    )
    ch.value("lam_check_linear_exact", chk["linear_exact"], rtol=1e-9, note="float64 SVD")
    ch.value("lam_check_linear_product", chk["linear_product"], rtol=1e-9, note="float64 SVD")
    ch.glue("lam_check_slack", chk["linear_product"] / chk["linear_exact"])


def record_curves(ch, rows: list[dict], summ: list[dict], p) -> None:
    """Record part (a): lambda of the reference configuration (first weight scale, multiplier 1, or else the
    first with an MLP), its local constant as a share of it, and the share of SAN+MLP networks that end with
    r(X_L) < 1e-3; glue the reference multiplier and the number of networks."""
    ref = (
        next(r for r in summ if r["weight_scale"] == p.weight_scales[0] and r["mlp_scale"] == 1.0)
        if 1.0 in p.mlp_scales
        else next(r for r in summ if r["mlp_scale"] > 0)
    )
    ch.value("lambda_ref", ref["lambda"], rtol=1e-9, note="spectral norms of seeded float64 weights")
    ch.value(
        "lambda_local_over_upper",
        ref["lambda_local"] / ref["lambda"],
        rtol=1e-3,
        note="power iteration stops at relative change 1e-6",
    )
    ch.value(
        "collapsed_share_all",
        float(np.mean([r["r"][-1] < 1e-3 for r in rows if r["mlp_scale"] > 0])),
        atol=0.0,
        note="share of SAN+MLP networks with r(X_L) < 1e-3; exact count",
    )
    ch.glue("ref_scale", ref["mlp_scale"])
    ch.glue("n_networks", len(rows))


def record_rate(ch, rows: list[dict], summ: list[dict], p) -> dict:
    """Record part (b): per attention weight scale (``ws1``, ``ws2``, ... in the names) rank preservation
    without MLP and at the smallest and largest lambda, its rise to the peak, the rank correlation with
    lambda, the peak's multiplier and the layers to collapse; at the first weight scale the corollary's
    factor at the smallest and largest lambda, the certificate ``log10 sqrt(f) ||res X_0||`` there, how many
    lambda values it certifies (and how many the misstated ``f < 1`` would); and the largest ratio of the
    observed residual to the one-layer bound. Glue the first and last weight scales and lambda at the ends
    and the peak of the grid.
    Returns :func:`slowing` per weight scale, which the table and the C3 verdict read."""
    slow = {ws: slowing(summ, ws) for ws in p.weight_scales}
    for ws, s in slow.items():
        tag = f"{ws:g}".replace(".", "p")
        base = next(r for r in summ if r["weight_scale"] == ws and r["mlp_scale"] == 0)
        ch.value(
            f"A_san_ws{tag}",
            base["A"],
            atol=0.3,
            note="mean log10 r; round-off moves collapsed layers slightly",
        )
        ch.value(f"A_min_lambda_ws{tag}", s["A"][0], atol=0.3, note="as above")
        ch.value(f"A_max_lambda_ws{tag}", s["A"][-1], atol=0.3, note="as above")
        ch.value(f"A_rise_ws{tag}", s["rise"], atol=0.4, note="difference of two A values")
        ch.value(
            f"rho_all_ws{tag}", s["rho_all"], atol=0.15, note="rank correlation over the grid; one swap ~0.1"
        )
        ch.value(f"peak_scale_ws{tag}", s["peak_scale"], note="grid point of the largest A")
        ch.value(f"depth_min_lambda_ws{tag}", s["depth_min_lambda"], atol=1, note="median layer index")
        ch.value(f"depth_max_lambda_ws{tag}", s["depth_max_lambda"], atol=1, note="median layer index")
    ws0 = p.weight_scales[0]
    mlps0 = sorted(
        (r for r in summ if r["weight_scale"] == ws0 and r["mlp_scale"] > 0), key=lambda r: r["lambda"]
    )
    ch.value("factor1_min_lambda", mlps0[0]["factor1"], rtol=1e-6, note="float64 norms")
    ch.value("factor1_max_lambda", mlps0[-1]["factor1"], rtol=1e-6, note="float64 norms")
    ch.value("factor2_max_lambda", mlps0[-1]["factor2"], rtol=1e-3, note="layer-2 residuals; float64")
    ch.value(
        "bound_ratio1_max",
        max(r["bound_ratio1"] for r in summ if r["mlp_scale"] > 0 and r["bound_ratio1"] is not None),
        rtol=1e-6,
        note="observed res_out / (factor res_in^3) at layer 1; <= 1 means the inequality holds",
    )
    # the guarantee: sqrt(f) ||res X_0|| < 1, not f < 1 (||res X_0|| is far above 1 for Gaussian tokens)
    ch.value("res0", mlps0[0]["res0"], rtol=1e-9, note="||res X_0||_{1,inf} of seeded Gaussian tokens")
    ch.value("cert1_min_lambda", mlps0[0]["cert1"], atol=1e-6, note="log10 sqrt(f) res0; float64 norms")
    ch.value("cert1_max_lambda", mlps0[-1]["cert1"], atol=1e-6, note="log10 sqrt(f) res0; float64 norms")
    certified = [r for r in mlps0 if r["cert1"] is not None and r["cert1"] < 0]
    checks.count(
        ch,
        "n_lambda_certified",
        len(certified),
        of=len(mlps0),
        note="lambda values whose median sqrt(f) res0 < 1 at the first weight scale",
    )
    checks.count(
        ch,
        "n_lambda_factor_below_1",
        sum(r["factor1"] is not None and r["factor1"] < 1 for r in mlps0),
        of=len(mlps0),
        note="lambda values whose median factor is < 1 (the misstated condition)",
    )
    ch.value(
        "certified_share_all",
        float(np.mean([r["cert1"] is not None and r["cert1"] < 0 for r in rows if r["mlp_scale"] > 0])),
        atol=0.0,
        note="share of SAN+MLP networks (all weight scales) with sqrt(f) res0 < 1; exact count",
    )
    # the guarantee for the whole depth needs the largest factor over layers, not layer 1's
    certified_max = [r for r in mlps0 if r["cert_max"] is not None and r["cert_max"] < 0]
    checks.count(
        ch,
        "n_lambda_certified_max",
        len(certified_max),
        of=len(mlps0),
        note="lambda values whose median sqrt(f_max) res0 < 1 at the first weight scale, f_max the largest "
        "factor over layers (input r above 1e-5)",
    )
    ch.value(
        "cert_max_min_lambda",
        mlps0[0]["cert_max"],
        atol=0.02,
        note="log10 sqrt(f_max) res0, median; f_max over layers whose gamma is read above the round-off",
    )
    ch.value("cert_max_max_lambda", mlps0[-1]["cert_max"], atol=0.02, note="as above")
    ch.glue("n_lambda", len(mlps0))
    ch.glue(
        "lam_cert_max",
        f"{max(r['lambda'] for r in certified):.3g}" if certified else "no λ of the grid",
    )
    ch.glue("ws0", ws0)
    ch.glue("ws_last", p.weight_scales[-1])
    ch.glue("lam_min", mlps0[0]["lambda"])
    ch.glue("lam_max", mlps0[-1]["lambda"])
    ch.glue("lam_peak0", slow[ws0]["peak_lambda"])
    return slow


def table_slowing(summ: list[dict], slow: dict) -> str:
    """Part (b)'s tables, as Markdown, per attention weight scale, two so that each fits the page's column:
    first rank preservation A without MLP and at the smallest, peak and largest lambda, and the rank
    correlation of lambda and A; then those lambdas, the rise to the peak and the fall after it (decades),
    how many lambdas keep more rank than the same SAN without MLP, and the layers to collapse at the
    smallest and largest lambda."""
    first = (
        "*Rank preservation A, by attention weight scale:*\n\n"
        "| weight scale | A without MLP | A at smallest λ | A at peak (multiplier) | A at largest λ "
        "| rank corr. (λ, A) |\n" + "|---" * 6 + "|\n"
    )
    second = (
        "*Where the peak lies, and depth, by attention weight scale:*\n\n"
        "| weight scale | λ: smallest → peak → largest | rise to peak, fall after (decades) "
        "| λ values keeping more rank than without MLP "
        "| layers to collapse: smallest λ → largest λ |\n" + "|---" * 5 + "|\n"
    )
    lines1, lines2 = [], []
    for ws, s in slow.items():
        base = next(r["A"] for r in summ if r["weight_scale"] == ws and r["mlp_scale"] == 0)
        lam = s["lambda"]
        better = sum(a > base for a in s["A"])
        lines1.append(
            f"| {ws:g} | {base:.2f} | {s['A'][0]:.2f} | {max(s['A']):.2f} (×{s['peak_scale']:g}) "
            f"| {s['A'][-1]:.2f} | {s['rho_all']:+.2f} |"
        )
        lines2.append(
            f"| {ws:g} | {lam[0]:.3g} → {s['peak_lambda']:.3g} → {lam[-1]:.3g} "
            f"| {s['rise']:.2f}, {s['fall_after_peak']:.2f} | {better} of {len(s['A'])} "
            f"| {s['depth_min_lambda']:g} → {s['depth_max_lambda']:g} |"
        )
    return first + "\n".join(lines1) + "\n\n" + second + "\n".join(lines2)


def record_q3(ch, qrows: list[dict], qsum: dict, ev: dict, p) -> None:
    """Record part (c): per family the smallest median r(X_L), the gain, the rises of residual sensitivity
    (network, control, whole output), the price and the control's gain; glue the depths and the number of
    networks."""
    for fam, f in ev["families"].items():
        ch.value(
            f"q3_{fam}_min_r_L",
            f["min_r_L"],
            rtol=1e-3,
            note="median relative residual at the output; far above round-off by the family's design",
        )
        for k in (
            "gain",
            "rise_S",
            "rise_S_control",
            "price",
            "rise_S_out",
            "gain_control",
            "rise_S_to_plateau",
        ):
            ch.value(
                f"q3_{fam}_{k}", f[k], atol=0.02, note="decades; differences of medians of smooth quantities"
            )
    ch.value(
        "q3_curves",
        {
            fam: [[q["mlp_scale"], q["G"], q["S"], q["S_out"], q["S_ctl"]] for q in pts]
            for fam, pts in qsum.items()
        },
        atol=0.02,
        glue=False,
        note="per family and multiplier: G, log10 S (residual), log10 S (whole output), control's log10 S",
    )
    ch.glue("q3_shallow_lambda_plateau", ev["families"]["shallow"]["lambda_plateau"])
    ch.glue("rule-Q3", RULE_Q3)
    ch.glue("rule-Q3-old", RULE_Q3_OLD)
    ch.glue("clip_floor", f"{FLOOR:.0e}")
    ch.glue("q3_layers", p.q3_layers)
    ch.glue("q3_skip_layers", p.n_layers)
    ch.glue("q3_total", len(qrows))
    ch.glue("q3_dirs", p.q3_dirs)


def record_c3_control(ch, qslow: dict) -> None:
    """Record C3's control (:func:`rankcollapse.chapters.mlp.experiments.q3_slowing` on
    :func:`rankcollapse.chapters.mlp.experiments.c3_control`): rank preservation A at the smallest and the
    largest lambda, its rise to the peak and its fall after it, the smallest median r(X_L) and the rise
    measured from above the clip."""
    ch.value("c3_ctl_A_min_lambda", qslow["A"][0], atol=0.05, note="mean log10 r over the layers, median")
    ch.value("c3_ctl_A_max_lambda", qslow["A"][-1], atol=0.05, note="as above")
    ch.value("c3_ctl_rise", qslow["rise"], atol=0.05, note="difference of two A values")
    ch.value("c3_ctl_fall_after_peak", qslow["fall_after_peak"], atol=0.05, note="as above")
    ch.value(
        "c3_ctl_min_r_L",
        qslow["min_r_L"],
        rtol=1.0,
        atol=1e-13,
        note="smallest median r(X_L), at the smallest lambda: round-off level; only its order matters",
    )
    if qslow["rise_above_floor"] is not None:
        ch.value(
            "c3_ctl_rise_above_floor",
            qslow["rise_above_floor"],
            atol=0.05,
            note="rise of A from the first lambda whose median r(X_L) >= 1e-10",
        )
    else:
        ch.glue("c3_ctl_rise_above_floor", float("nan"))
