"""Toy networks around the SAN, their path-restricted outputs, and the toy-task data."""

import math

import numpy as np
import pytest
import torch

from rankcollapse.chapters.toy_tasks import experiments as tk
from rankcollapse.core.san import SAN
from rankcollapse.toy import nets as tn
from rankcollapse.toy import tasks as tt


def _params(cfg, seed=0):
    p = tn.init_params(cfg, seed, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed + 1)
    p["b"] = torch.randn(p["b"].shape, generator=g, dtype=torch.float64) * 0.3  # exercise the bias term
    return p


def test_batched_san_equals_san():
    cfg = tn.ToyNetConfig(3, 2, 8, 3, vocab=5)
    p = _params(cfg)
    X = torch.randn(4, 6, 8, dtype=torch.float64)
    base = SAN(cfg.san_config(), p["WQ"], p["WK"], p["WV"], p["WO"], p["b"])
    fast = tn.san_of(cfg, p)
    hb, ab = base.forward(X)
    hf, af = fast.forward(X)
    assert torch.allclose(hb[-1], hf[-1], rtol=1e-12, atol=1e-12)
    assert all(torch.allclose(a, b, atol=1e-13) for a, b in zip(ab, af))


def test_exact_restriction_at_full_length_is_the_network():
    cfg = tn.ToyNetConfig(4, 3, 12, 2, d_in=2)
    p = _params(cfg)
    x = torch.rand(5, 7, 2, dtype=torch.float64)
    upto, only, full = tn.path_restricted_logits(cfg, p, x)
    assert upto.shape == (5, 5, 7, 2) and only.shape == upto.shape
    assert torch.allclose(upto[-1], full, atol=1e-10)
    assert torch.allclose(only[0], upto[0])  # length 0: the same single component


def test_length_zero_is_embedding_only():
    cfg = tn.ToyNetConfig(3, 2, 8, 4, vocab=6, n_pos=5)
    p = _params(cfg)
    x = torch.randint(0, 6, (3, 5))
    upto, _, _ = tn.path_restricted_logits(cfg, p, x)
    san = tn.san_of(cfg, p)
    X = tn.embed(cfg, p, x)
    _, atts = san.forward(X)
    from rankcollapse.core.paths import length_components

    bias = length_components(san, X, atts).bias
    assert torch.allclose(upto[0], tn.head(cfg, p, X + bias))


def test_sampled_paths_and_path_output():
    g = torch.Generator().manual_seed(0)
    paths = tn.sample_paths(6, 3, 2, 50, g)
    assert all(sum(h > 0 for h in path) == 2 and max(path) <= 3 for path in paths)
    cfg = tn.ToyNetConfig(2, 2, 8, 2, d_in=2)
    p = _params(cfg)
    san = tn.san_of(cfg, p)
    X = torch.randn(3, 4, 8, dtype=torch.float64)
    assert torch.equal(tn.path_output(san, X, [0, 0]), X)  # the path that skips everything
    # a length-1 path through layer 0, head 2: P X W + b with P from X itself
    P = san.attention(0, X)[:, 1]
    want = P @ X @ san.WV[0, 1] @ san.WO[0, 1] + san.b[0]
    assert torch.allclose(tn.path_output(san, X, [2, 0]), want)
    # sampling at length 0 returns the embedding, renormalised: equals the exact length-0 readout without
    # bias
    x = torch.rand(3, 4, 2, dtype=torch.float64)
    got = tn.sampled_path_logits(cfg, p, x, 0, 3, g)
    assert torch.allclose(
        got, tn.head(cfg, p, tn.embed(cfg, p, x)), atol=1e-3
    )  # LN is scale-free up to its eps


def test_circle_dataset_is_one_rotation_step():
    X, Y = tt.circle_dataset(1000, 0.3, torch.float64)
    assert X.shape == (499, 2, 2)
    a = 2 * math.pi / 1000
    R = torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]], dtype=torch.float64)
    assert torch.allclose(X @ R, Y, atol=1e-12)
    assert torch.allclose(X.norm(dim=-1), torch.full((499, 2), 0.3, dtype=torch.float64))


