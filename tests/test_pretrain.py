"""Checkpoints the book trains itself (hf/pretrain.py, issue #19): the three architectures learn more than
byte frequencies on held-out text; an interrupted run resumes bit for bit; a stored model is loaded, not
trained again; corrupt checkpoints and folders are never used; bad input is refused by name; the saved
folder loads through hf/models.py and yields attention matrices."""

import threading
import time
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from rankcollapse import store
from rankcollapse.hf import bytetok
from rankcollapse.hf import models as hm
from rankcollapse.hf import pretrain as pt
from rankcollapse.hf import surgery as sg

ARCHS = pt.ARCHITECTURES
# one recipe for the three: 2 layers, width 32, 150 updates of 64 windows of 30 bytes (6-9 s of a core each)
LEARN = dict(layers=2, hidden=32, heads=2, ctx=32, batch=64, steps=150, lr=3e-3, warmup=15, eval_seqs=128)
# the mechanics: a few updates of a tiny model
TINY = dict(
    layers=2, hidden=32, heads=2, ctx=32, batch=8, steps=16, lr=3e-3, checkpoint_every=8, eval_seqs=4
)


def quiet(msg):
    pass


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """The three architectures trained at :data:`LEARN` in a store of their own: {arch: (spec, folder)}."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("states")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RCBOOK_STATES", str(root))
        for arch in ARCHS:
            spec = pt.PretrainSpec(arch, **LEARN)
            out[arch] = (spec, pt.pretrained(spec, log=quiet))
    return root, out


@pytest.fixture
def states(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path))
    return tmp_path


# -- text and tokenizer -------------------------------------------------------------------------------------
def test_corpus_split_is_fixed_and_disjoint():
    c = pt.corpus()
    assert c.sha256 == hm.corpus()[1]  # the chapter's text, hashed the same way
    assert len(c.heldout_topics) == c.n_topics // 10 and c.heldout.numel() > 5_000
    assert c.train.numel() > 8 * c.heldout.numel()
    assert 0 <= int(c.train.min()) and int(c.train.max()) < 256
    from pydoc_data.topics import topics

    held = set(c.heldout_topics)
    assert held == {k for i, k in enumerate(sorted(topics)) if i % 10 == 9}
    assert bytetok.decode(c.heldout.tolist()).startswith(topics[c.heldout_topics[0]][:200])
    lp = pt.unigram_logprobs(c)
    assert lp.shape == (256,) and abs(float(lp.exp().sum()) - 1) < 1e-12


@pytest.mark.parametrize("arch", ARCHS)
def test_hf_tokenizer_gives_the_byte_ids(arch):
    tok = bytetok.hf_tokenizer(arch)
    text = hm.corpus()[0][:20_000] + " naïve – ☃ \u00a0end"
    assert tok(text, add_special_tokens=False)["input_ids"] == bytetok.encode(text)
    pre, post = bytetok.template(arch)
    assert tok("ab")["input_ids"] == pre + [97, 98] + post
    assert len(tok) == bytetok.VOCAB
    assert tok.convert_tokens_to_ids(bytetok.NAMES[arch]["mask"]) == bytetok.MASK
    assert tok.pad_token_id == bytetok.PAD and tok.cls_token_id == bytetok.CLS
    assert bytetok.decode(bytetok.encode(text)) == text


# -- the objectives -----------------------------------------------------------------------------------------
def test_masked_lm_batch():
    spec = pt.PretrainSpec("bert", **TINY)
    n, k = pt.content_len(spec), pt.n_predicted(spec)
    assert (n, k) == (30, round(0.15 * 30))
    g = torch.Generator().manual_seed(0)
    content = torch.randint(0, 256, (400, n), generator=g)
    b = pt.make_batch(spec, content, g)
    ids, pos, lab = b["input_ids"], b["positions"], b["labels"]
    assert ids.shape == (400, 32) and (ids[:, 0] == bytetok.CLS).all() and (ids[:, -1] == bytetok.SEP).all()
    assert pos.shape == lab.shape == (400, k) and (pos >= 1).all() and (pos <= n).all()
    assert all(len(set(r)) == k for r in pos.tolist())
    assert torch.equal(lab, content.gather(1, pos - 1))
    got = ids.gather(1, pos)
    share_mask = float((got == bytetok.MASK).float().mean())
    share_kept = float((got == lab).float().mean())
    assert 0.75 < share_mask < 0.85 and 0.07 < share_kept < 0.14
    # outside the predicted positions the text is untouched
    rest = torch.ones_like(ids, dtype=torch.bool).scatter_(1, pos, False)
    assert torch.equal(ids[rest], bytetok.frame("bert", content)[rest])


def test_permutation_lm_batch():
    spec = pt.PretrainSpec("xlnet", **TINY)
    n, k = pt.content_len(spec), pt.n_predicted(spec)
    assert k == 5
    g = torch.Generator().manual_seed(1)
    content = torch.randint(0, 256, (50, n), generator=g)
    b = pt.make_batch(spec, content, g)
    ids, pm, tm, lab = b["input_ids"], b["perm_mask"], b["target_mapping"], b["labels"]
    assert torch.equal(ids, bytetok.frame("xlnet", content))
    assert (ids[:, -2] == bytetok.SEP).all() and (ids[:, -1] == bytetok.CLS).all()
    assert tm.shape == (50, k, 32) and pm.shape == (50, 32, 32)
    tgt = tm.argmax(-1)  # target positions in factorisation order
    assert torch.equal(lab, content.gather(1, tgt))
    assert (tgt < n).all()  # the special tokens are never predicted
    for r in range(50):
        t = tgt[r].tolist()
        others = [j for j in range(32) if j not in t]
        m = pm[r]
        assert m[:, others].sum() == 0  # the context (and sep, cls) is visible to everyone
        assert m[others][:, t].all()  # the context sees no target
        for a, i in enumerate(t):  # a target sees exactly the targets before it in the order
            assert m[i, t].tolist() == [0.0] * a + [1.0] * (k - a)


def test_lr_schedule():
    spec = pt.PretrainSpec("bert", **{**TINY, "steps": 100, "warmup": 10})
    lrs = [pt.lr_at(spec, s) for s in range(100)]
    assert lrs[9] == pytest.approx(spec.lr) and lrs[0] == pytest.approx(spec.lr / 10)
    assert (
        lrs[10] == pytest.approx(spec.lr) and all(a > b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] > 0
    )


# -- learning -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_each_architecture_learns_more_than_byte_frequencies(learned, arch):
    spec, folder = learned[1][arch]
    info = pt.read_info(folder)
    assert info["spec"] == spec.to_dict() and info["model_class"] == pt.MODEL_CLASSES[arch]
    assert len(info["losses"]) == spec.steps and info["resumed_from"] == 0
    assert info["predicted_bytes"] == spec.eval_seqs * pt.n_predicted(spec)
    # the unigram loss of the held-out bytes is about 3.2 nats; a model of the context does better
    assert 3.0 < info["unigram_loss"] < 3.5
    assert info["heldout_loss"] < info["unigram_loss"] - 0.05, info
    assert info["losses"][-1] < info["losses"][0] - 1.5  # from ~log(260) at initialisation


@pytest.mark.parametrize("arch", ARCHS)
def test_saved_folder_loads_through_the_books_loader(learned, arch):
    spec, folder = learned[1][arch]
    assert hm.check_checkpoint(f"model_{arch}", str(folder), arch) == arch
    ld = hm.load_pretrained(str(folder))
    assert type(ld.model) is hm.model_class(arch) and ld.arch == arch and ld.tokenizer is not None
    assert ld.model.config._attn_implementation == "eager"
    ids = hm.token_windows(ld.tokenizer, hm.corpus()[0], 3, spec.ctx)
    pre, post = bytetok.template(arch)
    assert ids.shape == (3, spec.ctx) and int(ids.max()) < ld.model.config.vocab_size
    assert ids[0, : len(pre)].tolist() == pre and ids[0, spec.ctx - len(post) :].tolist() == post
    H, A = hm.hidden_states(ld.model, ids, attentions=True)
    assert H.shape == (spec.layers + 1, 3, spec.ctx, spec.hidden)
    assert A.shape == (spec.layers, 3, spec.heads, spec.ctx, spec.ctx)
    assert torch.allclose(A.sum(-1), torch.ones(()), atol=1e-5)
    # the chapter's surgery and Q2 weights work on it
    for v in sg.VARIANTS:
        with sg.variant(ld.model, v):
            assert hm.hidden_states(ld.model, ids).shape == H.shape
    assert torch.equal(hm.hidden_states(ld.model, ids), H)
    assert len(hm.head_weights(ld.model, arch)) == spec.layers
    # the base class straight from transformers, too
    m = hm.model_class(arch).from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.no_grad():
        out = m(input_ids=ids, output_attentions=True)
    assert len(out.attentions) == spec.layers and torch.equal(out.attentions[0].float(), A[0])
    # the weights are the trained ones: the base model's share of the saved pretraining weights
    saved = load_file(str(folder / "model.safetensors"))
    prefix = "transformer." if arch == "xlnet" else f"{arch}."
    shared = [name for name in m.state_dict() if prefix + name in saved]
    assert len(shared) > 10
    for name in shared:
        assert torch.equal(m.state_dict()[name], saved[prefix + name]), name


def test_a_stored_model_is_loaded_not_trained(learned, monkeypatch):
    root, models = learned
    monkeypatch.setenv("RCBOOK_STATES", str(root))
    spec, folder = models["bert"]
    before = {f.name: f.stat().st_mtime_ns for f in folder.iterdir()}
    lines = []
    c0 = time.process_time()
    assert pt.pretrained(spec, log=lines.append) == folder
    assert time.process_time() - c0 < 2.0
    assert len(lines) == 1 and "loaded from the store" in lines[0]
    assert {f.name: f.stat().st_mtime_ns for f in folder.iterdir()} == before
    # checkpoint_every does not change the weights, so it is not part of the key
    assert pt.pretrained(replace(spec, checkpoint_every=7), log=quiet) == folder


def test_the_key():
    a = pt.PretrainSpec("bert", **TINY)
    assert pt.content_key(a) == pt.content_key(replace(a, checkpoint_every=3))
    assert pt.content_key(a) != pt.content_key(replace(a, seed=1))
    assert pt.content_key(a) != pt.content_key(replace(a, arch="albert"))
    assert pt.PretrainSpec("bert", hidden=32, heads=2, intermediate=None) == pt.PretrainSpec(
        "bert", hidden=32, heads=2, intermediate=128
    )
    assert pt.state_folder(a).parent == store.states_root() / "pretrain"


# -- resumption and corruption ------------------------------------------------------------------------------
class Stop(Exception):
    pass


def stop_at(step):
    def log(msg):
        if f": step {step}/" in msg:
            raise Stop(msg)

    return log


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def same_run(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    ia, ib = pt.read_info(a), pt.read_info(b)
    for k in ("losses", "heldout_loss", "unigram_loss", "key"):
        assert ia[k] == ib[k], k


@pytest.mark.parametrize("arch", ARCHS)
def test_interrupted_run_resumes_bit_identically(tmp_path, monkeypatch, arch):
    torch.set_num_threads(1)
    spec = pt.PretrainSpec(arch, **TINY)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "a"))
    ref = pt.pretrained(spec, log=quiet, log_every=4)
    monkeypatch.setenv("RCBOOK_STATES", str(tmp_path / "b"))
    # killed at step 12, four steps after the checkpoint of step 8 (the log callback raises)
    with pytest.raises(Stop):
        pt.pretrained(spec, log=stop_at(12), log_every=4)
    ck = pt.state_folder(spec) / "ckpt.pt"
    assert ck.exists() and not (pt.state_folder(spec) / "model").exists()
    lines = []
    got = pt.pretrained(spec, log=lines.append, log_every=4)
    assert any("resumed from checkpoint at step 8/16" in s for s in lines)
    assert pt.read_info(got)["resumed_from"] == 8 and not ck.exists()
    same_run(ref, got)
    # and training moved the weights away from a fresh initialisation
    torch.manual_seed(spec.seed)
    fresh = pt.build_model(spec).state_dict()
    w = weights(got)
    assert any(not torch.equal(fresh[k], w[k]) for k in w if k in fresh)


def test_a_corrupt_checkpoint_is_not_used(states, capsys):
    spec = pt.PretrainSpec("bert", **TINY)
    with pytest.raises(Stop):
        pt.pretrained(spec, log=stop_at(12), log_every=4)  # a checkpoint at step 8
    ck = pt.state_folder(spec) / "ckpt.pt"
    data = bytearray(ck.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ck.write_bytes(bytes(data))
    lines = []
    got = pt.pretrained(spec, log=lines.append, log_every=4)
    assert f"{ck} is corrupt" in capsys.readouterr().err
    assert not any("resumed" in s for s in lines) and pt.read_info(got)["resumed_from"] == 0
    assert list(ck.parent.glob("ckpt.pt.corrupt-*"))
    # a partial one (truncated, its content hash written before it) is not used either
    with pytest.raises(Stop):
        pt.pretrained(replace(spec, seed=1), log=stop_at(12), log_every=4)
    ck1 = pt.state_folder(replace(spec, seed=1)) / "ckpt.pt"
    ck1.write_bytes(ck1.read_bytes()[:1000])
    got1 = pt.pretrained(replace(spec, seed=1), log=quiet, log_every=4)
    assert pt.read_info(got1)["resumed_from"] == 0 and f"{ck1} is corrupt" in capsys.readouterr().err
    assert pt.pretrained(spec, log=quiet) == got  # stored now


def test_a_corrupt_folder_is_trained_again(states, capsys):
    spec = pt.PretrainSpec("albert", **TINY)
    folder = pt.pretrained(spec, log=quiet)
    w = folder / "model.safetensors"
    good = w.read_bytes()
    w.write_bytes(good[:-8] + b"\0" * 8)
    assert "model.safetensors does not match" in pt.check_folder(folder)
    lines = []
    assert pt.pretrained(spec, log=lines.append) == folder
    assert "is corrupt" in capsys.readouterr().err and any(": step 16/16" in s for s in lines)
    assert w.read_bytes() == good and pt.check_folder(folder) is None
    assert list(folder.parent.glob("model.corrupt-*"))
    # pretrain.json itself edited: its content hash no longer matches
    info = folder / pt.INFO
    info.write_text(info.read_text().replace('"heldout_loss": ', '"heldout_loss": 1'))
    assert pt.check_folder(folder).startswith(f"{pt.INFO}: ")


def test_one_process_trains_a_spec_the_others_wait(states):
    """A second caller waits on the lock and then loads what the first one saved."""
    spec = pt.PretrainSpec("xlnet", **{**TINY, "steps": 8})
    folder = pt.state_folder(spec)
    lines, done = [], {}
    with store.lock(folder / ".lock"):
        t = threading.Thread(target=lambda: done.setdefault("path", pt.pretrained(spec, log=lines.append)))
        t.start()
        time.sleep(0.5)
        assert t.is_alive() and not lines  # waiting for the lock
        pt._train(spec, folder, folder.name.rsplit("-", 1)[1], quiet, 4, None)  # "the other process"
    t.join(timeout=60)
    assert not t.is_alive() and done["path"] == folder / "model"
    assert len(lines) == 1 and "loaded from the store" in lines[0]


# -- bad input ----------------------------------------------------------------------------------------------
BAD = [
    ({"arch": "gpt2"}, "'arch'.*one of bert, albert, xlnet"),
    ({"arch": "bert", "layers": 0}, "'layers' = 0.*between 1 and"),
    ({"arch": "bert", "layers": 2.0}, "'layers'.*integer"),
    ({"arch": "bert", "hidden": -8}, "'hidden' = -8"),
    ({"arch": "bert", "hidden": 30, "heads": 4}, "'heads' = 4.*divide hidden = 30"),
    ({"arch": "bert", "heads": 0}, "'heads' = 0"),
    ({"arch": "bert", "intermediate": 0}, "'intermediate' = 0"),
    ({"arch": "bert", "ctx": 4}, "'ctx' = 4.*between 8 and"),
    ({"arch": "bert", "batch": 0}, "'batch' = 0"),
    ({"arch": "bert", "steps": 0}, "'steps' = 0"),
    ({"arch": "bert", "steps": True}, "'steps'.*integer"),
    ({"arch": "bert", "checkpoint_every": 0}, "'checkpoint_every' = 0"),
    ({"arch": "bert", "lr": 0.0}, "'lr' = 0.0.*> 0"),
    ({"arch": "bert", "lr": float("nan")}, "'lr'.*finite"),
    ({"arch": "bert", "seed": -1}, "'seed' = -1"),
    ({"arch": "bert", "steps": 10, "warmup": 11}, "'warmup' = 11.*at most steps = 10"),
    ({"arch": "bert", "dropout": 1.0}, "'dropout' = 1.0.*< 1"),
    ({"arch": "bert", "weight_decay": -0.1}, "'weight_decay'"),
    ({"arch": "bert", "embedding": 64}, "'embedding'.*ALBERT"),
    ({"arch": "albert", "embedding": 0}, "'embedding' = 0"),
    ({"arch": "bert", "init_range": 0}, "'init_range'"),
    ({"arch": "bert", "eval_seqs": 0}, "'eval_seqs' = 0"),
    ({"arch": "bert", "width": 3}, "unknown parameter.*width.*allowed: arch"),
    ({"layers": 2}, "'arch' is missing"),
]


@pytest.mark.parametrize("d,match", BAD, ids=[f"{i}-{m.split('.*')[0]}" for i, (_, m) in enumerate(BAD)])
def test_bad_input_is_refused_by_name(d, match, states):
    with pytest.raises(pt.PretrainError, match=match) as e:
        pt.PretrainSpec.from_dict(d)
    assert isinstance(e.value, ValueError)
    assert not any(states.iterdir())  # before any work


def test_bad_call_is_refused_by_name(states):
    with pytest.raises(ValueError, match="PretrainSpec"):
        pt.pretrained({"arch": "bert"})
    with pytest.raises(ValueError, match="'log_every' = 0"):
        pt.pretrained(pt.PretrainSpec("bert", **TINY), log_every=0)
    assert not any(states.iterdir())
