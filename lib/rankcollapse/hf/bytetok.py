"""A byte-level tokenizer built in code, for the models :mod:`rankcollapse.hf.pretrain` trains: no download.

Ids ``0..255`` are the bytes of the UTF-8 text (``id == byte``); four special tokens follow, with the same
ids in every architecture and each architecture's own names:

=========  ========  =========  =========
id         BERT      ALBERT     XLNet
=========  ========  =========  =========
256 (pad)  [PAD]     <pad>      <pad>
257 (mask) [MASK]    [MASK]     <mask>
258 (cls)  [CLS]     [CLS]      <cls>
259 (sep)  [SEP]     [SEP]      <sep>
=========  ========  =========  =========

A sequence is framed as each architecture frames one sentence: BERT and ALBERT ``[CLS] text [SEP]``, XLNet
``text <sep> <cls>`` (XLNet puts its classification token last). :func:`hf_tokenizer` builds the same
mapping as a Hugging Face fast tokenizer (``tokenizers``' byte-level pre-tokenizer, a BPE model with no
merges, the framing as its post-processor), saved beside the weights so that
``AutoTokenizer.from_pretrained(folder)`` gives these ids back offline.
"""

from __future__ import annotations

import functools

import torch

N_BYTES = 256
PAD, MASK, CLS, SEP = 256, 257, 258, 259
VOCAB = 260
ROLES = {"pad": PAD, "mask": MASK, "cls": CLS, "sep": SEP}
NAMES = {
    "bert": {"pad": "[PAD]", "mask": "[MASK]", "cls": "[CLS]", "sep": "[SEP]"},
    "albert": {"pad": "<pad>", "mask": "[MASK]", "cls": "[CLS]", "sep": "[SEP]"},
    "xlnet": {"pad": "<pad>", "mask": "<mask>", "cls": "<cls>", "sep": "<sep>"},
}


def _arch(arch: str) -> str:
    if arch not in NAMES:
        raise ValueError(f"architecture {arch!r} has no byte tokenizer; allowed: {', '.join(NAMES)}")
    return arch


def encode(text: str) -> list[int]:
    """The ids of ``text``: its UTF-8 bytes."""
    return list(text.encode("utf-8"))


def decode(ids) -> str:
    """The text of ``ids``, special tokens left out (invalid UTF-8 replaced)."""
    return bytes(int(i) for i in ids if 0 <= int(i) < N_BYTES).decode("utf-8", errors="replace")


def template(arch: str) -> tuple[list[int], list[int]]:
    """The special ids before and after one sequence: BERT/ALBERT ``[CLS]`` / ``[SEP]``, XLNet - /
    ``<sep> <cls>``."""
    return ([], [SEP, CLS]) if _arch(arch) == "xlnet" else ([CLS], [SEP])


def content_offset(arch: str) -> int:
    """Where a sequence's text starts in its framed ids (1 after BERT's ``[CLS]``, 0 for XLNet)."""
    return len(template(arch)[0])


def frame(arch: str, content: torch.Tensor) -> torch.Tensor:
    """``content`` (..., n) framed with the architecture's special ids: (..., n + 2)."""
    pre, post = template(arch)
    shape = content.shape[:-1]
    parts = [torch.full((*shape, 1), i, dtype=content.dtype) for i in pre]
    parts.append(content)
    parts.extend(torch.full((*shape, 1), i, dtype=content.dtype) for i in post)
    return torch.cat(parts, dim=-1)


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (what ``tokenizers``' byte-level
    pre-tokenizer emits)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def hf_tokenizer(arch: str):
    """A ``transformers`` fast tokenizer with exactly these ids and this framing (``add_special_tokens``),
    for :meth:`save_pretrained` into a checkpoint folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    names = NAMES[_arch(arch)]
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(N_BYTES)}
    specials = [names[r] for r in ROLES]  # in id order: pad, mask, cls, sep
    for role, name in names.items():
        vocab[name] = ROLES[role]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    cls, sep = names["cls"], names["sep"]
    single = f"$A {sep} {cls}" if arch == "xlnet" else f"{cls} $A {sep}"
    tok.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(cls, CLS), (sep, SEP)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=names["pad"],
        mask_token=names["mask"],
        cls_token=names["cls"],
        sep_token=names["sep"],
        model_max_length=10**9,
    )
