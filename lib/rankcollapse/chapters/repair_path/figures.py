"""Chapter `repair-path`, figures: one function per figure (``fig_*``), from what
:mod:`.experiments` computed: per-block gradients, the query-key gradient after the switch, the switches,
the hysteresis, the delayed switches, the predictor and the traced weights.
"""

from __future__ import annotations

import numpy as np

from ...lm import training as tr
from ...repair.recovery import last_srank
from .experiments import CENSOR, censored, h5_alpha

# -- figures ----------------------------------------------------------------------------------------
# the series of Figure 2: (label, state, key, colour, style)
_GRAD_SERIES = (
    ("task, attn input", "collapsed", "task_attn", "C0", "o-"),
    ("task, Q/K", "collapsed", "task_qk", "C1", "s-"),
    ("hinge, attn input", "collapsed", "term_attn", "C3", "^-"),
    ("task, attn input", "healthy", "task_attn", "C0", "o--"),
    ("task, Q/K", "healthy", "task_qk", "C1", "s--"),
)


def _floor(values) -> float:
    pos = [v for vals in values for v in vals if v > 0]
    return min(pos) / 10 if pos else 1e-12


def _band(ax, x, rows, color, style, label, log=True):
    """Median over rows (events) with the min-max band shaded; returns the median."""
    a = np.asarray(rows, dtype=float)
    lo, med, hi = a.min(axis=0), np.median(a, axis=0), a.max(axis=0)
    ax.fill_between(x, lo, hi, color=color, alpha=0.15, lw=0)
    ax.plot(x, med, style, color=color, ms=4, lw=1.2, label=label)
    return med


def _legend_below(fig, axs, ncol=2):
    """One legend for the figure, under the panels (never over the data)."""
    handles, labels, seen = [], [], set()
    for ax in axs:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    fig.legend(
        handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, fontsize=8, frameon=False
    )


def fig_block_grads(p, grads: dict):
    """Figure 2 as the paper draws it: per-block gradient norms (log scale), the median over the events with
    the min-max band, collapsed (solid) against healthy (dashed); left the attention input weights (task
    loss and hinge), right the query-key rows. Open circles: blocks where the median is numerically zero
    (float32), drawn at the floor. Each event alone: :func:`fig_block_grads_seeds`."""
    from ...book.panels import grid

    seeds = list(grads)
    floor = _floor(grads[s][st][k] for s in seeds for _, st, k, _, _ in _GRAD_SERIES)
    fig, axs = grid(2, 4.4, 3.4, sharey=True)
    panels = {"attn": axs[0], "qk": axs[1]}
    for lab, st, k, c, style in _GRAD_SERIES:
        ax = panels["qk" if k.endswith("qk") else "attn"]
        rows = [[max(v, floor) for v in grads[s][st][k]] for s in seeds]
        zero = np.array([grads[s][st][f"{k}_zero"] for s in seeds], dtype=bool)
        blocks = np.arange(1, len(rows[0]) + 1)
        med = _band(ax, blocks, rows, c, style, f"{lab} ({st})")
        z = zero.mean(axis=0) >= 0.5
        if z.any():
            ax.scatter(blocks[z], med[z], s=60, facecolors="none", edgecolors="k", zorder=4)
    axs[1].scatter([], [], s=60, facecolors="none", edgecolors="k", label="numerically zero (float32)")
    for ax, title in zip(axs, ("attention input weights", "query-key rows")):
        ax.set_yscale("log")
        ax.set_xlabel("block")
        ax.set_title(f"{title} (median of {len(seeds)} events)", fontsize=9)
    axs[0].set_ylabel("gradient norm")
    fig.tight_layout()
    _legend_below(fig, axs)
    return fig


def fig_block_grads_seeds(p, grads: dict):
    """Figure 2, each event alone (the appendix): the same series as :func:`fig_block_grads`, one panel per
    event, two to a row; circled points are numerically zero (float32), drawn at the floor."""
    from ...book.panels import grid

    seeds = list(grads)
    fig, axs = grid(len(seeds), 4.0, 2.7, sharey=True)
    for ax, s in zip(axs, seeds):
        g = grads[s]
        floor = _floor(g[st][k] for _, st, k, _, _ in _GRAD_SERIES)
        for lab, st, k, c, style in _GRAD_SERIES:
            blocks = np.arange(1, len(g[st][k]) + 1)
            v = np.array([max(x, floor) for x in g[st][k]])
            ax.plot(blocks, v, style, color=c, ms=3, lw=1, label=f"{lab} ({st})")
            z = np.array(g[st][f"{k}_zero"], dtype=bool)
            if z.any():
                ax.scatter(blocks[z], v[z], s=40, facecolors="none", edgecolors="k", zorder=4)
        ax.set_yscale("log")
        ax.set_title(f"seed {s}", fontsize=9)
        ax.set_xlabel("block", fontsize=8)
    axs[0].scatter([], [], s=40, facecolors="none", edgecolors="k", label="numerically zero (float32)")
    for ax in axs[:: min(2, len(axs))]:
        ax.set_ylabel("gradient norm", fontsize=8)
    fig.tight_layout()
    _legend_below(fig, axs)
    return fig


