"""Model surgery on real transformers classes (tiny random configs): each variant removes what it says, keeps
the rest, and the unmodified model is bit-identical to the original."""

import pytest
import torch

from rankcollapse.core.metrics import norm_1, norm_1inf, relative_residual, res
from rankcollapse.hf import models as hm
from rankcollapse.hf import surgery as sg

ARCHS = sg.ARCHITECTURES
SIZE = dict(layers=3, hidden=32, heads=4, vocab=100, embedding=16)


def tiny(arch, seed=0):
    return hm.random_model(arch, seed, **SIZE).model


def ids(n_seq=2, n=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, SIZE["vocab"], (n_seq, n), generator=g)


def mlp_params(model, arch):
    """The parameters of the MLP sublayers (including their LayerNorm)."""
    out = []
    for lay in sg.layers_of(model, arch):
        if arch == "bert":
            mods = [lay.intermediate, lay.output]
        elif arch == "albert":
            mods = [lay.ffn, lay.ffn_output, lay.full_layer_layer_norm]
        else:
            mods = [lay.ff]
        out += [p for m in mods for p in m.parameters()]
    return out


def value_params(model, arch):
    """Value weights and biases of every attention (zeroing them makes Attn(x) W_O a constant row)."""
    out = []
    for lay in sg.layers_of(model, arch):
        if arch == "bert":
            out += [lay.attention.self.value.weight, lay.attention.self.value.bias]
        elif arch == "albert":
            out += [lay.attention.value.weight, lay.attention.value.bias]
        else:
            out += [lay.rel_attn.v]
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_unmodified_bit_identical(arch):
    m, ref = tiny(arch), tiny(arch)
    x = ids()
    h0 = hm.hidden_states(ref, x)
    assert torch.equal(hm.hidden_states(m, x), h0)  # seeded construction is reproducible
    with sg.variant(m, "transformer"):
        assert sg.patched_attributes(m) == []
        assert torch.equal(hm.hidden_states(m, x), h0)
    for v in sg.VARIANTS:  # apply and restore every variant: the model is the original again
        with sg.variant(m, v):
            pass
        assert sg.patched_attributes(m) == []
        assert torch.equal(hm.hidden_states(m, x), h0)


@pytest.mark.parametrize("arch", ARCHS)
def test_variants_differ_and_count_states(arch):
    m = tiny(arch)
    x = ids()
    outs = {}
    for v in sg.VARIANTS:
        with sg.variant(m, v):
            outs[v] = hm.hidden_states(m, x)
        assert outs[v].shape == (SIZE["layers"] + 1, 2, 9, SIZE["hidden"])
    for a in sg.VARIANTS:
        for b in sg.VARIANTS:
            if a < b:
                assert not torch.equal(outs[a][-1], outs[b][-1]), (a, b)
        assert torch.equal(outs[a][0], outs["transformer"][0])  # the embedding output is never touched


@pytest.mark.parametrize("arch", ARCHS)
def test_mlp_removed_means_independent_of_mlp(arch):
    """SAN and SAN+skip do not depend on any MLP parameter (nor, for ALBERT, on full_layer_layer_norm);
    SAN+MLP and the transformer do."""
    m = tiny(arch)
    x = ids()
    before = {}
    for v in sg.VARIANTS:
        with sg.variant(m, v):
            before[v] = hm.hidden_states(m, x)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in mlp_params(m, arch):
            p.add_(torch.randn(p.shape, generator=g))
    for v in sg.VARIANTS:
        with sg.variant(m, v):
            after = hm.hidden_states(m, x)
        if v in ("SAN", "SAN+skip"):
            assert torch.equal(after, before[v]), v
        else:
            assert not torch.allclose(after[-1], before[v][-1]), v


@pytest.mark.parametrize("arch", ARCHS)
def test_skip_removed_means_no_identity_path(arch):
    """With the value maps zeroed, Attn(x) W_O is one constant row: without the skip the attention sublayer's
    output LN(const) is the same for every token (zero residual); with the skip, LN(x + const) keeps x's
    residual."""
    m = tiny(arch)
    with torch.no_grad():
        for p in value_params(m, arch):
            p.zero_()
    x = ids()
    with sg.variant(m, "SAN"):
        h = hm.hidden_states(m, x)
    assert float(res(h[1]).abs().max()) < 1e-5
    with sg.variant(m, "SAN+MLP"):  # the MLP acts per token on identical tokens: still uniform
        assert float(res(hm.hidden_states(m, x)[1]).abs().max()) < 1e-5
    with sg.variant(m, "SAN+skip"):
        assert float(relative_residual(hm.hidden_states(m, x)[1]).min()) > 0.1


