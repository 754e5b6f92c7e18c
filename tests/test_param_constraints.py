"""Every chapter refuses an invalid combination of parameters before its kernel starts.

:data:`COMBINATIONS` holds, per chapter, values that the schema accepts one by one (each alone resolves,
and with the other parameters at their smoke defaults passes the chapter's ``validate``) but that together
break a constraint the chapter's code relies on; each row becomes one test case. The runner's
``prepare`` (what ``rcbook run`` calls before starting a kernel) must refuse the combination with a
:class:`ParameterError` naming every parameter involved.
"""

import json
import time
from types import SimpleNamespace

import pytest

from rankcollapse.book import runner
from rankcollapse.book.params import PROFILES, ParameterError
from rankcollapse.chapters import CHAPTERS, module, schema

# (chapter, values each valid alone but not together, whether each alone also passes the whole of
# ``prepare`` with the other parameters at their smoke defaults)
COMBINATIONS = [
    ("decomposition", {"d_model": 4, "recon_heads": [8]}, True),
    ("decomposition", {"big_d": 36, "big_heads": 8}, True),
    ("decomposition", {"recon_heads": [4], "recon_layers": [6], "max_paths": 1000}, True),
    # heads [32] alone is refused by the smoke widths [16, 32] (16 % 32), so only its range is checked alone
    ("collapse", {"widths": [16], "heads": [32]}, False),
    ("collapse", {"widths": [24], "heads": [16]}, True),
    ("collapse", {"phase_d": 18, "phase_heads": 4}, True),
    ("skip", {"d_model": 36, "heads": 8}, True),
    ("skip", {"search_d": 12, "search_heads": 8}, True),
    ("skip", {"subspace_dim": 20, "d_model": 16}, True),
    ("mlp", {"d_model": 36, "n_heads": 8}, True),
    ("layernorm", {"n_tokens": 12, "d_model": 10}, True),
    ("layernorm", {"d_model": 18, "n_heads": 4}, True),
    ("real-models", {"q2_seq": 3, "n_seq": 2}, True),
    ("real-models", {"init_hidden": 96, "init_heads": 64}, True),
    ("toy-tasks", {"circle_n": 20, "circle_starts": 30}, True),
    ("toy-tasks", {"sort_d": 36, "sort_heads": 8}, True),
    ("repair-driver", {"ramp_start": 600, "settle_steps": 400}, True),
    ("repair-driver", {"d_model": 60, "heads": 8}, True),
    ("repair-treatments", {"calib_steps": 300, "branch_steps": 200}, True),
    ("repair-treatments", {"ramp_start": 400, "branch_steps": 200}, True),
    ("repair-path", {"slow_ramp_factor": 3, "slow_ramp_steps": 500}, True),
    ("repair-path", {"ramp_start": 400, "branch_steps": 200}, True),
    ("repair-lr-burst", {"ramp_start": 600, "settle_steps": 400}, True),
]


def _id(row):
    name, values, _ = row
    return f"{name}:" + "+".join(values)


def test_every_chapter_has_a_combination_and_a_validate():
    assert {name for name, _, _ in COMBINATIONS} == set(CHAPTERS)
    for name in CHAPTERS:
        assert callable(getattr(module(name), "validate", None)), f"{name} has no validate(p)"


@pytest.mark.parametrize("row", COMBINATIONS, ids=[_id(r) for r in COMBINATIONS])
def test_values_valid_alone_are_refused_together(row):
    name, values, alone_passes = row
    sch = schema(name)
    for k, v in values.items():
        sch.resolve({k: v}, "smoke")  # (a) each value alone is inside its own range
        if alone_passes:
            runner.prepare(name, {k: v}, "smoke", "cpu")
    with pytest.raises(ParameterError) as e:  # (b) together: refused before any work
        runner.prepare(name, values, "smoke", "cpu")
    msg = str(e.value)
    for k, v in values.items():
        assert f"'{k}'" in msg, f"{name}: the error does not name '{k}': {msg}"


def _real_models_paper_checkpoints_cached() -> bool:
    from rankcollapse.hf import models as hm

    p = schema("real-models").resolve({}, "paper")
    try:
        for arch in ("bert", "albert", "xlnet"):
            hm.check_checkpoint(f"model_{arch}", p[f"model_{arch}"], arch)
    except hm.CheckpointError:
        return False
    return True


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", list(CHAPTERS))
def test_defaults_pass_validate(name, profile):
    """Each profile's defaults pass the chapter's checks (resolve, then validate; then all of prepare)."""
    p = schema(name).resolve({}, profile)
    if name == "real-models" and profile == "paper":
        # the paper's checkpoints are hub names that must be in the local cache; the checks across the
        # other parameters run without them
        module(name).validate(SimpleNamespace(**(p | {f"model_{a}": "none" for a in p["architectures"]})))
        if not _real_models_paper_checkpoints_cached():
            pytest.skip("the paper's pretrained checkpoints are not in the Hugging Face cache")
    module(name).validate(SimpleNamespace(**p))
    runner.prepare(name, {}, profile, "cpu")


