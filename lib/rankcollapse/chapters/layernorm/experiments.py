"""Chapter `layernorm`, experiments: what is computed from the parameters, as plain data. Part (a), the
matrix form of LN checked on random inputs and the paper's rewrite of ``LN(SA(X))``; part (b), the rank
claims on random input families, on constructed inputs and in the integer counterexample search; part (c),
random SANs with and without LN; part (d), the C4 adversary's constructed and searched weights. The matrix
form of LN, the rank measures and the search live in :mod:`rankcollapse.core.layernorm`, the adversary in
:mod:`rankcollapse.core.ln_attack`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...core import layernorm as lnm
from ...core import ln_attack as lna
from ...core.metrics import relative_residual
from ...core.san import SAN, SANConfig, random_tokens

PLACEMENTS = ("none", "post", "pre")
FLOOR = 1e-13


# -- (a) the matrix form ---------------------------------------------------------------------------
def side_table(n: int, d: int, seed: int) -> list[dict]:
    """Side checks on random inputs with fewer and with more tokens than features (random gain and bias)."""
    g = torch.Generator(device="cpu").manual_seed(int(seed))
    rows = []
    for nn in (n, 2 * d):
        X = torch.randn(nn, d, generator=g, dtype=torch.float64)
        gain = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
        bias = torch.randn(d, generator=g, dtype=torch.float64)
        rows.append({"n": nn, "d": d, **lnm.side_checks(X, gain, bias)})
    return rows


def rewrite_check(n: int, d: int, H: int, seed: int) -> dict:
    """The paper's rewrite of ``LN(SA(X))`` against the correct one, for one random SAN layer."""
    san = SAN.random(SANConfig(1, H, d), seed)
    X = random_tokens(n, d, seed + 1)
    P = san.attention(0, X)
    g = torch.Generator(device="cpu").manual_seed(int(seed) + 2)
    gain = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
    bias = torch.randn(d, generator=g, dtype=torch.float64)
    out = lnm.exact_rewrite(P, X, san.head_maps(0), san.b[0], gain, bias)
    rs = out.pop("left_row_sums")
    out["left_row_sum_min"], out["left_row_sum_max"] = float(rs.min()), float(rs.max())
    return out


# -- (b) rank claims ---------------------------------------------------------------------------------
def families(n: int, d: int):
    """Random input families: name -> (shape, generator of one input from a torch.Generator)."""

    def gauss(nn):
        return lambda g: torch.randn(nn, d, generator=g, dtype=torch.float64)

    def hetero(g):
        return torch.exp(1.5 * torch.randn(n, 1, generator=g, dtype=torch.float64)) * torch.randn(
            n, d, generator=g, dtype=torch.float64
        )

    def near(g):
        x = torch.randn(1, d, generator=g, dtype=torch.float64)
        return torch.ones(n, 1, dtype=torch.float64) @ x + 1e-3 * torch.randn(
            n, d, generator=g, dtype=torch.float64
        )

    return {
        f"Gaussian, n={n} < d={d}": gauss(n),
        f"Gaussian, n=d={d}": gauss(d),
        f"Gaussian, n={2 * d} > d={d}": gauss(2 * d),
        "tokens of different norms": hetero,
        "near-collapsed (1xᵀ + 1e-3 E)": near,
    }


def random_claims(n: int, d: int, trials: int, seed: int) -> list[dict]:
    """Per family and LN variant (gain 1, bias 0 / random gain and bias): the share of inputs where each
    claim holds."""
    rows = []
    for fi, (name, make) in enumerate(families(n, d).items()):
        for affine in (False, True):
            g = torch.Generator(device="cpu").manual_seed(int(seed) + 100 * fi + int(affine))
            holds = {k: 0 for k in lnm.CLAIMS}
            for _ in range(trials):
                X = make(g)
                gain = bias = None
                if affine:
                    gain = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
                    bias = torch.randn(d, generator=g, dtype=torch.float64)
                out = lnm.check_claims(X, gain, bias)
                for k, v in out["holds"].items():
                    holds[k] += v
            rows.append({"family": name, "affine": affine, **{k: v / trials for k, v in holds.items()}})
    return rows