def fig_switch_qk(p, grads, after):
    """The query-key gradient per block at the collapse, right after the switch, and after the first
    updates: one panel per event, two to a row, one legend under them."""
    from ...book.panels import grid

    seeds = list(grads)
    fig, axs = grid(len(seeds), 4.0, 2.8, sharey=True)
    for ax, s in zip(axs, seeds):
        g = grads[s]
        b = np.arange(1, len(g["collapsed"]["task_qk"]) + 1)
        ax.plot(
            b,
            np.maximum(g["collapsed"]["task_qk"], 1e-30),
            "k-o",
            ms=3,
            lw=1,
            label=f"collapsed, alpha {p.alpha_min}",
        )
        for i, a in enumerate(p.probe_alphas):
            ax.plot(
                b,
                g["switched"][a]["task_qk"],
                "-s",
                color=f"C{i}",
                ms=3,
                lw=1,
                label=f"alpha {a}, before any update",
            )
            ax.plot(
                b,
                after[s][a]["task_qk"],
                "--^",
                color=f"C{i}",
                ms=3,
                lw=1,
                label=f"alpha {a}, after {p.after_steps} updates",
            )
        ax.plot(b, g["healthy"]["task_qk"], ":", color="C2", lw=1.2, label="healthy")
        ax.set_yscale("log")
        ax.set_xlabel("block", fontsize=8)
        ax.set_title(f"seed {s}", fontsize=9)
    for ax in axs[:: min(2, len(axs))]:
        ax.set_ylabel("|grad task| on Q/K", fontsize=8)
    fig.tight_layout()
    _legend_below(fig, axs)
    return fig


def _hysteresis_curves(p, events, drivers, rev, slow):
    """Per event: (alpha, median srank) down the ramp, back up, and back up slowly (or None)."""
    out = {}
    for e in events:
        h = drivers[e["seed"]]["hist"]
        k = [j for j, t in enumerate(h["m_step"]) if t >= p.ramp_start]
        down = (
            [h["alpha"][j] for j in k],
            tr.rolling_median([h["srank"][j][-1] for j in k], p.recover_window),
        )
        r = rev[e["seed"]]["hist"]
        up = (r["alpha"], tr.rolling_median(last_srank(r), p.recover_window))
        sl = None
        if slow and e["seed"] in slow:
            r = slow[e["seed"]]["hist"]
            sl = (r["alpha"], tr.rolling_median(last_srank(r), p.recover_window))
        out[e["seed"]] = {"down": down, "up": up, "slow": sl}
    return out


def _on_grid(curves, grid_a):
    """Each (alpha, value) curve interpolated on ``grid_a`` (log alpha), NaN outside its own range."""
    rows = []
    for a, v in curves:
        a, v = np.asarray(a, float), np.asarray(v, float)
        o = np.argsort(a)
        a, v = np.log(a[o]), v[o]
        g = np.log(grid_a)
        rows.append(np.where((g >= a[0]) & (g <= a[-1]), np.interp(g, a, v), np.nan))
    return np.array(rows)


def fig_hysteresis(p, events, drivers, rev, slow: dict | None = None):
    """Figure 3 as the paper draws it: last-block srank (50-step median) against alpha, the median over the
    events with the min-max band, down the driver's ramp (solid), back up the reversed ramp (dashed) and back
    up the slow reversed ramp (dotted, where it ran); grey: the collapse threshold; the legend under the
    axes. Each event alone: :func:`fig_hysteresis_seeds`."""
    import matplotlib.pyplot as plt

    cur = _hysteresis_curves(p, events, drivers, rev, slow)
    alphas = [a for c in cur.values() for key in ("down", "up") for a in c[key][0] if a > 0]
    grid_a = np.geomspace(min(alphas), max(alphas), 80)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    kinds = [("down", "ramp down (driver)", "C0", "-"), ("up", "ramp back up", "C3", "--")]
    if any(c["slow"] is not None for c in cur.values()):
        kinds.append(("slow", f"back up {p.slow_ramp_factor}x slower", "C2", ":"))
    for key, lab, c, style in kinds:
        rows = _on_grid([v[key] for v in cur.values() if v[key] is not None], grid_a)
        ok = np.isfinite(rows).sum(axis=0) > 0
        with np.errstate(all="ignore"):
            lo, med, hi = np.nanmin(rows[:, ok], 0), np.nanmedian(rows[:, ok], 0), np.nanmax(rows[:, ok], 0)
        ax.fill_between(grid_a[ok], lo, hi, color=c, alpha=0.15, lw=0)
        n = int((~np.isnan(rows)).any(axis=1).sum())
        ax.plot(grid_a[ok], med, style, color=c, lw=1.4, label=f"{lab}: median of {n}, band min-max")
    ax.axhline(p.threshold, color="gray", lw=0.6, label="collapse threshold")
    ax.set_xscale("log")
    ax.set_xlabel("alpha (skip scale)")
    ax.set_ylabel("srank, last block (median)")
    fig.tight_layout()
    _legend_below(fig, [ax], ncol=1)
    return fig


