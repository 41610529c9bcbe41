"""lrref.verify.verifiers without a model: exact and random verifiers, the verifier configuration."""

import pytest

from lrsim.errors import InputError


def test_exact_and_random_verifiers():
    from lrref.verify.verifiers import ExactVerifier, RandomVerifier

    v = ExactVerifier()
    assert [x.decision for x in v.verify([("a  b\n", "a b"), ("a b", "a c")])] == [True, False]
    assert not ExactVerifier(normalize=False).verify([("a b", "a b")])[0].decision
    assert all(x.decision for x in RandomVerifier(1.0).verify([("a", "b")] * 20))
    assert not any(x.decision for x in RandomVerifier(0.0).verify([("a", "b")] * 20))
    rate = sum(x.decision for x in RandomVerifier(0.3, seed=1).verify([("a", "b")] * 2000)) / 2000
    assert 0.26 < rate < 0.34


def test_verifier_config_validation():
    from lrref.verify.verifiers import VERIFIERS, VerifierConfig

    assert VERIFIERS == ("judge", "embedding", "score", "random", "exact", "math")
    assert VerifierConfig("random").t == 0.5 and VerifierConfig("embedding", 0.9).t == 0.9
    with pytest.raises(InputError, match="unknown verifier"):
        VerifierConfig("nope")
    with pytest.raises(InputError, match=r"probability must be in \[0, 1\], got 1.5"):
        VerifierConfig("random", 1.5)
    with pytest.raises(InputError, match="needs a transformers model"):
        from lrref.verify.verifiers import build

        build(VerifierConfig("judge"), None)
