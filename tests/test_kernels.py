"""The kernel variants are another machine: under each, the same training gives other numbers.

This is what makes the second pass of ``bash make.sh test`` (every smoke chapter under ``avx2``) a real
check rather than a copy of the first. Documented by hand: ``rcbook run all --profile smoke --kernels avx2``
then ``rcbook check --profile smoke --kernels avx2``."""

import json
import os
import subprocess
import sys

import pytest

from rankcollapse.book import kernels

SNIPPET = r"""
import json, torch
torch.set_num_threads(1)
from rankcollapse.lm import training as tr
from rankcollapse.book import kernels
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


@pytest.mark.parametrize("variant", ["avx2", "scalar"])
def test_variant_changes_the_numbers(native, variant):
    other = run_under(variant)
    assert other["kernels"]["variant"] == variant
    if (
        other["kernels"].get("cpu_capability") == native["kernels"].get("cpu_capability")
        and variant == "avx2"
    ):
        pytest.skip(f"this processor already computes with {native['kernels']['cpu_capability']}")
    assert (other["loss"], other["srank"]) != (native["loss"], native["srank"]), (
        f"variant {variant} computed bit-identical numbers: it does not simulate another machine"
    )
    # ... yet the same computation, to float32 round-off at the start
    assert abs(other["loss"][0] - native["loss"][0]) < 1e-4


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="allowed: native, avx2, scalar"):
        kernels.env_for("avx9")