def constructed_table(n: int, d: int, seed: int) -> list[dict]:
    rows = []
    for name, X in lnm.constructed_inputs(n, d, seed).items():
        out = lnm.check_claims(X)
        rows.append(
            {"input": name, "n": X.shape[0], "d": X.shape[1], "before": out["before"], "after": out["after"]}
        )
    return rows


def search_sizes(max_size: int) -> list[tuple[int, int]]:
    """All (n, d) with n, d >= 2 and n + d <= max_size, smallest total first."""
    return [(n, s - n) for s in range(4, max_size + 1) for n in range(2, s - 1)]


def counterexamples(max_size: int, trials: int, seed: int, tested: dict | None = None) -> dict:
    """Per claim, with and without LN bias: the smallest counterexample found (or None). ``tested``, when
    given, receives per key the number of inputs checked (LN defined) up to and including that one."""
    sizes = search_sizes(max_size)
    out = {}
    for i, claim in enumerate(lnm.CLAIMS):
        for wb in (False, True):
            key = f"{claim}|{'bias' if wb else 'no bias'}"
            st = {}
            out[key] = lnm.search_counterexample(
                claim, sizes, trials, seed + 10 * i + int(wb), with_bias=wb, stats=st
            )
            if tested is not None:
                tested[key] = st.get("tested", 0)
    return out


def random_inputs_checked(n: int, d: int, trials: int) -> int:
    """How many random inputs :func:`random_claims` checks (every family, plain and affine LN)."""
    return 2 * trials * len(families(n, d))


# -- (c) SAN against SAN+LN -----------------------------------------------------------------------------
def collapse_curves(p, device, log=print) -> list[dict]:
    """Random SANs (``SAN.random``, with bias) at every weight scale, the same weights with no LN, post-LN
    and pre-LN (LN eps 1e-5, the config's default): per placement the mean curve of ``log10 r(X_l)``
    (hidden states, clipped at ``FLOOR``), rank preservation ``A``, and per seed the depth of collapse
    (:func:`rankcollapse.core.ln_attack.collapse_depth` of the smaller of ``r`` before and after LN, the
    earlier over LN eps 1e-5 and 1e-3; ``L + 1`` when none within the horizon ``L = n_layers``)."""
    rows = []
    for ws in p.weight_scales:
        sans, Xs = [], []
        for i in range(p.seeds):
            sd = p.seed + 1000 * i
            sans.append(
                SAN.random(SANConfig(p.n_layers, p.n_heads, p.d_model, weight_scale=ws), sd, device=device)
            )
            Xs.append(random_tokens(p.n_tokens, p.d_model, sd + 1, device=device))
        for ln in PLACEMENTS:
            R, depth, spread = [], [], []
            for san0, X in zip(sans, Xs):
                san = lna.with_layernorm(san0, ln)
                with torch.no_grad():
                    tr = lna.trajectory(san, X)
                r = [float(relative_residual(X))] + [float(x) for x in tr["state"]]
                R.append([math.log10(max(x, FLOOR)) for x in r])
                dd = lna.collapse_depth(lna.r_min(tr), p.collapse_tol)
                if ln != "none":  # the earlier depth over LN eps 1e-5 and 1e-3 (RULE_C4)
                    with torch.no_grad():
                        tr3 = lna.trajectory(lna.with_layernorm(san0, ln, 1e-3), X)
                    dd = min(dd, lna.collapse_depth(lna.r_min(tr3), p.collapse_tol))
                depth.append(dd)
                if ln == "post":  # how unequal are the per-token scales LN divides by (layer 1)
                    Y = san.mix(0, san.attention(0, X), X) + san.b[0]
                    sig = Y.std(dim=-1, unbiased=False)
                    spread.append(float(sig.std() / sig.mean()))
            R = np.array(R)
            rows.append(
                {
                    "weight_scale": ws,
                    "layernorm": ln,
                    "curve_log10": R.mean(0).tolist(),
                    "A": float(R.mean()),
                    "depths": depth,
                    "depth": float(np.median(depth)),
                    "collapsed_share": float(np.mean([dd <= p.n_layers for dd in depth])),
                    "sigma_spread": float(np.median(spread)) if spread else None,
                }
            )
        log(f"collapse curves at weight scale {ws}: done")
    return rows