def fig_hysteresis_seeds(p, events, drivers, rev, slow: dict | None = None):
    """Figure 3, each event alone (the appendix): down the ramp (solid), back up (dashed), back up slowly
    (dotted), one panel per event, two to a row."""
    from ...book.panels import grid

    cur = _hysteresis_curves(p, events, drivers, rev, slow)
    fig, axs = grid(len(cur), 4.0, 2.7, sharey=True, sharex=True)
    for ax, (s, c) in zip(axs, cur.items()):
        ax.plot(*c["down"], "-", color="C0", lw=1, label="ramp down (driver)")
        ax.plot(*c["up"], "--", color="C3", lw=1, label="ramp back up")
        if c["slow"] is not None:
            ax.plot(*c["slow"], ":", color="C2", lw=1.2, label=f"back up {p.slow_ramp_factor}x slower")
        ax.axhline(p.threshold, color="gray", lw=0.6)
        ax.set_xscale("log")
        ax.set_title(f"seed {s}", fontsize=9)
        ax.set_xlabel("alpha", fontsize=8)
    for ax in axs[:: min(2, len(axs))]:
        ax.set_ylabel("srank, last block", fontsize=8)
    fig.tight_layout()
    _legend_below(fig, axs, ncol=3)
    return fig


def fig_switches(p, events, hold):
    """Last-block srank after switches held at each alpha."""
    from ...book.panels import grid

    A = list(p.switch_alphas)
    fig, axs = grid(len(A), 4.0, 2.7, sharey=True)
    for ax, a in zip(axs, A):
        for i, e in enumerate(events):
            h = hold[e["seed"]][a]["hist"]
            ax.plot(
                np.array(h["m_step"]) - e["start"],
                tr.rolling_median(last_srank(h), p.recover_window),
                color=f"C{i}",
                lw=1,
                label=f"seed {e['seed']}",
            )
            ax.axhline(e["rec_threshold"], color=f"C{i}", ls=":", lw=0.8)
        ax.axhline(p.threshold, color="gray", lw=0.6)
        ax.set_title(f"alpha held at {a}", fontsize=9)
        ax.set_xlabel("steps after switch", fontsize=8)
    for ax in axs[:: min(2, len(axs))]:
        ax.set_ylabel("srank, last block (median)", fontsize=8)
    fig.tight_layout()
    _legend_below(fig, axs, ncol=4)
    return fig


def fig_delays(p, rows):
    """Figure 7: steps to recovery after the switch against the further collapsed steps before it; crosses at
    the top: no recovery within the branch."""
    from ...book.panels import grid

    A = list(p.delay_alphas)
    seeds = sorted({r["seed"] for r in rows})
    fig, axs = grid(len(A), 4.0, 3.0, sharey=True)
    top = p.branch_steps + CENSOR
    for ax, a in zip(axs, A):
        for i, s in enumerate(seeds):
            rs = sorted((r for r in rows if r["alpha"] == a and r["seed"] == s), key=lambda r: r["delay"])
            d = [r["delay"] for r in rs]
            t = [censored(r["recovered_after"], p.branch_steps) for r in rs]
            ax.plot(d, t, "-", color=f"C{i}", lw=0.8, alpha=0.6)
            for dd, r in zip(d, rs):
                if r["recovered_after"] is None:
                    ax.scatter([dd], [top], marker="x", color=f"C{i}", s=40)
                else:
                    ax.scatter([dd], [r["recovered_after"]], color=f"C{i}", s=25)
        ax.axhline(top, color="gray", lw=0.5, ls=":")
        ax.set_ylim(0, top * 1.08)
        ax.set_title(f"switch to alpha = {a}", fontsize=9)
        ax.set_xlabel(f"further steps at alpha = {p.alpha_min} before the switch", fontsize=8)
    for ax in axs[:: min(2, len(axs))]:
        ax.set_ylabel("steps to recovery")
    from matplotlib.lines import Line2D

    fig.tight_layout()
    fig.legend(
        [Line2D([], [], color=f"C{i}", marker="o", lw=0.8) for i in range(len(seeds))],
        [f"seed {s}" for s in seeds],
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=5,
        fontsize=8,
        frameon=False,
    )
    return fig


