"""Which device a run uses: ``cpu``, ``cuda`` (an error, before any work, when there is none) or ``auto``.

``auto`` depends on the profile. The smoke and full profiles are checked against records made on the CPU
(data/records), so ``auto`` keeps them on the CPU: a GPU's different kernels would move values the records
pin to tolerances set on the CPU; ``--device cuda`` still asks for the GPU explicitly. The paper profile
has no CPU record to match and is the one worth a GPU, so there ``auto`` takes CUDA when it is present."""

from __future__ import annotations

import torch

from .params import ParameterError

GPU_AUTO_PROFILES = ("paper",)  # profiles whose ``auto`` takes a CUDA GPU when there is one


def resolve_device(name: str, profile: str | None = None) -> torch.device:
    """The device for ``name`` (auto/cpu/cuda) at ``profile``; a profile of None counts as not paper
    (``auto`` means the CPU)."""
    if name == "auto":
        gpu = profile in GPU_AUTO_PROFILES and torch.cuda.is_available()
        return torch.device("cuda" if gpu else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ParameterError(
            "parameter 'device' = 'cuda' is not allowed here: no CUDA device is available "
            "(use 'cpu' or 'auto')"
        )
    return torch.device(name)