# -- (d) C4 attacked: weights that make LN matter -------------------------------------------------------
def attack(p, log=print) -> dict:
    """Constructed and searched weight settings under the budget ``beta_h = attack_beta`` for every head
    (no bias), each run on the same input with post-LN (eps 1e-5 and 1e-3) and without LN
    (:func:`rankcollapse.core.ln_attack.compare_ln`). Float64, on the CPU."""
    from ...core.adversary import head_betas

    L, tol, beta = p.n_layers, p.collapse_tol, p.attack_beta
    cfg = SANConfig(L, p.n_heads, p.d_model, bias=False)
    X = random_tokens(p.n_tokens, p.d_model, p.seed + 7)
    settings = []

    def add(kind, label, san, **extra):
        out = lna.compare_ln(san, X, tol)
        settings.append(
            {"kind": kind, "label": label, "beta_max": float(head_betas(san).max()), **out, **extra}
        )

    for c in p.attack_values:
        add("constructed", f"constructed, c = {c:g}", lna.block_construction(cfg, beta / c, c), c=c)
    log("C4 construction: done")
    gen = torch.Generator(device="cpu").manual_seed(int(p.seed) + 11)
    for obj, kind in (("post", "searched with LN"), ("none", "searched without LN")):
        for s in range(p.attack_starts):
            info, san = lna.ln_search(cfg, X, beta, p.attack_steps, p.attack_lr, gen, obj)
            st = lna.compare_ln(info["start"], X, tol)
            add(
                kind,
                f"{kind}, start {s + 1}",
                san,
                start_delta=st["delta"],
                start_depth_ln=st["depth_ln"],
                start_depth_plain=st["depth_plain"],
            )
            log(f"C4 search ({kind}) start {s + 1}: done")
    return {"settings": settings, "beta": beta, "horizon": L}


def attack_extremes(at: dict) -> tuple[dict, dict]:
    """The setting where LN delays the collapse most (largest ``delta``) and where it hastens it most."""
    st = at["settings"]
    return max(st, key=lambda r: r["delta"]), min(st, key=lambda r: r["delta"])


def affine_random_example(d: int, seed: int) -> dict:
    """One Gaussian input with ``2d`` tokens (the random family whose affine rank changes): its affine rank
    before and after LN and how clearly both are determined."""
    g = torch.Generator(device="cpu").manual_seed(int(seed) + 5)
    X = torch.randn(2 * d, d, generator=g, dtype=torch.float64)
    Y = lnm.layer_norm(X)
    return {
        "source": f"random Gaussian, n = {2 * d} > d = {d}",
        "before": lnm.affine_rank(X),
        "after": lnm.affine_rank(Y),
        "rank_gap_decades": min(lnm.rank_gap_decades(X), lnm.rank_gap_decades(Y)),
    }


def ln2_control(n: int, d: int, seed: int, trials: int = 100, min_gap: float = 6.0) -> dict:
    """LN2's control: ``trials`` Gaussian inputs with fewer tokens than features (``n`` tokens, or ``d // 2``
    when ``n >= d - 1``), where a generic token set keeps its affine rank under LN (at most ``d - 1``
    dimensions fit in the centred hyperplane). The evidence dict of
    :func:`rankcollapse.chapters.layernorm.verdicts.verdict_ln2`: the inputs checked (LN defined, eps 0),
    every affine-rank change found (before, after, how clearly both ranks are determined), and the rule's
    ``min_tested`` (= ``trials``) and ``min_gap_decades``."""
    nn = n if n < d - 1 else max(2, d // 2)
    g = torch.Generator(device="cpu").manual_seed(int(seed) + 17)
    tested, cex = 0, []
    for i in range(trials):
        X = torch.randn(nn, d, generator=g, dtype=torch.float64)
        if not lnm.ln_defined(X):
            continue
        tested += 1
        Y = lnm.layer_norm(X)
        a, b = lnm.affine_rank(X), lnm.affine_rank(Y)
        if a != b:
            cex.append(
                {
                    "source": f"random Gaussian {nn}x{d}, draw {i + 1}",
                    "before": a,
                    "after": b,
                    "rank_gap_decades": min(lnm.rank_gap_decades(X), lnm.rank_gap_decades(Y)),
                }
            )
    return {
        "tested": tested,
        "counterexamples": cex,
        "min_tested": trials,
        "min_gap_decades": min_gap,
        "n": nn,
        "d": d,
        "where": "LN with eps 0; random Gaussian inputs with fewer tokens than features, "
        f"n = {nn} < d = {d}",
    }