def test_trajectory_metrics():
    n, T = 1000, 300
    P = tt.circle_points(n, 0.3, torch.float64)
    true = torch.stack([P[torch.arange(T + 1)], P[torch.arange(T + 1) + 500]], 1)
    m = tk.trajectory_metrics(true, n)
    assert m["radius_err"] < 1e-12 and abs(m["separation"] - 1) < 1e-12 and abs(m["progress"] - 1) < 1e-9
    assert abs(m["spread"] - 1) < 1e-12 and m["kept"] and not m["diverged"]
    stuck = torch.zeros(T + 1, 2, 2, dtype=torch.float64)
    stuck[0] = true[0]
    m = tk.trajectory_metrics(stuck, n)
    assert m["radius_err"] > 0.99 and m["separation"] == 0 and not m["kept"] and not m["diverged"]
    blown = true.clone()
    blown[10:] = float("inf")
    m = tk.trajectory_metrics(blown, n)
    assert m["diverged"] and not m["kept"] and math.isfinite(m["radius_err"]) and m["separation"] is None


def test_hull_labels_hand_case():
    pts = np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5], [0.2, 0.3]])
    assert tt.hull_labels(pts).tolist() == [1, 1, 1, 1, 0, 0]
    g = torch.Generator().manual_seed(0)
    x, y = tt.hull_batch(g, 3)
    assert x.shape == (3, 10, 2) and y.shape == (3, 10) and (y.sum(1) >= 3).all()


def test_sort_batch():
    x, y = tt.sort_batch(torch.Generator().manual_seed(0), 5)
    assert torch.equal(y, torch.sort(x, -1).values) and x.max() < 10


def test_memorisation_ceiling_and_data():
    ids = torch.tensor([[1, 1, 2, 1], [3, 4, 3, 3]])
    labels = torch.tensor([[0, 1, 1, 1], [1, 0, 0, 0]])
    # seq 0: id 1 labels (0,1,1) -> 2, id 2 -> 1; seq 1: id 3 labels (1,0,0) -> 2, id 4 -> 1
    assert tt.memorisation_ceiling(ids, labels) == 6 / 8
    ids, labels, info = tt.memorisation_data(4, 16, 50, 0)
    assert ids.shape == labels.shape == (4, 16) and ids.max() < 50 and 0.5 <= info["ceiling"] <= 1
    assert tt.stdlib_words()[:1]  # the text ships with Python


def test_classes_of_a_rollout():
    n, T = 1000, 300
    P = tt.circle_points(n, 0.3, torch.float64)
    true = torch.stack([P[torch.arange(T + 1)], P[torch.arange(T + 1) + 500]], 1)
    assert tk.trajectory_metrics(true, n)["cls"] == "kept"
    merged = true.clone()
    merged[50:, 1] = merged[50:, 0]  # both tokens on one point that still moves: rank one, not stopped
    m = tk.trajectory_metrics(merged, n)
    assert m["cls"] == "collapsed" and not m["still"] and m["step"] > 0.5
    stopped = merged.clone()
    stopped[50:] = stopped[50]
    m = tk.trajectory_metrics(stopped, n)
    assert m["cls"] == "collapsed" and m["still"]
    out = true * torch.linspace(1, 20, T + 1, dtype=torch.float64).view(-1, 1, 1)  # radius grows
    assert tk.trajectory_metrics(out, n)["cls"] == "diverged"
    pair = true.clone()
    pair[:] = true[0]  # two distinct points that never move: neither kept nor merged
    assert tk.trajectory_metrics(pair, n)["cls"] == "other"


