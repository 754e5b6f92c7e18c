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
    # the a-priori gamma: the layer bound is 4 gamma beta H / sqrt(d_qk) ||res X||^3 and never below the
    # observed residual; the fitted (old) condition is the observed one, so never above the a-priori one
    np.testing.assert_allclose(q["factor"] * q["res_in"] ** 3, q["bound"], rtol=1e-9)
    np.testing.assert_allclose(q["scaled"], q["bound"] / q["res_in"], rtol=1e-9)
    np.testing.assert_allclose(q["stated"] * q["H"], q["factor"], rtol=1e-12)
    assert (q["tightness"] <= 1 + 1e-9).all() and (q["tightness"] > 0).all()
    assert (q["cond_head_fitted"] <= q["cond_head"] * (1 + 1e-9)).all()
    assert q["beta"].shape == (2, 2) and q["cond_head"].shape == (2, 2, 2)
    again = rm.compute_model(("init", "bert", 0), vars(p))
    assert again["summary"]["transformer"]["mean"] == s["transformer"]["mean"]  # seeded: bit-identical
