"""`real-models`, what is computed: the models (random init, the checkpoints this book pretrains itself with
:mod:`rankcollapse.hf.pretrain`, a loaded pretrained checkpoint), their four variants' r(X_l) curves
(Figure 2) and the Q2 statistics (beta, the a-priori gamma, 4 gamma beta / sqrt(d_qk)), as plain data,
spread over worker processes. The models are the real transformers classes; the four variants come from
:mod:`rankcollapse.hf.surgery`; the text, tokenisation and checkpoints from :mod:`rankcollapse.hf.models`.
"""

from __future__ import annotations

import dataclasses
import math
from contextlib import contextmanager

import numpy as np
import torch

from ...book.params import ParameterError
from ...core import bounds as B
from ...core.bounds import gamma_min, one_layer_factor
from ...core.metrics import norm_1, norm_1inf, relative_residual, relative_residual_fro, res
from ...hf import models as hm
from ...hf import pretrain as pt
from ...hf import surgery as sg

COLLAPSED = 1e-2  # mean r(X) below this is "≈0", the level the paper's figure cannot tell from zero
ARCH_NAMES = {"bert": "BERT", "albert": "ALBERT", "xlnet": "XLNet"}


def model_params(p) -> dict:
    return {"bert": p.model_bert, "albert": p.model_albert, "xlnet": p.model_xlnet}


def text_info() -> dict:
    text, sha = hm.corpus()
    import sys

    return {
        "sha256": sha,
        "chars": len(text),
        "python": sys.version.split()[0],
        "source": "pydoc_data/topics.py",
    }


