"""rankcollapse: the library behind the rank-collapse companion book.

Chapters (``chapters/*.md``) import this package, call it, plot and glue; all
computation lives here. Start with :mod:`rankcollapse.notebook` (what a chapter
calls first), :mod:`rankcollapse.san` (the networks), :mod:`rankcollapse.paths`
(Theorem 2.1) and :mod:`rankcollapse.metrics` (residuals and ranks).
"""
__version__ = "0.1.0"
