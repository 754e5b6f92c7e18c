"""The kernel variants are another machine: under each, the same training gives other numbers.

This is what makes the second pass of ``bash make.sh test`` (every smoke chapter under ``avx2``) a real
check rather than a copy of the first. Documented by hand: ``rcbook run all --profile smoke --kernels avx2``
then ``rcbook check --profile smoke --kernels avx2``."""

import json
import os
import subprocess
import sys

import pytest

from rankcollapse.book import cli, kernels, machine

SNIPPET = r"""
import json, torch
torch.set_num_threads(1)
from rankcollapse.lm import training as tr
from rankcollapse.book import cli, kernels
from rankcollapse.lm.model import LMConfig
spec = tr.RunSpec(model=LMConfig(depth=3, d_model=24, heads=2, ctx=16), seed=0, batch=4)
st = tr.new_state(spec)
tr.train(spec, st, 20)
print(json.dumps({"loss": st.hist["loss"], "srank": st.hist["srank"], "kernels": kernels.active()}))
"""


def run_under(variant):
    env = {k: v for k, v in os.environ.items() if k not in kernels.SWITCHES}
    env.update(kernels.env_for(variant), OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def native():
    return run_under("native")


@pytest.mark.parametrize("variant", [v for v in kernels.VARIANTS if v != "native"])
def test_variant_changes_the_numbers(native, variant):
    other = run_under(variant)
    assert other["kernels"]["variant"] == variant
    if variant != "scalar" and not str(native["kernels"].get("cpu_capability")).upper().startswith("AVX512"):
        pytest.skip(f"this processor already computes with {native['kernels']['cpu_capability']}")
    if variant == machine.native_mix(machine.cpu_vendor()):
        # an AMD processor is the zen4 mix: MKL takes its AVX2 path here already, the switch changes nothing
        assert (other["loss"], other["srank"]) == (native["loss"], native["srank"])
        return
    assert (other["loss"], other["srank"]) != (native["loss"], native["srank"]), (
        f"variant {variant} computed bit-identical numbers: it does not simulate another machine"
    )
    # ... yet the same computation, to float32 round-off at the start
    assert abs(other["loss"][0] - native["loss"][0]) < 1e-4


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="allowed: native, avx2, scalar, zen4, aten-avx2"):
        kernels.env_for("avx9")


def test_mixes_set_one_library_each_and_are_in_the_spread():
    """A mix is a real machine's combination: one library off its native path, the others on it."""
    for m in kernels.MIXES:
        assert len(kernels.env_for(m)) == 1 and set(kernels.env_for(m)) <= set(kernels.SWITCHES)
        assert m in kernels.SPREAD
    assert set(kernels.SPREAD) == set(kernels.VARIANTS) - {"native"}
    assert kernels.env_for("zen4") == {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}  # MKL picks its path by vendor


def test_second_pass_draws_a_mix_where_aten_runs_avx512():
    drawn = {kernels.second_pass("AVX512", d) for d in range(10)}
    assert drawn == set(kernels.MIXES)
    assert kernels.second_pass("AVX512", 7) == kernels.second_pass("AVX512", 7)  # one commit, one pass
    assert kernels.second_pass("AVX2", 0) == kernels.second_pass("DEFAULT", 1) == "scalar"
    # an AMD processor already computes as the zen4 mix: its second pass is the other one
    assert {machine.second_pass("AVX512", d, "AuthenticAMD") for d in range(10)} == {"aten-avx2"}
    assert {machine.second_pass("AVX512", d, "GenuineIntel") for d in range(10)} == set(kernels.MIXES)
    assert machine.second_pass("AVX2", 3, "AuthenticAMD") == "scalar"


def test_cpu_vendor_reads_cpuinfo(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert machine.cpu_vendor(str(f)) == "AuthenticAMD" and machine.native_mix("AuthenticAMD") == "zen4"
    assert machine.cpu_vendor(str(tmp_path / "none")) == "" and machine.native_mix("") is None


COMPILED = r"""
import json, math, torch
torch.set_num_threads(1)
from rankcollapse.lm import training as tr
from rankcollapse.lm.model import LMConfig
spec = tr.RunSpec(model=LMConfig(depth=2, d_model=48, heads=4, ctx=16), seed=0, batch=4, engine="compiled")
st = tr.new_state(spec)
try:
    tr.train(spec, st, 10)
    ok = all(math.isfinite(float(p.sum())) for p in st.model.parameters())
except Exception as e:  # the probe's SVD refuses NaN hidden states
    ok = False
print(json.dumps({"finite": ok}))
"""


def test_each_variant_compiles_into_its_own_cache(tmp_path, monkeypatch):
    """torch.compile's cache does not key on ATen's CPU capability: an ``avx2`` process that finds the
    ``native`` process's compiled code runs it and its weights are NaN after 10 updates (measured, at this
    size and at the repair chapters'). Each variant therefore compiles into a folder of its own, and an
    ``avx2`` run after a ``native`` one trains finite numbers."""
    monkeypatch.setenv("RCBOOK_INDUCTOR_CACHE", str(tmp_path / "inductor"))
    dirs = {v: cli.inductor_cache(v) for v in kernels.VARIANTS}
    assert len(set(dirs.values())) == len(dirs)
    for variant in ("native", "avx2"):
        env = {k: v for k, v in os.environ.items() if k not in kernels.SWITCHES}
        env.update(kernels.env_for(variant), OMP_NUM_THREADS="1")
        monkeypatch.setattr(os, "environ", dict(os.environ))
        monkeypatch.setenv("RCBOOK_BUILD", str(tmp_path / "build"))  # use_kernels leaves a given root
        cli.use_kernels(variant)
        env["TORCHINDUCTOR_CACHE_DIR"] = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        assert env["TORCHINDUCTOR_CACHE_DIR"] == dirs[variant]
        out = subprocess.run([sys.executable, "-c", COMPILED], env=env, capture_output=True, text=True)
        assert json.loads(out.stdout.strip().splitlines()[-1])["finite"], (variant, out.stderr[-2000:])
