"""The math verifier without a model: numeric claims of hand-made step pairs (lrref.verify.stepmath), the verifier's
decision rule with a stand-in embedding, its thresholds, and answer extraction in GSM8K's formats."""

from fractions import Fraction

import pytest

from lrsim.errors import InputError

QUESTION = "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"


def agree(t, d):
    from lrref.verify.stepmath import agree as a

    return a(t, d)


@pytest.mark.parametrize("target, draft", [
    ("2 x 7 = 14", "7*2=14"),  # reordered operands, another multiplication sign
    ("2 × 7 = 14", "2 \\times 7 = 14"),  # unicode and LaTeX
    ("He reads 18 pages/day x 14 days = 252 pages.", "So Tom reads 18 × 14 = 252 pages in total."),  # units
    ("There are 2 weeks, so 2 * 7 = 14 days.", "Two weeks have 2 x 7 = 14 days."),  # a number word
    ("Total: $1,200 + $3,400 = $4,600", "1200 + 3400 = 4600 dollars"),  # money, thousands separators
    ("**Step 2:** 25% of 80 = 20", "0.25 * 80 = 20"),  # label, percent
    ("So the answer is \\boxed{252}.", "The final answer is $\\boxed{252}$"),
    ("Let's find the days first.", "First we need the number of days."),  # prose: the embedding decides
    ("120 - 45 - 38 = 37", "120 - 45 = 75, so 75 - 38 = 37"),  # a chained subtraction split in two
    ("25% of 80 = 20", "80 x 25 / 100 = 20"),  # a percent as a division by 100
    ("He ate 1/2 of it.", "He ate \\frac{1}{2} of it."),
    ("1.50 + 2 = 3.5", "1.5 + 2 = 3.50"),  # decimals are exact values
])
def test_agreeing_steps(target, draft):
    assert agree(target, draft).ok


@pytest.mark.parametrize("target, draft, reason", [
    ("He reads 18 x 14 = 252 pages in 2 weeks.", "18 pages/day x 2 days/week = 36 pages/week", "equations"),
    ("18 x 2 = 36", "2 x 7 = 14", "equations"),
    ("14 / 2 = 7", "14 / 7 = 2", "equations"),  # the same numbers, another computation
    ("2 x 7 = 14", "7 + 7 = 14", "numbers"),  # the same result from other operands: 2 is not the draft's
    ("120 - 45 - 38 = 37", "120 - 45 - 38 = 47", "equations"),  # a wrong result
    ("So he reads 252 pages.", "So he reads 262 pages.", "numbers"),  # a stated result, no equation
    ("There are 14 days in 2 weeks.", "There are 2 weeks.", "numbers"),  # a new number missing
    ("\\boxed{252}", "\\boxed{36}", "numbers"),
    ("Let's find the days first.", "He reads 18 x 14 = 252 pages.", "equations"),  # prose vs a claim
    ("1. Calculate the number of days in 2 weeks.\n2. Multiply the days by the pages per day.",  # the README's
     "1. Calculate the number of pages Tom reads in one day.\n2. Calculate the pages in 2 weeks.", "numbers"),  # plan
])
def test_disagreeing_steps(target, draft, reason):
    got = agree(target, draft)
    assert not got.ok and got.reason == reason


def test_every_number_counts_given_or_new():
    assert agree("Tom reads 18 pages a day.", "Each day, Tom reads 18 pages.").ok
    assert not agree("Tom reads 18 pages a day.", "Each day, Tom reads pages.").ok  # a given number dropped
    assert not agree(" and half a bolt of white fiber.", " and a bolt of white fiber.").ok  # half = 1/2


