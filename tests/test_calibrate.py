"""lrsim.prediction.calibrate: recovers known parameters from synthetic traces; flags broken assumptions."""

import numpy as np
import pytest

from lrsim import trace as tr
from lrsim.prediction import calibrate as cal


def synthetic(path, alpha_by_pos, n_cycles=3000, seed=0, k2=4, alpha2=0.6, t_tok=0.1, d_tok=0.03, verify=0.01,
              markov=0.0):
    """Sync-LR-like trace: decisions Bernoulli(alpha_j) (optionally sticky), per-token times known."""
    rng = np.random.default_rng(seed)
    steps = []
    gamma = len(alpha_by_pos)
    for cyc in range(n_cycles):
        prev = None
        for j, a in enumerate(alpha_by_pos):
            p = a if prev is None else (min(1, a + markov) if prev else max(0, a - markov))
            d = bool(rng.random() < p)
            prev = d
            n_tok = int(rng.integers(20, 60))
            # token SD inside the target step: passes until n_tok tokens, each pass min(X, k2-1)+1 tokens
            x = np.minimum(rng.geometric(1 - alpha2, size=n_tok) - 1, k2 - 1) + 1
            fwd = int(np.searchsorted(np.cumsum(x), n_tok) + 1)
            t0 = cyc * 10.0
            steps.append(tr.StepRecord(
                request=0, cycle=cyc, position=j, branch=0,
                draft_start=t0, draft_end=t0 + d_tok * n_tok, draft_tokens=n_tok, draft_batch=1,
                target_start=t0, target_end=t0 + t_tok * n_tok * (1 + 0.05 * rng.standard_normal()),
                target_tokens=n_tok, target_batch=1 if j == 0 else gamma,
                target_forwards=fwd, ngram_drafted=fwd * (k2 - 1), ngram_accepted=int(x[:fwd].sum() - fwd),
                verify_start=t0, verify_end=t0 + verify, verifier="random", decision=d,
                accepted=d, committed="draft" if d else "target"))
    tr.write_trace(path, tr.Header(source="test", mode="lr-sync", config={"k2": k2}), steps)
    return path


def test_recovers_known_parameters(tmp_path):
    c = cal.calibrate_files([synthetic(tmp_path / "a.jsonl", [0.7, 0.7, 0.7])])
    assert c.alpha1.lo < 0.7 < c.alpha1.hi
    assert c.alpha1.hi - c.alpha1.lo < 0.05
    assert all(p.lo < 0.7 < p.hi for p in c.alpha1_by_position)
    assert c.alpha2 == pytest.approx(0.6, abs=0.03)
    assert c.alpha2_ci95[0] < 0.6 < c.alpha2_ci95[1]
    assert c.target_s_per_token[1].mean == pytest.approx(0.1, rel=0.02)
    assert c.draft_s_per_token[1].mean == pytest.approx(0.03, rel=1e-9)
    assert c.c1 == pytest.approx(0.3, rel=0.03)
    assert c.verify_s.mean == pytest.approx(0.01)
    assert c.assumptions["acceptance_independent_of_position"]["verdict"] == "not rejected"
    assert c.assumptions["acceptance_independent_of_previous_decision"]["verdict"] == "not rejected"


def test_detects_position_dependence_and_memory(tmp_path):
    c = cal.calibrate_files([synthetic(tmp_path / "b.jsonl", [0.9, 0.6, 0.3])])
    assert c.assumptions["acceptance_independent_of_position"]["verdict"] == "rejected at 5%"
    c = cal.calibrate_files([synthetic(tmp_path / "c.jsonl", [0.6, 0.6, 0.6], markov=0.3)])
    assert c.assumptions["acceptance_independent_of_previous_decision"]["verdict"] == "rejected at 5%"
    assert c.alpha1_after_accept.p > c.alpha1_after_reject.p


def test_solve_alpha_inverts_the_expected_tokens():
    for a in (0.1, 0.5, 0.9):
        for k in (2, 4, 8):
            assert cal.solve_alpha((1 - a**k) / (1 - a), k) == pytest.approx(a, abs=1e-9)
    assert cal.solve_alpha(1.0, 4) is None


def test_wilson_interval():
    from lrsim.stats import wilson

    p = cal.Proportion.of(7, 10)
    assert p.lo == pytest.approx(0.3968, abs=1e-3) and p.hi == pytest.approx(0.8922, abs=1e-3)
    assert (p.lo, p.hi) == wilson(7, 10)
    assert cal.Proportion.of(0, 0).n == 0 and wilson(0, 0) == (0.0, 1.0)
    assert wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 10)[0] == 0.0


def test_the_benchmark_uses_the_same_wilson_interval():
    from lrref import bench
    from lrsim.stats import wilson

    assert bench.wilson is wilson


def test_text_report(tmp_path):
    c = cal.calibrate_files([synthetic(tmp_path / "a.jsonl", [0.7, 0.7], n_cycles=50)])
    text = cal.format_calibration(c)
    assert "alpha1" in text and "c1" in text and "position 1" in text


def test_step_overlap_from_step_texts():
    """The share of a draft its target step repeats from its start, by verdict (characters)."""
    from lrsim.prediction.calibrate import common_prefix_share, step_overlap
    from lrsim.trace import StepRecord

    assert common_prefix_share("2 x 7 = 14 days", "2 x 7 = 14 days.") == 1.0
    assert common_prefix_share("abcd", "abxy") == 0.5 and common_prefix_share("", "x") == 0.0
    steps = [StepRecord(request=0, cycle=0, position=0, branch=0, decision=True, draft_text="abcd", target_text="abcd"),
             StepRecord(request=0, cycle=1, position=0, branch=0, decision=True, draft_text="abcd", target_text="abzz"),
             StepRecord(request=0, cycle=2, position=0, branch=0, decision=False, draft_text="abcd", target_text="x"),
             StepRecord(request=0, cycle=3, position=0, branch=0, decision=False)]  # no texts: not counted
    acc, rej = step_overlap(steps)
    assert (acc.n, acc.mean, rej.n, rej.mean) == (2, 0.75, 1, 0.0)