# -- the two reported defects: refused by the CLI with exit status 2, before any kernel ------------------
@pytest.mark.parametrize(
    "name,args",
    [
        ("collapse", ["-p", "widths", "[16]", "-p", "heads", "[32]"]),
        ("decomposition", ["-p", "d_model", "4", "-p", "recon_heads", "[8]"]),
    ],
)
def test_cli_refuses_before_a_kernel_starts(name, args, capsys, tmp_path, monkeypatch):
    from rankcollapse.book.cli import main

    monkeypatch.setenv("RCBOOK_BUILD", str(tmp_path))

    def no_kernel(*a, **kw):
        raise AssertionError("a kernel was started")

    monkeypatch.setattr(runner, "_execute", no_kernel)
    t0 = time.perf_counter()
    assert main(["run", name, *args, "--profile", "smoke", "--device", "cpu"]) == 2
    assert time.perf_counter() - t0 < 30
    err = capsys.readouterr().err
    assert err.startswith("rcbook: error:") and len(err.strip().splitlines()) == 1, err
    for k in args[1::3]:
        assert f"'{k}'" in err, err
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written


# -- the science refuses a per-head width it would otherwise have to round ----------------------------------
def test_san_config_refuses_a_width_heads_do_not_divide():
    from rankcollapse.core.san import SANConfig, SANConfigError

    assert issubclass(SANConfigError, ValueError)
    with pytest.raises(SANConfigError, match="not divisible"):
        SANConfig(1, 8, 4)  # d_qk would be max(1, 4 // 8) = 1: another network
    with pytest.raises(SANConfigError, match="not divisible"):
        SANConfig(1, 3, 16)  # d_qk would be 16 // 3 = 5
    with pytest.raises(SANConfigError, match="d_v"):
        SANConfig(1, 3, 16, d_qk=4)  # d_v still defaults
    with pytest.raises(SANConfigError, match="d_qk must be >= 1"):
        SANConfig(1, 2, 16, d_qk=0)
    c = SANConfig(1, 3, 16, d_qk=5, d_v=5)  # explicit widths: any
    assert (c.dqk, c.dv) == (5, 5)
    assert (SANConfig(2, 4, 32).dqk, SANConfig(2, 4, 32).dv) == (8, 8)


def test_decomposition_reconstruction_keeps_its_floor_widths():
    """The smoke grid has H = 3 at d = 16: the reconstruction gives d // H explicitly, as before."""
    from rankcollapse.chapters.decomposition import experiments

    rows = experiments.reconstruction([1], [3], 4, 16, 1.0, 100, 0, "cpu", log=lambda m: None)
    assert rows and all(r["err_paths"] < 1e-5 for r in rows)


# -- checkpoint folders: a missing path or a broken config.json is named as such ---------------------------
def _refused(tmp_path, value) -> str:
    with pytest.raises(ParameterError) as e:
        runner.prepare("real-models", {"model_bert": str(value)}, "smoke", "cpu")
    msg = str(e.value)
    assert "model_bert" in msg and "hf download" not in msg, msg
    return msg


def test_missing_checkpoint_folder_is_named(tmp_path):
    assert "no such folder" in _refused(tmp_path, tmp_path / "no" / "such" / "checkpoint")
    assert "no such folder" in _refused(tmp_path, "./no-such-checkpoint-here")
    f = tmp_path / "weights.bin"
    f.write_bytes(b"\0")
    assert "is a file, not a checkpoint folder" in _refused(tmp_path, f)


def test_checkpoint_folder_without_config_is_named(tmp_path):
    assert "has no config.json" in _refused(tmp_path, tmp_path)


@pytest.mark.parametrize("text", ['{"model_type": "bert", ', "not json at all", ""])
def test_broken_config_json_is_named(tmp_path, text):
    (tmp_path / "config.json").write_text(text)
    (tmp_path / "model.safetensors").write_bytes(b"")
    msg = _refused(tmp_path, tmp_path)
    assert "config.json is not valid JSON" in msg and str(tmp_path) in msg


def test_config_json_that_is_no_object_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps([1, 2]))
    assert "is not a JSON object" in _refused(tmp_path, tmp_path)


def test_config_transformers_cannot_read_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert "transformers cannot read the config of folder" in _refused(tmp_path, tmp_path)


def test_checkpoint_folder_without_weights_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert "has no model weights" in _refused(tmp_path, tmp_path)


def test_context_longer_than_the_checkpoints_positions_is_refused(tmp_path):
    from rankcollapse.chapters import real_models as rm
    from rankcollapse.hf import models as hm

    cfg = json.loads((hm.packaged_path() / "config.json").read_text())
    folder = tmp_path / "short"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg | {"max_position_embeddings": 16}))
    (folder / "model.safetensors").write_bytes(b"")
    rm.check_context("model_bert", str(folder), 16)
    with pytest.raises(ParameterError, match="'n_tokens' = 32 and 'model_bert'.*at most 16"):
        rm.check_context("model_bert", str(folder), 32)


def test_require_helpers_name_the_parameters():
    from rankcollapse.book.params import require_distinct, require_divisible

    NS = SimpleNamespace

    require_divisible(NS(d=48, h=4), "d", "h")
    with pytest.raises(ParameterError, match=r"'d' = 48 and 'h' = 5: d must be divisible by h \(x; 48 % 5"):
        require_divisible(NS(d=48, h=5), "d", "h", "x")
    require_distinct(NS(s=[2147483000, 2147483001]), "s", "seed")  # ints compare exactly, not as :g
    with pytest.raises(ParameterError, match=r"'s' = \[0.1, 0.1000001\] repeats a scale \(as printed"):
        require_distinct(NS(s=[0.1, 0.1000001]), "s", "scale")  # one name in the record
    with pytest.raises(ParameterError, match="repeats a treatment"):
        require_distinct(NS(t=["hinge", "hinge"]), "t", "treatment")
