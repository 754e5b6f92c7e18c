"""One module per chapter: its parameter schema (``SCHEMA``), its experiments and its figures.

``chapters/<name>.md`` narrates; ``rankcollapse.chapters.<name with _ for ->`` computes. The registry is
read from ``_toc.yml`` (:func:`rankcollapse.store.chapter_registry`): a page of the table of contents with a
module here is a chapter, in book order. Chapter modules never import one another; what two chapters share
lives in the science (``core``, ``toy``, ``lm``, ``hf``) or, for parameters, in :mod:`.common`.
"""

from __future__ import annotations

import importlib

from .. import store

CHAPTERS = store.chapter_registry()


def module(name: str):
    if name not in CHAPTERS:
        raise KeyError(f"unknown chapter '{name}'; chapters: {', '.join(CHAPTERS)}")
    return importlib.import_module(CHAPTERS[name])


def schema(name: str):
    return module(name).SCHEMA
