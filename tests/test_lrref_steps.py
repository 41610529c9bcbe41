"""lrref.backends.steps / lrref.backends.ngram / speculative acceptance rules: pure logic, no model."""

import pytest

from lrref.backends.ngram import NgramConfig, propose
from lrref.backends.steps import StepSplitter, split_steps

# a toy vocabulary: id -> text; 9 = EOS (decodes to "" like a skipped special token)
VOCAB = {0: "a", 1: "b", 2: "\n", 3: "\n\n", 4: ".\n\n", 5: " ", 6: "x\n\ny", 7: "\n\n\n", 9: ""}
EOS = 9


def dec(ids):
    return "".join(VOCAB[i] for i in ids)


def run(ids, cap=100):
    s = StepSplitter(dec, [EOS], cap)
    n = s.extend(ids)
    return s.ids, s.finish, n


def test_no_separator_runs_to_cap():
    ids, fin, n = run([0, 1, 0, 1, 5, 0], cap=4)
    assert ids == [0, 1, 0, 1] and fin == "cap" and n == 4


def test_no_separator_and_no_cap_is_unfinished():
    ids, fin, n = run([0, 1, 2, 0])
    assert fin is None and n == 4


def test_without_a_separator_only_eos_and_the_cap_end_a_step():
    """The stop rule of random weights: nothing is decoded, "\n\n" tokens do not end the step."""
    def no_decode(ids):
        raise AssertionError("decoded")

    s = StepSplitter(no_decode, [EOS], 3, separator=None)
    assert s.extend([3, 4, 3, 0]) == 3 and s.finish == "cap"
    s = StepSplitter(no_decode, [EOS], 5, separator=None)
    assert s.extend([4, EOS, 0]) == 2 and s.finish == "eos"
    assert split_steps([3, 3, 3, 3, 3], dec, [EOS], 2, separator=None) == [[3, 3], [3, 3], [3]]
    assert split_steps([3, 3, 3], dec, [EOS], 2) == [[3], [3], [3]]


def test_single_newline_does_not_end_a_step():
    assert run([0, 2, 1])[1] is None


def test_separator_split_across_two_newline_tokens():
    ids, fin, n = run([0, 2, 2, 1, 1])
    assert ids == [0, 2, 2] and fin == "step" and n == 3


def test_fused_separator_token_ends_the_step_and_is_kept():
    assert run([0, 1, 4, 0]) == ([0, 1, 4], "step", 3)
    assert run([0, 7, 0]) == ([0, 7], "step", 2)  # "\n\n\n" contains the separator


def test_token_with_text_after_the_separator_ends_the_step():
    assert run([0, 6, 1])[:2] == ([0, 6], "step")


def test_eos_inside_a_step_ends_it_and_is_kept():
    assert run([0, 1, EOS, 0]) == ([0, 1, EOS], "eos", 3)


def test_empty_steps():
    assert run([3, 0]) == ([3], "step", 1)  # the step is only the separator
    assert run([EOS]) == ([EOS], "eos", 1)  # zero text, ends the request


def test_cap_of_one_and_bad_cap():
    assert run([0, 1], cap=1) == ([0], "cap", 1)
    with pytest.raises(ValueError):
        StepSplitter(dec, [EOS], 0)


def test_push_after_finish_refuses():
    s = StepSplitter(dec, [EOS], 5)
    s.push(3)
    with pytest.raises(RuntimeError):
        s.push(0)


def test_split_steps_partitions_the_stream():
    stream = [0, 4, 1, 2, 2, 0, 1, 0, 1, 0, EOS]
    steps = split_steps(stream, dec, [EOS], cap=3)
    assert [t for s in steps for t in s] == stream
    assert steps == [[0, 4], [1, 2, 2], [0, 1, 0], [1, 0, EOS]]


def test_ngram_proposes_what_followed_the_latest_match():
    cfg = NgramConfig(k=3, max_n=2, min_n=1)
    # ... 5 6 7 8 ... 5 6 9 ... 5 6 -> the latest "5 6" was followed by 9
    assert propose([5, 6, 7, 8, 1, 5, 6, 9, 2, 5, 6], cfg) == [9, 2, 5]
    assert propose([1, 2, 3], cfg) == []  # nothing repeats
    assert propose([4, 1, 2, 4], NgramConfig(k=2, max_n=1, min_n=1)) == [1, 2]
    assert propose([5, 6, 7, 5, 6], cfg, limit=1) == [7]
    assert propose([5, 6, 7, 5, 6], NgramConfig(k=0)) == []


def test_ngram_config_validation():
    with pytest.raises(ValueError):
        NgramConfig(k=-1)
    with pytest.raises(ValueError):
        NgramConfig(k=2, max_n=1, min_n=2)


def test_greedy_acceptance_rule():
    torch = pytest.importorskip("torch")
    from lrref.backends.hf_engine import accept_greedy

    lg = torch.tensor([[0, 5.0, 0], [0, 0, 5.0], [5.0, 0, 0]])  # argmax 1, 2, 0
    assert accept_greedy(lg, [1, 2]) == [1, 2, 0]  # all accepted + bonus
    assert accept_greedy(lg, [1, 0]) == [1, 2]  # second rejected, replaced by the argmax
    assert accept_greedy(lg[:1], []) == [1]


def test_speculative_sampling_with_a_point_mass_draft_is_exact():
    """First emitted token must be distributed as p, whatever the proposal (chi-square, 20k draws)."""
    torch = pytest.importorskip("torch")
    from scipy import stats

    from lrref.backends.hf_engine import accept_sampled

    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]])
    g = torch.Generator().manual_seed(1)
    for d in (0, 3):  # a likely and an unlikely proposal
        counts = [0, 0, 0, 0]
        for _ in range(20000):
            counts[accept_sampled(p, [d], g)[0]] += 1
        exp = [20000 * x / sum(p[0].tolist()) for x in p[0].tolist()]
        chi = stats.chisquare(counts, exp)
        assert chi.pvalue > 1e-3, (d, counts)


def test_top_p_top_k_filtering():
    torch = pytest.importorskip("torch")
    from lrref.backends.base import Sampling
    from lrref.backends.hf_engine import probs_from_logits

    lg = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = probs_from_logits(lg, Sampling(1.0, top_p=0.7))
    assert torch.allclose(p, torch.tensor([[0.625, 0.375, 0, 0]]))
    p = probs_from_logits(lg, Sampling(1.0, top_k=1))
    assert torch.allclose(p, torch.tensor([[1.0, 0, 0, 0]]))
    with pytest.raises(ValueError):
        Sampling(-1.0)
