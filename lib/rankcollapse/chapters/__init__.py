"""One module per chapter: its parameter schema (``SCHEMA``), its experiments and its figures.

``chapters/<name>.md`` narrates; ``rankcollapse.chapters.<module>`` computes.
The registry below maps chapter names (as used by ``rcbook`` and in ``_toc.yml``)
to those modules, in book order.
"""
from __future__ import annotations

import importlib

CHAPTERS = {
    "decomposition": "rankcollapse.chapters.decomposition",
    "collapse": "rankcollapse.chapters.collapse",
    "skip": "rankcollapse.chapters.skip",
    "mlp": "rankcollapse.chapters.mlp",
    "layernorm": "rankcollapse.chapters.layernorm",
    "real-models": "rankcollapse.chapters.real_models",
    "toy-tasks": "rankcollapse.chapters.toy_tasks",
    "repair-driver": "rankcollapse.chapters.repair_driver",
    "repair-treatments": "rankcollapse.chapters.repair_treatments",
    "repair-path": "rankcollapse.chapters.repair_path",
    "repair-lr-burst": "rankcollapse.chapters.repair_lr_burst",
}


def module(name: str):
    if name not in CHAPTERS:
        raise KeyError(f"unknown chapter '{name}'; chapters: {', '.join(CHAPTERS)}")
    return importlib.import_module(CHAPTERS[name])


def schema(name: str):
    return module(name).SCHEMA