def test_claims_normalise_numbers_and_evaluate_expressions():
    from lrref.verify.stepmath import claims, show

    def strs(vals):
        return {show(v) for v in vals}

    c = claims("Total = 1,200 + 3\\,400 = 4{,}600; a 2-hour trip; \\frac{3}{4} of twenty-five; 10 - 15 = -5")
    assert {"1200", "3400", "4600", "2", "-5", "25", "3/4", "10", "15"} <= strs(c.leaves)
    assert {"4600", "-5", "75/4"} <= strs(c.results)  # 3/4 of 25 is a product
    assert strs(claims("25% of 80 = 20").results) == {"20"}
    assert strs(claims("- 120 - 45 = 75").leaves) == {"120", "45", "75"}  # a bullet, not a sign
    assert claims("He is 3 years old and 5 feet tall.").results == frozenset()  # no expression: no result
    assert strs(claims("3 * 4 = 2 * 6").results) == {"12"}
    assert strs(claims("120 - 45 - 38 = 37").computed) == {"75", "82", "-83", "83", "37"}  # partial sums
    assert strs(claims("2x + 3 = 11").results) == {"2*x + 3", "11"}  # a variable is kept
    assert strs(claims("2 + 3 * 4").results) == {"14"} and strs(claims("(2 + 3) * 4").results) == {"20"}
    assert strs(claims("2^3 - 1 = 7").results) == {"7"} and strs(claims("10 / 4").results) == {"5/2"}
    assert strs(claims("The answer is 2\\frac{1}{2}, or 2 1/2.").leaves) == {"5/2"}  # mixed numbers
    assert strs(claims("He keeps one of them and gives one away to no one.").leaves) == {"1"}  # one that counts
    u = claims("She earns $12 per hour and 3 dollars a tip, 4 apples each day.").units
    assert ("dollar/hour" in {x for _, x in u}) and ("apple/day" in {x for _, x in u})


def test_agreement_explains_itself():
    got = agree("10 - 4 = 6", "4 - 10 = 6")
    assert (got.ok, got.reason) == (False, "equations") and "-6" in got.detail and "4 - 10" in got.detail
    got = agree("She earns 12 dollars per hour.", "She earns 12.")
    assert got.reason == "units" and "dollar/hour" in got.detail
    got = agree("Of the 6 apples, he gives away 3 and keeps 3.", "Of the 6 apples, he gives away 3 and keeps 6.")
    assert got.reason == "units" and "'keep'" in got.detail
    assert agree("Let's go on.", "Next step.").reason == "prose"


def step_pairs():
    import json
    from pathlib import Path

    return [json.loads(x) for x in (Path(__file__).parent / "data" / "step_pairs.jsonl").read_text().splitlines()]


def test_hand_made_pairs_get_their_documented_numeric_verdict():
    """The table in docs/verifiers.md: every pair's numeric verdict (agree's reason) is the one the table states;
    pairs whose meaning differs are rejected unless the table says only the prose can tell (``same``/``prose``),
    pairs of equal meaning agree unless the table names the check's cautious side."""
    pairs = step_pairs()
    assert len(pairs) >= 40 and sum(p["same"] for p in pairs) >= 20 and sum(not p["same"] for p in pairs) >= 20
    got = {p["id"]: agree(p["target"], p["draft"]).reason for p in pairs}
    assert got == {p["id"]: p["numeric"] for p in pairs}
    accepted_different = [p["id"] for p in pairs if not p["same"] and p["numeric"] in ("same", "prose")]
    rejected_same = [p["id"] for p in pairs if p["same"] and p["numeric"] not in ("same", "prose")]
    assert all("prose" in p["why"] or "words" in p["why"] for p in pairs if p["id"] in accepted_different)
    assert all(p["why"].startswith("cautious") for p in pairs if p["id"] in rejected_same)


class FakeEmbedding:
    """A stand-in for EmbeddingVerifier.cosine: 0.9 for every pair, and it counts the pairs it was asked."""

    def __init__(self, cos=0.9):
        self.cos, self.asked = cos, 0

    def cosine(self, pairs):
        self.asked += len(pairs)
        return [self.cos] * len(pairs)