def test_circle_starts_and_batched_rollouts():
    S = tk.circle_starts(1000, 4)
    assert torch.allclose(S[0], torch.tensor([[0.3, 0.0], [-0.3, 0.0]]), atol=1e-7)
    assert torch.allclose(S[:, 0], -S[:, 1], atol=1e-7)  # antipodal pairs
    cfg = tk.circle_config(4, "skip", "bert")
    p = tn.init_params(cfg, 0)
    many = tk.rollouts(cfg, p, "skip", 20, S)
    for k in range(4):
        one = tk.rollouts(cfg, p, "skip", 20, S[k : k + 1])[:, 0]
        assert torch.allclose(many[:, k], one, atol=1e-6)
    assert torch.allclose(tk.rollout(cfg, p, "skip", 20), many[:, 0], atol=1e-5)


def test_sort_position_prior_is_the_best_input_blind_predictor():
    modes, acc = tt.sort_position_prior(8, 10)
    x, y = tt.sort_batch(torch.Generator().manual_seed(0), 200000)
    emp = [int(torch.bincount(y[:, k], minlength=10).argmax()) for k in range(8)]
    assert modes == emp
    assert abs(float((y == torch.tensor(modes)).double().mean()) - acc) < 0.005
    assert 0.3 < acc < 0.4  # far above the paper's chance of 0.1


def test_bert_toy_network_exact_paths_and_its_layers():
    cfg = tn.ToyNetConfig(3, 2, 8, 3, vocab=6, n_pos=5, arch="bert", final_ln=False, weight_scale=0.5)
    p = _params(cfg)
    g = torch.Generator().manual_seed(3)
    p["ln1_g"] = 1 + 0.2 * torch.randn(p["ln1_g"].shape, generator=g, dtype=torch.float64)
    p["ln1_b"] = 0.2 * torch.randn(p["ln1_b"].shape, generator=g, dtype=torch.float64)
    x = torch.randint(0, 6, (4, 5), generator=g)
    upto, only, full = tn.path_restricted_logits(cfg, p, x)
    assert torch.allclose(upto[-1], full, atol=1e-10)
    # the network is the authors': input LayerNorm, then LN(X + attention(X) + b) per layer
    X = tn.layer_norm(p["emb"][x] + p["pos"][:5], p["lnin_g"], p["lnin_b"])
    san = tn.san_of(cfg, p)
    for l in range(3):
        P = san.attention(l, X)
        X = tn.layer_norm(X + san.mix(l, P, X) + p["b"][l], p["ln1_g"][l], p["ln1_b"][l])
    assert torch.allclose(X @ p["W_out"] + p["b_out"], full, atol=1e-12)
    with pytest.raises(ValueError, match="final_ln"):
        tn.ToyNetConfig(2, 2, 8, 3, vocab=6, arch="bert")
    with pytest.raises(ValueError, match="arch"):
        tn.ToyNetConfig(2, 2, 8, 3, vocab=6, arch="gpt")


def test_sampled_path_in_the_bert_network_is_the_layers_own_layernorm():
    cfg = tn.ToyNetConfig(2, 2, 8, 2, d_in=2, arch="bert", final_ln=False)
    p = _params(cfg)
    san = tn.san_of(cfg, p)
    X = torch.randn(3, 4, 8, dtype=torch.float64)
    P = san.attention(0, X)[:, 1]
    want = tn.layer_norm(X + P @ X @ san.WV[0, 1] @ san.WO[0, 1] + san.b[0], p["ln1_g"][0], p["ln1_b"][0])
    assert torch.allclose(tn.path_output(san, X, [2, 0]), want)


def test_l90():
    assert tk.l90_of([0.3, 0.5, 0.95, 1.0], 1.0, 0.3) == 2  # 0.95 - 0.3 >= 0.9 * 0.7
    assert tk.l90_of([0.3, 0.3, 0.3, 1.0], 1.0, 0.3) == 3
    assert tk.l90_of([1.0, 1.0], 1.0, 0.3) == 0