# -- checkpoints trained here (hf/pretrain.py) -------------------------------------------------------------
def train_specs(p) -> list[pt.PretrainSpec]:
    """The checkpoints this book pretrains itself: per architecture of ``p.architectures`` and seed of
    ``p.train_seeds``, the same recipe (:class:`rankcollapse.hf.pretrain.PretrainSpec`), its context the
    chapter's ``n_tokens`` so that every window of the figure fits the trained position table."""
    return [
        pt.PretrainSpec(
            arch,
            layers=p.train_layers,
            hidden=p.train_hidden,
            heads=p.train_heads,
            ctx=p.n_tokens,
            batch=p.train_batch,
            steps=p.train_steps,
            lr=p.train_lr,
            seed=s,
            checkpoint_every=max(1, p.train_steps // 5),
        )
        for arch in p.architectures
        for s in p.train_seeds
    ]


class ProgressFile:
    """A log function a worker process can carry: appends ``[label] msg`` to ``path`` (the chapter's
    progress log)."""

    def __init__(self, path: str, label: str):
        self.path, self.label = str(path), label

    def __call__(self, msg: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"[{self.label}] {msg}\n")


def _pretrain_job(spec: dict, progress: str | None = None) -> dict:
    """One checkpoint, trained through the store (or loaded from it): its folder and its held-out
    evaluation, plain data."""
    s = pt.PretrainSpec.from_dict(spec)
    log = ProgressFile(progress, "real-models") if progress else (lambda m: None)
    folder = pt.pretrained(s, log=log)
    info = pt.read_info(folder)
    return {
        "arch": s.arch,
        "seed": s.seed,
        "path": str(folder),
        "heldout_loss": info["heldout_loss"],
        "unigram_loss": info["unigram_loss"],
        "predicted_bytes": info["predicted_bytes"],
        "train_loss_last": info["train_loss_last"],
        "cpu_seconds": info["cpu_seconds"],
        "seconds": info["seconds"],
    }


def pretrain_all(p, workers: int = 1, log=print, progress: str | None = None) -> dict:
    """Every checkpoint of :func:`train_specs`, trained (or loaded from the store) in ``workers`` processes,
    the dearest architecture first; ``{(arch, seed): job result}`` (:func:`_pretrain_job`). ``progress``: a
    file the workers append their stage lines to (the chapter's progress log)."""
    from ...jobs import run_parallel

    specs = sorted(train_specs(p), key=lambda s: -COST[s.arch])
    res = run_parallel(
        _pretrain_job,
        [{"spec": s.to_dict(), "progress": progress} for s in specs],
        workers=workers,
        log=log,
        labels=[f"pretrain {s.arch} seed {s.seed}" for s in specs],
    )
    return {(r["arch"], r["seed"]): r for r in res}


def models(p, device, trained: dict | None = None) -> list[tuple]:
    """The models of the chapter in order: per architecture, random init, the checkpoints trained here
    (``trained``: :func:`pretrain_all`'s result; one per seed), then the pretrained checkpoint (if any).

    Loaded lazily by the caller through :func:`load` to keep one model in memory at a time.
    """
    out = []
    for k, arch in enumerate(p.architectures):
        out.append(("init", arch, p.seed + 101 * k))
        for s in p.train_seeds:
            if trained and (arch, s) in trained:
                out.append(("trained", arch, (s, trained[(arch, s)]["path"])))
        if model_params(p)[arch] != hm.NONE:
            out.append(("pretrained", arch, model_params(p)[arch]))
    return out


def model_key(spec) -> str:
    """A model's key in the results: ``<arch>_init``, ``<arch>_trained_s<seed>``, ``<arch>_pretrained``."""
    state, arch, arg = spec
    return f"{arch}_trained_s{arg[0]}" if state == "trained" else f"{arch}_{state}"


def load(spec, p, device) -> hm.Loaded:
    state, arch, arg = spec
    if state == "trained":
        seed, path = arg
        loaded = hm.load_pretrained(path, device)
        return dataclasses.replace(
            loaded, state="trained", label=f"{ARCH_NAMES[arch]} trained here, seed {seed}"
        )
    if state == "init":
        loaded = hm.random_model(
            arch,
            arg,
            device,
            layers=p.init_layers,
            hidden=p.init_hidden,
            heads=p.init_heads,
            vocab=hm.bert_tokenizer().vocab_size,
        )
        return dataclasses.replace(loaded, label=f"{ARCH_NAMES[arch]} random init")
    return hm.load_pretrained(arg, device)


def token_ids(loaded: hm.Loaded, p) -> tuple[torch.Tensor, str]:
    """The model's own tokenizer where one loads offline, else the BERT tokenizer of the MiniLM package."""
    text, _ = hm.corpus()
    tok, which = (
        (loaded.tokenizer, "own") if loaded.tokenizer is not None else (hm.bert_tokenizer(), "BERT (MiniLM)")
    )
    ids = hm.token_windows(tok, text, p.n_seq, p.n_tokens)
    if int(ids.max()) >= loaded.model.config.vocab_size:
        raise ParameterError(
            f"the tokenizer of {loaded.label} could not be loaded offline and the BERT tokenizer's ids "
            f"exceed its vocabulary ({loaded.model.config.vocab_size}); put the tokenizer files into "
            "the checkpoint folder (sentencepiece-based tokenizers also need `pip install "
            "sentencepiece`)"
        )
    return ids, which


# -- one model, end to end (a unit of work for one process) -----------------------------------------------
COST = {"xlnet": 3, "bert": 2, "albert": 2}  # relative cost at init, to start the dearest first


def compute_model(spec, params: dict, device: str = "cpu") -> dict:
    """Load one model, run its four variants and Q2; plain data only (so it can come back from a worker)."""
    import os
    from types import SimpleNamespace

    if torch.device(device).type == "cpu":
        torch.set_num_threads(int(os.environ.get("RCBOOK_THREADS", "1")))
    p = SimpleNamespace(**params)
    loaded = load(spec, p, device)
    ids, which = token_ids(loaded, p)
    quiet = lambda msg: None  # noqa: E731
    curves = residual_curves(loaded, ids, p.batch, log=quiet)
    summ = {
        **curve_summary(curves),
        "_arch": loaded.arch,
        "_state": loaded.state,
        "_label": loaded.label,
        "_seed": spec[2][0] if spec[0] == "trained" else None,
    }
    q = q2_stats(loaded, ids[: p.q2_seq], p.batch, log=quiet)
    if loaded.state != "init":  # Q2's control: the same checkpoint with its value maps scaled down
        q["control"] = q2_control(loaded, ids[: p.q2_seq], p.batch, q)
    return {
        "key": model_key(spec),
        "summary": summ,
        "q2": q,
        "tokenizer": which,
        "shape": list(ids.shape),
    }


def _compute_on_a_core(spec, params: dict, dev: str) -> dict:
    """:func:`compute_model` in a worker, holding one core of the run's budget (nothing outside rcbook)."""
    from ... import cores

    with cores.slot():
        return compute_model(spec, params, dev)


def run_all(p, device, workers: int = 1, log=print, trained: dict | None = None) -> list[dict]:
    """Every model of the chapter (:func:`models`; ``trained``: the checkpoints of :func:`pretrain_all`), in
    ``workers`` processes (one thread each); results in book order and identical whatever ``workers`` is
    (each model has its own seed)."""
    specs = models(p, device, trained)
    params = dict(vars(p))
    dev = str(device)
    out = {}
    if workers <= 1 or len(specs) == 1:
        for spec in specs:
            r = compute_model(spec, params, dev)
            out[spec] = r
            log(
                f"{r['summary']['_label']} [{r['summary']['_state']}] done: r(X_L) SAN "
                f"{r['summary']['SAN']['r_final']:.2g}, "
                f"transformer {r['summary']['transformer']['r_final']:.3f}"
            )
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        order = sorted(
            specs, key=lambda s: -(COST[s[1]] if s[0] == "init" else 1 if s[0] == "pretrained" else 0)
        )
        from ... import cores  # the kernel only waits meanwhile: its core goes to the workers
        from ...procs import die_with_parent  # a worker dies with the kernel that started it

        with (
            cores.released(),
            ProcessPoolExecutor(
                max_workers=min(workers, len(specs)),
                mp_context=mp.get_context("spawn"),
                initializer=die_with_parent,
            ) as ex,
        ):
            futs = {ex.submit(_compute_on_a_core, s, params, dev): s for s in order}
            for f in as_completed(futs):
                r = f.result()
                out[futs[f]] = r
                log(
                    f"{r['summary']['_label']} [{r['summary']['_state']}] done: r(X_L) SAN "
                    f"{r['summary']['SAN']['r_final']:.2g}, "
                    f"transformer {r['summary']['transformer']['r_final']:.3f}"
                )
    return [out[s] for s in specs]


# -- Figure 2: r(X_l) per variant ---------------------------------------------------------------------------
@torch.no_grad()
def residual_curves(loaded: hm.Loaded, ids: torch.Tensor, batch: int, log=print) -> dict:
    """For each variant: r(X_l) (composite) and its Frobenius version, arrays (L+1, n_seq)."""
    out = {}
    for v in sg.VARIANTS:
        with sg.variant(loaded.model, v):
            r, rf = [], []
            for i in range(0, ids.shape[0], batch):
                H = hm.hidden_states(loaded.model, ids[i : i + batch], batch=batch)
                r.append(relative_residual(H.double()))
                rf.append(relative_residual_fro(H.double()))
        out[v] = {"r": torch.cat(r, dim=1).numpy(), "r_fro": torch.cat(rf, dim=1).numpy()}
        log(f"{loaded.label} [{loaded.state}] {v}: r(X_L) = {out[v]['r'][-1].mean():.3g}")
    return out


def curve_summary(curves: dict) -> dict:
    """Numbers that decide the verdicts, per variant: start, end, first collapsed layer, mean log10 r."""
    s = {}
    for v, c in curves.items():
        m = c["r"].mean(axis=1)
        L = len(m) - 1
        below = np.nonzero(m < COLLAPSED)[0]
        s[v] = {
            "r0": float(m[0]),
            "r_final": float(m[-1]),
            "r_final_std": float(c["r"][-1].std()),
            "r_fro_final": float(c["r_fro"][-1].mean()),
            "collapse_layer": int(below[0]) if len(below) else -1,
            "min_r": float(m.min()),
            "mean_log10_r": float(np.mean(np.log10(np.maximum(m[1:], 1e-12)))),
            "L": L,
            "mean": m.tolist(),
            "std": c["r"].std(axis=1).tolist(),
            "q10": np.percentile(c["r"], 10, axis=1).tolist(),
            "q90": np.percentile(c["r"], 90, axis=1).tolist(),
        }
    return s


def by_model(results: list[dict]) -> tuple[dict, dict, dict]:
    """The results of :func:`run_all` keyed by model: curve summaries, Q2 statistics and tokenizer used."""
    summ = {r["key"]: r["summary"] for r in results}
    qs = {r["key"]: r["q2"] for r in results}
    tokenizers = {r["key"]: r["tokenizer"] for r in results}
    return summ, qs, tokenizers


# -- Q2: beta per layer and head, the a-priori gamma, 4 gamma beta < sqrt(d_qk) ----------------------------
def head_betas(W: dict) -> torch.Tensor:
    """``||W_Q,h W_K,h^T||_1 * ||W_V,h W_O,h||_{1,inf}`` per head: shape (H,) (as ``bounds.beta_heads``)."""
    return norm_1(W["WQ"] @ W["WK"].transpose(-1, -2)) * norm_1inf(W["WV"] @ W["WO"])


@torch.no_grad()
def q2_stats(loaded: hm.Loaded, ids: torch.Tensor, batch: int, log=print) -> dict:
    """Per layer l, head h and sequence s of the *unmodified* model, with X the layer's input and P_h its
    attention in the forward pass:

    * ``beta[l,h]`` from the weights; ``d_qk`` the head size;
    * ``gamma_head[l,h,s]``: the a-priori gamma of :func:`rankcollapse.core.bounds.attention_gamma`, from the
      attention entries and the input only (``sqrt(d_qk) ||P_h - 1 p_h^T|| / (4 ||W_QK,h||_1 ||res X||^2)``),
      and ``cond_head = 4 gamma_h beta_h / sqrt(d_qk)`` (the note's condition holds when it is < 1);
    * the layer (H heads): the a-priori ``bound`` on ``||res(sum_h P_h X W_h)||`` and its ``gamma`` with
      ``beta = max_h beta_h``; ``factor = 4 gamma beta H / sqrt(d_qk)``, the condition as the note states it,
      ``stated = 4 gamma beta / sqrt(d_qk) = factor / H``, and ``scaled = factor * ||res X||^2 = bound /
      ||res X||``: the a-priori bound on the factor by which the layer shrinks the residual of its input,
      the quantity the depth bound needs below 1 (``(f^{1/2} ||res X||)^{3^L}`` must shrink);
    * ``res_out`` (observed) and ``tightness = res_out / bound`` (at most 1: the bound always holds);
    * for comparison, ``cond_head_fitted``: the same condition with the old, circular gamma (the smallest
      value making the one-layer inequality hold on the observed output).
    Norms are the composite ``||.||_{1,inf}``, residuals against the token mean, in float64.
    """
    model, arch = loaded.model, loaded.arch
    Ws = hm.head_weights(model, arch)
    H = Ws[0]["WQ"].shape[0]
    dqk = Ws[0]["WQ"].shape[-1]
    betas = torch.stack([head_betas(W) for W in Ws])  # (L, H)
    maps = [W["WV"].double() @ W["WO"].double() for W in Ws]
    L = len(Ws)
    cols = {k: [] for k in ("res_in", "res_out", "res_out_h", "gamma_h", "bound", "gamma")}
    for i in range(0, ids.shape[0], batch):
        hs, att = hm.hidden_states(model, ids[i : i + batch], batch=batch, attentions=True)
        per = {k: [] for k in cols}
        for l in range(L):
            X = hs[l].double()
            g = B.attention_gamma(X, Ws[l]["WQ"], Ws[l]["WK"], maps[l], att[l])
            Y = hm.head_outputs(Ws[l], X, att[l])  # (b, H, n, d)
            per["res_in"].append(g["res_in"])
            per["res_out_h"].append(norm_1inf(res(Y)))
            per["res_out"].append(norm_1inf(res(Y.sum(dim=1))))
            per["gamma_h"].append(g["gamma_h"])
            per["bound"].append(g["bound"])
            per["gamma"].append(g["gamma"])
        for k in cols:
            cols[k].append(torch.stack(per[k]))
    c = {k: torch.cat(v, dim=1).numpy() for k, v in cols.items()}  # (L, S) or (L, S, H)
    b = betas.numpy()
    gamma_h = c["gamma_h"].transpose(0, 2, 1)  # (L, H, S)
    cond_h = 4.0 * gamma_h * b[:, :, None] / math.sqrt(dqk)
    S = c["res_in"].shape[1]
    fitted = np.empty((L, H, S))
    for l in range(L):
        for s in range(S):
            for h in range(H):
                g = gamma_min(
                    float(c["res_in"][l, s]), float(c["res_out_h"][l, s, h]), float(b[l, h]), 1, dqk
                )
                fitted[l, h, s] = one_layer_factor(g, float(b[l, h]), 1, dqk)
    factor = 4.0 * c["gamma"] * b.max(axis=1)[:, None] * H / math.sqrt(dqk)
    log(
        f"{loaded.label} [{loaded.state}] Q2: beta median {np.median(b):.3g}, 4γβ/√d_qk median "
        f"{np.median(cond_h):.3g}, a-priori bound / observed residual median "
        f"{np.median(c['bound'] / c['res_out']):.3g}"
    )
    return {
        "label": loaded.label,
        "state": loaded.state,
        "arch": arch,
        "H": H,
        "d_qk": dqk,
        "L": L,
        "beta": b,
        "gamma_head": gamma_h,
        "cond_head": cond_h,
        "cond_head_fitted": fitted,
        "gamma_layer": c["gamma"],
        "factor": factor,
        "stated": factor / H,
        "scaled": c["bound"] / c["res_in"],
        "bound": c["bound"],
        "tightness": c["res_out"] / c["bound"],
        "res_in": c["res_in"],
        "res_out": c["res_out"],
        "w_head": norm_1inf(torch.stack(maps)).numpy(),  # (L, H): ||W_V,h W_O,h||_{1,inf}
        "n": int(ids.shape[1]),
    }


def _value_params(model, arch: str) -> list[torch.Tensor]:
    """The parameters of every distinct layer's value map: BERT and ALBERT the value projection's weight
    and bias, XLNet ``rel_attn.v`` (no bias). Scaling them by c scales every ``W_V,h W_O,h`` by c."""
    out = []
    for lay in sg.layers_of(model, arch):
        if arch == "bert":
            lin = lay.attention.self.value
        elif arch == "albert":
            lin = lay.attention.value
        else:
            out.append(lay.rel_attn.v)
            continue
        out += [lin.weight] + ([lin.bias] if lin.bias is not None else [])
    return out


@contextmanager
def value_maps_scaled(model, arch: str, c: float):
    """The model with every layer's value map scaled by ``c`` (so beta scales by c; the a-priori gamma does
    not depend on it), restored bit for bit on exit."""
    ps = _value_params(model, arch)
    saved = [t.detach().clone() for t in ps]
    try:
        with torch.no_grad():
            for t in ps:
                t.mul_(c)
        yield model
    finally:
        with torch.no_grad():
            for t, s0 in zip(ps, saved):
                t.copy_(s0)


Q2_CONTROL_TRIES = 4  # scales 10^-k tried from the predicted k upwards


@torch.no_grad()
def q2_control(loaded: hm.Loaded, ids: torch.Tensor, batch: int, q: dict) -> dict:
    """Q2's control: the checkpoint with its value maps scaled by 10^-k and run again (every layer's input
    and attention change with it), k the smallest integer for which the depth bound's condition f ||res
    X||^2 < 1 holds on every layer and sequence. The search starts at the k that the unscaled run predicts
    (f is linear in beta, so in the scale, at fixed inputs) and goes up while the rerun does not hold, at
    most :data:`Q2_CONTROL_TRIES` scales. Returns ``k``, ``scaled`` and ``cond_head`` of the run at 10^-k,
    and the largest value of every scale tried."""
    k = max(0, math.floor(math.log10(float(q["scaled"].max()))) + 1)
    tried = {}
    for kk in range(k, k + Q2_CONTROL_TRIES):
        with value_maps_scaled(loaded.model, loaded.arch, 10.0**-kk):
            qc = q2_stats(loaded, ids, batch, log=lambda m: None)
        tried[kk] = float(qc["scaled"].max())
        if tried[kk] < 1:
            break
    return {"k": kk, "scaled": qc["scaled"], "cond_head": qc["cond_head"], "tried": tried}


def q2_summary(q: dict) -> dict:
    c, st, sc = q["cond_head"], q["stated"], q["scaled"]
    return {
        "beta_median": float(np.median(q["beta"])),
        "beta_max": float(q["beta"].max()),
        "beta_min": float(q["beta"].min()),
        "gamma_head_median": float(np.median(q["gamma_head"])),
        "cond_head_median": float(np.median(c)),
        "cond_head_max": float(c.max()),
        "cond_head_frac_holds": float((c < 1).mean()),
        "stated_max": float(st.max()),
        "stated_frac_holds": float((st < 1).mean()),
        "scaled_median": float(np.median(sc)),
        "scaled_max": float(sc.max()),
        "scaled_frac_holds": float((sc < 1).mean()),
        "res_in_median": float(np.median(q["res_in"])),
        "tightness_median": float(np.median(q["tightness"])),
        "tightness_max": float(q["tightness"].max()),
        "cond_fitted_median": float(np.median(q["cond_head_fitted"])),
        "gamma_layer_spread": float(np.median(q["gamma_layer"].max(axis=0) / q["gamma_layer"].min(axis=0))),
        "d_qk": q["d_qk"],
        "H": q["H"],
    }
