"""The real-models chapter's pieces: parameter checks, Q2 identities and verdict rules, one model end to
end."""

from types import SimpleNamespace

import numpy as np
import pytest

from rankcollapse.book.params import ParameterError
from rankcollapse.chapters import real_models as rm

TINY = {
    "profile": "smoke",
    "architectures": ["bert"],
    "init_layers": 2,
    "init_hidden": 16,
    "init_heads": 2,
    "n_seq": 3,
    "n_tokens": 10,
    "q2_seq": 2,
    "batch": 2,
}


def params(**kw):
    return SimpleNamespace(**rm.SCHEMA.resolve({**TINY, **kw}))


def test_validate_rejects_before_work():
    assert rm.validate(params()) == {"bert": "bert", "albert": None, "xlnet": None}
    with pytest.raises(ParameterError, match="init_heads"):
        rm.validate(params(init_heads=3))
    with pytest.raises(ParameterError, match="q2_seq"):
        rm.validate(params(q2_seq=5))
    with pytest.raises(ValueError, match="model_xlnet.*cannot be loaded offline"):
        rm.validate(params(model_xlnet="xlnet-base-cased-not-here"))
    with pytest.raises(ParameterError, match="architectures"):
        rm.SCHEMA.resolve({"architectures": ["gpt2"]})


def test_compute_model_and_q2_identities():
    p = params()
    r = rm.compute_model(("init", "bert", 0), vars(p))
    s, q = r["summary"], r["q2"]
    assert r["key"] == "bert_init" and r["shape"] == [3, 10]
    for v in ("SAN", "SAN+MLP", "SAN+skip", "transformer"):
        assert len(s[v]["mean"]) == 3 and s[v]["r0"] == s["transformer"]["r0"]
    # with the smallest gamma the one-layer bound is tight, so the factors are ratios of residuals
    np.testing.assert_allclose(q["factor"], q["res_out"] / q["res_in"] ** 3, rtol=1e-9)
    np.testing.assert_allclose(q["scaled"], q["res_out"] / q["res_in"], rtol=1e-9)
    np.testing.assert_allclose(q["stated"] * q["H"], q["factor"], rtol=1e-12)
    assert q["beta"].shape == (2, 2) and q["cond_head"].shape == (2, 2, 2)
    again = rm.compute_model(("init", "bert", 0), vars(p))
    assert again["summary"]["transformer"]["mean"] == s["transformer"]["mean"]  # seeded: bit-identical


def _summ(san_cl, mlp_cl, skip_min=0.5, L=12, san_final=1e-8):
    base = {"r0": 0.6, "L": L, "min_r": skip_min}
    return {
        "SAN": {**base, "collapse_layer": san_cl, "r_final": san_final},
        "SAN+MLP": {**base, "collapse_layer": mlp_cl, "r_final": 1e-8},
        "SAN+skip": {**base, "collapse_layer": -1, "r_final": 0.4},
        "transformer": {**base, "collapse_layer": -1, "r_final": 0.3},
    }


def test_verdict_rules():
    assert rm.verdict_c1({"a": _summ(2, 2), "b": _summ(5, 4)})[0] == "supported"
    assert rm.verdict_c1({"a": _summ(-1, 2, san_final=0.5)})[0] == "refuted"
    assert rm.verdict_c1({"a": _summ(2, 2, san_final=0.1)})[0] == "inconclusive"
    assert rm.verdict_c2({"a": _summ(2, 2)})[0] == "supported"
    assert rm.verdict_c2({"a": _summ(2, 2, skip_min=1e-3)})[0] == "refuted"
    assert rm.verdict_c3({"a": _summ(2, 2), "b": _summ(5, 4)})[0] == "refuted"
    assert rm.verdict_c3({"a": _summ(2, 3), "b": _summ(5, -1)})[0] == "supported"
    assert rm.verdict_c3({"a": _summ(2, 3), "b": _summ(5, 5)})[0] == "inconclusive"
    q = {"x": {"state": "pretrained", "cond_head": np.array([0.1, 0.2]), "scaled": np.array([0.5])}}
    assert rm.verdict_q2(q)[0] == "supported"
    q["x"]["cond_head"] = np.array([2.0, 3.0, 0.5])
    assert rm.verdict_q2(q)[0] == "refuted"
    assert rm.verdict_q2({})[0] == "not run"
