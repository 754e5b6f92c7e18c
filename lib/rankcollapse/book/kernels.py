"""Floating-point kernel variants: another machine, simulated on this one.

PyTorch picks its CPU kernels (vector width of ATen's own loops, MKL's code path for matrix products,
oneDNN's instruction set) from the processor at start-up. Three switches force other choices, and with them
other rounding, exactly as another machine would:

* ``native``     what this processor selects (AVX-512 here),
* ``avx2``       a machine without AVX-512: ``ATEN_CPU_CAPABILITY=avx2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
                 ``ONEDNN_MAX_CPU_ISA=AVX2``,
* ``scalar``     ATen's unvectorised loops, MKL's SSE4.2 path, oneDNN's SSE4.1 path.

Real machines mix them, because each library picks its path by its own test (:data:`MIXES`):

* ``zen4``       ATen on its AVX-512 loops, oneDNN on AVX-512, MKL on its AVX2 path: MKL picks its code
                 path by processor vendor, so this is what an AMD Zen 4 computes with,
* ``aten-avx2``  ATen on its AVX2 loops, MKL and oneDNN on AVX-512: an AVX-512 Intel processor running a
                 torch whose ATen does not dispatch its AVX-512 kernels there.

The switches act when torch is imported, so they are set in the environment of the processes that compute
(the runner exports them before it starts a chapter's kernel, whose training workers inherit them).
``rcbook run --kernels avx2`` runs under a variant into its own build root ``build/kernels-avx2/`` (with its
own trained states, so nothing trained under one variant is reused under another); ``rcbook record
--spread avx2,scalar,zen4,aten-avx2`` derives every recorded tolerance from the deviations between the
variants (:func:`rankcollapse.book.results.record_with_spread`); ``bash make.sh test`` checks a second pass,
under a variant :func:`second_pass` draws, against the same recorded file. ``tests/test_kernels.py`` shows
that each variant changes the numbers.
"""

from __future__ import annotations

import os

SWITCHES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")

VARIANTS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "scalar": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
    },
    "zen4": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
}
PURE = ("native", "avx2", "scalar")  # one instruction set for every library
MIXES = ("zen4", "aten-avx2")  # each library on its own path, as real machines do
SPREAD = ("avx2", "scalar", *MIXES)  # the variants every record's tolerances are measured over, with native


def env_for(variant: str) -> dict[str, str]:
    """The switches of ``variant`` (an unknown name is a ``ValueError`` naming the allowed ones)."""
    if variant not in VARIANTS:
        raise ValueError(f"kernel variant '{variant}' is not known; allowed: {', '.join(VARIANTS)}")
    return dict(VARIANTS[variant])


def apply(variant: str) -> None:
    """Set (or, for ``native``, clear) the switches in this process's environment, for the processes it
    starts."""
    env = env_for(variant)
    for k in SWITCHES:
        if k in env:
            os.environ[k] = env[k]
        else:
            os.environ.pop(k, None)


def active() -> dict:
    """What this process computes with: the switches set, the variant they name, and torch's CPU
    capability."""
    env = {k: os.environ[k] for k in SWITCHES if k in os.environ}
    name = next((n for n, e in VARIANTS.items() if e == env), "custom")
    out = {"variant": name, "switches": env}
    try:
        import torch

        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:  # pragma: no cover - torch is a dependency
        pass
    return out


def second_pass(cpu_capability: str, draw: int) -> str:
    """The variant of ``bash make.sh test``'s second pass: on a processor whose ATen runs AVX-512, one of
    :data:`MIXES` (``draw`` picks which: the commit, so a rerun of one commit repeats its pass); elsewhere
    ``scalar``, since there the AVX2 switches change nothing and the pass would repeat the first."""
    if not cpu_capability.upper().startswith("AVX512"):
        return "scalar"
    return MIXES[draw % len(MIXES)]