def fig_predictor(p, rows, split):
    """Figure 8: outcome of every switch against the predictor, one colour per switch alpha (filled:
    development seeds, open: held-out seeds; dashed: the threshold fitted at the lowest alpha, dash-dotted:
    pooled over alphas), and steps to recovery against the predictor at the H5 alpha."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axs = plt.subplots(1, 2, figsize=(9.5, 3.2))
    A = sorted({r["alpha"] for r in rows})
    for r in rows:
        c = f"C{A.index(r['alpha'])}"
        dev = r["seed"] in split["dev_seeds"]
        y = (1 if r["recovered_after"] is not None else 0) + 0.06 * (A.index(r["alpha"]) - (len(A) - 1) / 2)
        axs[0].scatter([r["predictor"]], [y], s=30, facecolors=c if dev else "none", edgecolors=c)
    handles = [Line2D([], [], color=f"C{i}", marker="o", ls="none") for i in range(len(A))]
    labels = [f"switch to {a:g}" for a in A]
    if split["threshold"] is not None:
        axs[0].axvline(split["threshold"], color="k", ls="--", lw=0.8)
        handles.append(Line2D([], [], color="k", ls="--", lw=0.8))
        labels.append(f"threshold at {split['alpha']:g}")
    if split["pooled"]["threshold"] is not None:
        axs[0].axvline(split["pooled"]["threshold"], color="k", ls="-.", lw=0.8)
        handles.append(Line2D([], [], color="k", ls="-.", lw=0.8))
        labels.append("threshold, pooled")
    axs[0].legend(handles, labels, fontsize=7)
    axs[0].set_yticks([0, 1], ["not recovered", "recovered"])
    axs[0].set_ylim(-0.5, 1.5)
    axs[0].set_xscale("log")
    axs[0].set_xlabel("predictor: median Q/K gradient right after the switch")
    a_h = h5_alpha(p)
    for r in (r for r in rows if r["alpha"] == a_h):
        t = censored(r["recovered_after"], p.branch_steps)
        axs[1].scatter(
            [r["predictor"]],
            [t],
            marker="o" if r["recovered_after"] is not None else "x",
            color=f"C{A.index(a_h)}",
            s=30,
        )
    axs[1].set_xscale("log")
    axs[1].set_xlabel(f"predictor after the switch to {a_h:g}")
    axs[1].set_ylabel("steps to recovery (x: none)")
    fig.tight_layout()
    return fig


def fig_weight_trace(p, trace: dict):
    """Through each driver: the last block's token srank (top) and the weights' stable rank per kind (median
    over blocks; bottom), against the step; the shaded band is the alpha ramp."""
    import matplotlib.pyplot as plt

    from ...book.panels import MAX_COLS

    seeds = list(trace)
    ncol = min(MAX_COLS, len(seeds))
    nrow = -(-len(seeds) // ncol)
    fig, axs = plt.subplots(2 * nrow, ncol, figsize=(4.2 * ncol, 4.2 * nrow), sharex=True, squeeze=False)
    for j in range(len(seeds), nrow * ncol):
        axs[2 * (j // ncol), j % ncol].axis("off")
        axs[2 * (j // ncol) + 1, j % ncol].axis("off")
    for j, s in enumerate(seeds):
        t = trace[s]
        top, bottom = axs[2 * (j // ncol), j % ncol], axs[2 * (j // ncol) + 1, j % ncol]
        for ax in (top, bottom):
            ax.axvspan(p.ramp_start, p.ramp_end, color="0.92")
        top.plot(t["step"], t["token_srank"], "k-", lw=1)
        top.axhline(p.threshold, color="gray", lw=0.6)
        top.set_title(f"seed {s}", fontsize=9)
        for i, k in enumerate(("query", "key", "value", "mlp_in", "mlp_out")):
            bottom.plot(t["step"], t[k], color=f"C{i}", lw=1, label=k)
        bottom.set_xlabel("step", fontsize=8)
        bottom.tick_params(labelbottom=True)
        if j % ncol == 0:
            top.set_ylabel("token srank, last block", fontsize=8)
            bottom.set_ylabel("weight stable rank", fontsize=8)
    fig.tight_layout()
    _legend_below(fig, [axs[1, 0]], ncol=5)
    return fig
