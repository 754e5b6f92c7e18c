"""Every verdict of the book is decided by a rule that can reach each of its outcomes.

Each chapter module lists its rules in ``VERDICTS = {claim id: verdict_<id>}``; each rule is a pure function
``verdict_<id>(evidence) -> (verdict, reason)``. Its test file ``tests/test_verdicts_<module>.py`` holds
``CASES = {claim id: {outcome: synthetic evidence}}``. This test checks the coverage: the cases are exactly
the rules, every rule has a case for supported, refuted and inconclusive (and no other), and each case comes
out as its label (so a rule that cannot reach an outcome fails here) with a one-line reason that quotes a
number of its evidence. The per-chapter files keep only the edge cases this shared loop does not cover.
"""

import importlib.util
from pathlib import Path

import pytest

from rankcollapse.chapters import CHAPTERS, module

OUTCOMES = ("supported", "refuted", "inconclusive")
TESTS = Path(__file__).parent
# chapters whose rules are rewritten by an open issue, not yet in the shared form (each names the issue)
PENDING: dict[str, str] = {}
# chapters whose reasons are full sentences ending in "."; the reasons of collapse, mlp, layernorm and
# real-models are lower-case clauses without the full stop, so the check applies only where it holds
FULL_STOP = {"decomposition", "skip"}


def _cases(name: str) -> dict:
    path = TESTS / f"test_verdicts_{name.replace('-', '_')}.py"
    assert path.exists(), f"chapter {name}: no {path.name} with synthetic evidence for its verdict rules"
    spec = importlib.util.spec_from_file_location(f"_cases_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CASES


DONE = [c for c in CHAPTERS if c not in PENDING]


@pytest.mark.parametrize("name", DONE)
def test_every_rule_reaches_every_outcome(name):
    m = module(name)
    rules = getattr(m, "VERDICTS", None)
    assert rules, f"chapter {name}: no VERDICTS registry of verdict_<id>(evidence) -> (verdict, reason)"
    cases = _cases(name)
    assert set(cases) == set(rules), f"{name}: CASES {sorted(cases)} against VERDICTS {sorted(rules)}"
    for cid, rule in rules.items():
        missing = [o for o in OUTCOMES if o not in cases[cid]]
        assert not missing, f"{name} {cid}: no case for {missing}"
        assert set(cases[cid]) == set(OUTCOMES), f"{name} {cid}: a case for an unknown outcome"
        for o in OUTCOMES:
            out = rule(cases[cid][o])
            assert isinstance(out, tuple) and len(out) == 2, (
                f"{name} {cid}: a rule returns (verdict, reason)"
            )
            assert out[0] == o, f"{name} {cid}: the case labelled {o} came out {out[0]} ({out[1]})"
            why = out[1]
            assert isinstance(why, str) and why, f"{name} {cid}: a reason is one sentence"
            assert "\n" not in why, f"{name} {cid} {o}: a reason is one line: {why!r}"
            assert any(ch.isdigit() for ch in why), f"{name} {cid} {o}: a reason quotes its numbers: {why!r}"
            if name in FULL_STOP:
                assert why.endswith("."), f"{name} {cid} {o}: a reason ends with a full stop: {why!r}"
        rule_text = getattr(m, f"RULE_{cid}", None)
        assert isinstance(rule_text, str) and rule_text, (
            f"{name} {cid}: the rule text RULE_{cid} recorded with the verdict"
        )


def test_pending_chapters_are_real_chapters():
    assert set(PENDING) <= set(CHAPTERS)
    assert FULL_STOP <= set(DONE)
