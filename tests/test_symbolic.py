"""lrsim.theory.symbolic: the seed comparisons come out as derived, and the report renders."""

import json

from lrsim.theory import symbolic


def _by_name():
    return {f.name: f for f in symbolic.compare_with_seeds()}


def test_seed_formulas_that_match():
    found = _by_name()
    for name in ["g (gamma form)", "g(k2)", "f_sync (Theorem 1)", "S1 (ratio form)", "S1 (closed form)",
                 "S2 (corrected, used by lrsim.theory.s2)", "SD ceiling gap 1/(1-a) - g", "lim S2 as k -> oo"]:
        assert found[name].verdict == "proved equal", name


def test_seed_s2_transcription_is_refuted_with_a_witness():
    f = _by_name()["S2 (closed form)"]
    assert f.verdict == "differs"
    w = f.witness
    assert abs(w["derived"] - w["printed"]) > 0.1
    assert w["share_of_grid_differing"] > 0.9


def test_compare_detects_a_planted_error():
    a, c, k = symbolic.alpha, symbolic.c, symbolic.k
    bad = symbolic.compare("planted", "test", symbolic.derive_g(), (1 - a**k) / ((1 - a) * (1 + c * k)))
    assert bad.verdict == "differs"


def test_sd_limit_is_the_ceiling():
    assert symbolic.derive_sd_limit().equals(1 / (1 - symbolic.alpha))


def test_report_text_and_json():
    text = symbolic.report()
    assert "[DIFF] S2 (closed form)" in text
    data = json.loads(symbolic.report(as_json=True))
    assert {"derivations", "seed_comparisons", "text_findings"} <= data.keys()
    assert "\\frac" in data["derivations"]["S2"]["latex"]
