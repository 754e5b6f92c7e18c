"""Which device a run uses: ``auto`` (CUDA when present), ``cpu`` or ``cuda`` (an error, before any work,
when there is none)."""

from __future__ import annotations

import torch

from .params import ParameterError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ParameterError(
            "parameter 'device' = 'cuda' is not allowed here: no CUDA device is available "
            "(use 'cpu' or 'auto')"
        )
    return torch.device(name)
