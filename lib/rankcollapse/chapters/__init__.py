"""One package per chapter, one file per role: ``__init__`` (the parameter schema ``SCHEMA``, ``validate``
and what the page calls), ``experiments``, ``figures``, ``verdicts`` and ``report``.

``chapters/<name>.md`` narrates; ``rankcollapse.chapters.<name with _ for ->`` computes. The registry is
read from ``_toc.yml`` (:func:`rankcollapse.store.chapter_registry`): a page of the table of contents with a
package here is a chapter, in book order. Chapters never import one another; what two chapters share lives
in the science (``core``, ``toy``, ``lm``, ``hf``), in Part III's study layer (``repair``) or, for the
parameters the repair chapters share, in :mod:`rankcollapse.book.repair_params`.
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