def test_math_verifier_numbers_then_prose():
    from lrref.verify.verifiers import MathVerifier

    emb = FakeEmbedding(0.9)
    pairs = [("2 x 7 = 14", "7*2=14"), ("18 x 14 = 252", "18 x 2 = 36"), ("Let's see.", "Now look.")]
    got = MathVerifier(emb, 0.85).verify(pairs, [QUESTION] * 3)
    assert [v.decision for v in got] == [True, False, False]  # prose needs the stricter prose threshold
    assert [v.reason for v in got] == ["same", "equations", "prose"]
    assert got[1].score is None and got[0].score == 0.9 and emb.asked == 2  # the disagreeing pair is not embedded
    assert [v.decision for v in MathVerifier(FakeEmbedding(0.96), 0.85).verify(pairs, [QUESTION] * 3)] == \
        [True, False, True]
    assert [v.decision for v in MathVerifier(FakeEmbedding(0.9), 0.95).verify(pairs, [QUESTION] * 3)] == [False] * 3
    assert [v.decision for v in MathVerifier(FakeEmbedding(0.9), 0.85, 0.8).verify(pairs)] == [True, False, True]
    numbers_only = MathVerifier(None, -1).verify(pairs)
    assert [v.decision for v in numbers_only] == [True, False, False] and numbers_only[0].score == 1.0


def test_verifier_thresholds_have_ranges():
    from lrref.verify.verifiers import VERIFIERS, VerifierConfig, uses_embedding

    assert "math" in VERIFIERS and VerifierConfig("math").t == 0.85
    for name, bad in (("embedding", 1.5), ("math", -1.01), ("score", 10), ("random", -0.1)):
        with pytest.raises(InputError, match=f"{name} verifier .* must be in"):
            VerifierConfig(name, bad)
    assert VerifierConfig("judge", 40.0).t == 40.0  # a logit margin has no range
    assert uses_embedding("math", 0.85) and not uses_embedding("math", -1) and not uses_embedding("judge", 0)


@pytest.mark.parametrize("text, answer", [
    ("\\boxed{18\\,000}", "18000"), ("\\boxed{1{,}430}", "1430"), ("\\boxed{3/4}", "0.75"), ("\\boxed{.5}", "0.5"),
    ("\\boxed{\\$70,000.00}", "70000"), ("\\boxed{18 \\text{ dollars}}", "18"), ("so 1,450,000 people", "1450000"),
    ("\\boxed{25\\%}", "25"), ("\\boxed{\\dfrac{3}{4} \\text{ cup}}", "0.75"),
    ("\\boxed{2\\frac{1}{2}}", "2.5"), ("\\boxed{2 1/2}", "2.5"), ("\\boxed{10 - 2}", "8"),
    ("\\boxed{3 \\times 4}", "12"), ("\\boxed{(3 + 5) / 2}", "4"),
    ("\\boxed{5 hours and 30 minutes}", "5 hours and 30 minutes"),  # two quantities: no number picked
    ("so the answer is 42. \\boxed{}", "42"),  # an empty box: the text's last number
    ("16-3-4", "4"), ("It drops to -5", "-5"), ("\\boxed{x = 5}", "5"), ("\\boxed{-7}", "-7"),
])
def test_answer_formats(text, answer):
    from lrref.answers import extract_answer

    assert extract_answer(text) == answer


def test_gsm8k_subset_loads_with_numeric_answers():
    import re

    from lrref.bench import dataset_path, load_dataset

    rows = load_dataset(dataset_path("gsm8k-test"))
    assert len(rows) == 100 and all(re.fullmatch(r"-?\d+(\.\d+)?", r["gold"]) for r in rows)
    assert load_dataset(dataset_path(None))[0]["gold"] == "15"  # the bundled set stays the default


@pytest.mark.models
def test_math_verifier_built_with_a_real_embedding_model():
    from conftest import require_models

    from lrref.verify.verifiers import MathVerifier, VerifierConfig, build

    (emb,) = require_models("all-minilm-l6-v2")
    v = build(VerifierConfig("math", 0.5, str(emb)))
    assert isinstance(v, MathVerifier) and v.embedding is not None
    got = v.verify([("So he reads 18 x 14 = 252 pages.", "He reads 14 * 18 = 252 pages in total."),
                    ("So he reads 18 x 14 = 252 pages.", "18 pages/day x 2 days/week = 36 pages/week")])
    assert got[0].decision and 0.5 <= got[0].score <= 1.0001
    assert not got[1].decision and got[1].score is None
    assert build(VerifierConfig("math", -1)).embedding is None  # numbers alone: no model is loaded