def test_bert_self_output_ignores_input():
    m = tiny("bert")
    so = m.encoder.layer[0].attention.output
    h, a, b = (torch.randn(1, 5, 32, generator=torch.Generator().manual_seed(i)) for i in range(3))
    with torch.no_grad():
        orig = so(h, a)
        assert torch.equal(orig, so.LayerNorm(so.dense(h) + a))
        with sg.variant(m, "SAN"):
            assert torch.equal(so(h, a), so(h, b))
            assert torch.equal(so(h, a), so.LayerNorm(so.dense(h)))


def test_albert_attention_projection_matches_original():
    m = tiny("albert")
    att = m.encoder.albert_layer_groups[0].albert_layers[0].attention
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        orig, _ = att(x)
        proj, _ = sg.albert_attention_projection(att, x)
        assert torch.equal(orig, att.LayerNorm(x + proj))
        with sg.variant(m, "SAN+MLP"):
            noskip, _ = att(x)
        assert torch.equal(noskip, att.LayerNorm(proj))


def test_xlnet_post_attention_ignores_h():
    m = tiny("xlnet")
    ra = m.layer[0].rel_attn
    g = torch.Generator().manual_seed(4)
    vec, h1, h2 = (
        torch.randn(5, 1, 4, 8, generator=g),
        torch.randn(5, 1, 32, generator=g),
        torch.randn(5, 1, 32, generator=g),
    )
    with torch.no_grad(), sg.variant(m, "SAN"):
        assert torch.equal(ra.post_attention(h1, vec), ra.post_attention(h2, vec))
    with torch.no_grad():
        assert not torch.equal(ra.post_attention(h1, vec), ra.post_attention(h2, vec))


def test_unknown_variant_and_double_patch():
    m = tiny("bert")
    with pytest.raises(ValueError):
        sg.apply(m, "SAN+LN")
    p = sg.apply(m, "SAN")
    with pytest.raises(RuntimeError):
        sg.apply(m, "SAN")
    p.restore()
    assert sg.patched_attributes(m) == []


# -- per-head weights against the modules' own attention output ---------------------------------------
def _projection(m, arch, l, X):
    """The attention sublayer's output before the residual add and LayerNorm, computed by the real
    modules."""
    with torch.no_grad():
        if arch == "bert":
            lay = m.encoder.layer[l]
            ctx, _ = lay.attention.self(X)
            return lay.attention.output.dense(ctx)
        if arch == "albert":
            return sg.albert_attention_projection(
                m.encoder.albert_layer_groups[0].albert_layers[0].attention, X
            )[0]
        got = {}
        ra = m.layer[l].rel_attn

        def grab(self, h, attn_vec, residual=True):
            got["v"] = torch.einsum("ibnd,hnd->ibh", attn_vec, self.o)
            return type(self).post_attention(self, h, attn_vec, residual)

        p = sg.Patches()
        p.bind(ra, "post_attention", grab)
        try:
            m(input_ids=ids(), use_mems=False)
        finally:
            p.restore()
        return got["v"].transpose(0, 1)


@pytest.mark.parametrize("arch", ARCHS)
def test_head_outputs_reconstruct_attention(arch):
    m = tiny(arch)
    x = ids()
    hs, att = hm.hidden_states(m, x, attentions=True)
    Ws = hm.head_weights(m, arch)
    assert len(Ws) == SIZE["layers"]
    l = 1
    Y = hm.head_outputs(Ws[l], hs[l], att[l]).sum(dim=1)
    ref = _projection(m, arch, l, hs[l]).double()
    torch.testing.assert_close(res(Y), res(ref), rtol=1e-4, atol=1e-6)


def test_head_betas_match_bounds_on_a_san():
    from rankcollapse.chapters.real_models.experiments import head_betas
    from rankcollapse.core.bounds import beta_heads
    from rankcollapse.core.san import SAN, SANConfig

    san = SAN.random(SANConfig(2, 3, 8, d_qk=2, d_v=2), 0)  # 8 is not 3 heads' width: given per head
    W = {"WQ": san.WQ[1], "WK": san.WK[1], "WV": san.WV[1], "WO": san.WO[1]}
    torch.testing.assert_close(head_betas(W), beta_heads(san, 1))
    # by hand for one head
    h = 2
    expect = norm_1(san.WQ[1, h] @ san.WK[1, h].T) * norm_1inf(san.WV[1, h] @ san.WO[1, h])
    torch.testing.assert_close(head_betas(W)[h], expect)
