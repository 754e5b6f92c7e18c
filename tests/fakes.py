"""Shared by the verdict tests: a stand-in for :class:`rankcollapse.book.notebook.Chapter` that records
what a chapter's ``judge_*`` functions glue, record and decide, without a run."""

from types import SimpleNamespace


class RecordingChapter:
    """``glue``, ``value`` and ``verdict`` as a chapter's judges call them, kept in ``glued``, ``values`` and
    ``verdicts`` (``verdicts[cid]``: ``{"verdict", "claim", "rule", "evidence"}``); ``results.values`` is
    where :mod:`rankcollapse.book.checks` marks a value's kind and lines."""

    def __init__(self):
        self.glued, self.values, self.verdicts = {}, {}, {}
        self.results = SimpleNamespace(values={})

    def glue(self, name, v):
        self.glued[name] = v

    def value(self, name, v, **kw):
        assert name not in self.values, f"value {name!r} recorded twice"
        self.values[name] = v
        self.results.values.setdefault(name, {})
        return v

    def verdict(self, cid, v, *, claim, rule, evidence):
        self.verdicts[cid] = {"verdict": v, "claim": claim, "rule": rule, "evidence": evidence}
        return v
