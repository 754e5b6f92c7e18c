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
def fig_block_grads(p, grads: dict):
    """Figure 2: per-block gradient norms, log scale; numerically zero values drawn as open markers at the
    floor."""
    import matplotlib.pyplot as plt

    seeds = list(grads)
    fig, axs = plt.subplots(1, len(seeds), figsize=(5.2 * len(seeds), 3.6), squeeze=False)
    for ax, s in zip(axs[0], seeds):
        g = grads[s]
        blocks = np.arange(1, len(g["collapsed"]["task_attn"]) + 1)
        series = [
            (
                "task, attn input (collapsed)",
                g["collapsed"]["task_attn"],
                g["collapsed"]["task_attn_zero"],
                "C0",
                "o-",
            ),
            ("task, Q/K (collapsed)", g["collapsed"]["task_qk"], g["collapsed"]["task_qk_zero"], "C1", "s-"),
            (
                "hinge, attn input (collapsed)",
                g["collapsed"]["term_attn"],
                g["collapsed"]["term_attn_zero"],
                "C3",
                "^-",
            ),
            (
                "task, attn input (healthy)",
                g["healthy"]["task_attn"],
                g["healthy"]["task_attn_zero"],
                "C2",
                "o--",
            ),
            ("task, Q/K (healthy)", g["healthy"]["task_qk"], g["healthy"]["task_qk_zero"], "C2", "s:"),
        ]
        pos = [v for _, vals, _, _, _ in series for v in vals if v > 0]
        floor = min(pos) / 10 if pos else 1e-12
        for lab, vals, zero, c, st in series:
            v = np.array([max(x, floor) for x in vals])
            ax.plot(blocks, v, st, color=c, ms=4, lw=1, label=lab, mfc="none" if st.endswith(":") else c)
            z = np.array(zero)
            if z.any():
                ax.scatter(blocks[z], v[z], s=60, facecolors="none", edgecolors="k", zorder=4)
        ax.scatter([], [], s=60, facecolors="none", edgecolors="k", label="numerically zero (float32)")
        ax.set_yscale("log")
        ax.set_xlabel("block")
        ax.set_ylabel("gradient norm")
        ax.set_title(f"seed {s}", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_switch_qk(p, grads, after):
    """The query-key gradient per block at the collapse, right after the switch, and after the first
    updates."""
    import matplotlib.pyplot as plt

    seeds = list(grads)
    fig, axs = plt.subplots(1, len(seeds), figsize=(5.2 * len(seeds), 3.4), squeeze=False)
    for ax, s in zip(axs[0], seeds):
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
        ax.set_xlabel("block")
        ax.set_ylabel("|grad task| on Q/K weights")
        ax.set_title(f"seed {s}", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def fig_hysteresis(p, events, drivers, rev, slow: dict | None = None):
    """Figure 3: last-block srank against alpha, down the driver's ramp and back up the reversed ramp (and
    the slow reversed ramp, dotted, where ``slow`` has it)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for i, e in enumerate(events):
        h = drivers[e["seed"]]["hist"]
        k = [j for j, t in enumerate(h["m_step"]) if t >= p.ramp_start]
        ax.plot(
            [h["alpha"][j] for j in k],
            tr.rolling_median([h["srank"][j][-1] for j in k], p.recover_window),
            "-",
            color=f"C{i}",
            lw=1,
            label=f"seed {e['seed']}: ramp down",
        )
        r = rev[e["seed"]]["hist"]
        ax.plot(
            r["alpha"],
            tr.rolling_median(last_srank(r), p.recover_window),
            "--",
            color=f"C{i}",
            lw=1,
            label=f"seed {e['seed']}: ramp back up",
        )
        if slow and e["seed"] in slow:
            r = slow[e["seed"]]["hist"]
            ax.plot(
                r["alpha"],
                tr.rolling_median(last_srank(r), p.recover_window),
                ":",
                color=f"C{i}",
                lw=1.2,
                label=f"dotted: back up {p.slow_ramp_factor}x slower" if i == 0 else None,
            )
    ax.axhline(p.threshold, color="gray", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("alpha (skip scale)")
    ax.set_ylabel("srank, last block (median)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_switches(p, events, hold):
    """Last-block srank after switches held at each alpha."""
    import matplotlib.pyplot as plt

    A = list(p.switch_alphas)
    ncol = min(4, len(A))
    nrow = -(-len(A) // ncol)
    fig, axs = plt.subplots(nrow, ncol, figsize=(3.3 * ncol, 2.8 * nrow), sharey=True, squeeze=False)
    for ax in axs.flat[len(A) :]:
        ax.axis("off")
    for ax, a in zip(axs.flat, A):
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
    for row in axs:
        row[0].set_ylabel("srank, last block (median)")
    axs[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_delays(p, rows):
    """Figure 7: steps to recovery after the switch against the further collapsed steps before it; crosses at
    the top: no recovery within the branch."""
    import matplotlib.pyplot as plt

    A = list(p.delay_alphas)
    seeds = sorted({r["seed"] for r in rows})
    fig, axs = plt.subplots(1, len(A), figsize=(3.8 * len(A), 3.0), sharey=True, squeeze=False)
    top = p.branch_steps + CENSOR
    for ax, a in zip(axs[0], A):
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
    axs[0, 0].set_ylabel("steps to recovery")
    from matplotlib.lines import Line2D

    axs[0, 0].legend(
        [Line2D([], [], color=f"C{i}", marker="o", lw=0.8) for i in range(len(seeds))],
        [f"seed {s}" for s in seeds],
        fontsize=7,
    )
    fig.tight_layout()
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

    seeds = list(trace)
    fig, axs = plt.subplots(2, len(seeds), figsize=(4.6 * len(seeds), 4.6), sharex=True, squeeze=False)
    for j, s in enumerate(seeds):
        t = trace[s]
        for ax in axs[:, j]:
            ax.axvspan(p.ramp_start, p.ramp_end, color="0.92")
        axs[0, j].plot(t["step"], t["token_srank"], "k-", lw=1)
        axs[0, j].axhline(p.threshold, color="gray", lw=0.6)
        axs[0, j].set_title(f"seed {s}", fontsize=9)
        for i, k in enumerate(("query", "key", "value", "mlp_in", "mlp_out")):
            axs[1, j].plot(t["step"], t[k], color=f"C{i}", lw=1, label=k)
        axs[1, j].set_xlabel("step")
    axs[0, 0].set_ylabel("token srank, last block")
    axs[1, 0].set_ylabel("weight stable rank")
    axs[1, 0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return fig
