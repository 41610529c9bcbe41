"""Paired answer quality without models: the exact McNemar test, lrref bench's comparison against ar, and
lrsim calibrate's quality fields from traces whose request records carry ``correct``."""

import json
import math
from types import SimpleNamespace

import pytest

from lrsim import trace as tr
from lrsim.prediction import calibrate as cal
from lrsim.stats import mcnemar_exact, paired_outcomes


def test_exact_mcnemar_values():
    assert mcnemar_exact(5, 0) == pytest.approx(0.0625)  # 2 * 0.5**5
    assert mcnemar_exact(0, 5) == mcnemar_exact(5, 0)
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(6, 0) == pytest.approx(0.03125)
    assert mcnemar_exact(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)  # 0.109375
    assert mcnemar_exact(30, 10) == pytest.approx(2 * sum(math.comb(40, i) for i in range(11)) / 2**40)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_paired_outcomes_counts_only_shared_checked_items():
    ar = {0: True, 1: True, 2: False, 3: True, 4: None}
    lr = {0: True, 1: False, 2: True, 3: False, 4: True, 5: False}
    p = paired_outcomes(lr, ar)
    assert (p.n, p.lost, p.gained) == (4, 2, 1) and p.p_value == pytest.approx(1.0)


def _stats(mode, outcomes):
    from lrref.bench import ModeStats

    st = ModeStats(mode)
    for i, ok in enumerate(outcomes):
        r = SimpleNamespace(wall_s=1.0, ttft_s=0.1, ids=[1] * 10, target_s=1, draft_s=0, verify_s=0, wait_s=0,
                            overhead_s=0, verified=2, accepted=1, steps=[1, 2], accepted_steps=1, ngram_drafted=0,
                            ngram_accepted=0, target_forwards=10, finish="max_tokens" if i == 0 else "eos")
        st.add(r, ok, "1", i)
    return st


def test_bench_pairs_every_mode_with_ar():
    from lrref.bench import format_paired, summarize

    ar = _stats("ar", [True] * 6 + [False] * 4)
    lr = _stats("lr-async", [False] * 5 + [True] + [False] * 4)  # 5 lost, none gained
    sd = _stats("sd", [True] * 6 + [True] + [False] * 3)  # 1 gained
    rows = {r["mode"]: r for r in summarize([ar, lr, sd])}
    assert rows["ar"]["lost_vs_ar"] is None and rows["ar"]["capped"] == 1
    assert (rows["lr-async"]["lost_vs_ar"], rows["lr-async"]["gained_vs_ar"]) == (5, 0)
    assert rows["lr-async"]["p_vs_ar"] == pytest.approx(0.0625) and rows["lr-async"]["paired_n"] == 10
    assert (rows["sd"]["lost_vs_ar"], rows["sd"]["gained_vs_ar"], rows["sd"]["p_vs_ar"]) == (0, 1, 1.0)
    text = format_paired(list(rows.values()))
    assert "lr-async: lost 5" in text and "p = 0.0625" in text and "  ar:" not in text
    alone = summarize([lr])[0]  # no ar beside it: nothing to pair
    assert alone["lost_vs_ar"] is None and format_paired([alone]) is None
    unchecked = _stats("lr-sync", [None] * 10)  # problems without a reference: answers not checked
    assert summarize([ar, unchecked])[1]["p_vs_ar"] is None


def _trace(path, mode, correct, verifier=None, prompts=None, decisions=(), finish="eos"):
    config = {"mode": mode} | ({"verifier": verifier} if verifier else {})
    steps = [tr.StepRecord(request=0, cycle=i, position=0, branch=0, verifier="identical" if d == "id" else "x",
                           decision=bool(d)) for i, d in enumerate(decisions)]
    reqs = [tr.RequestRecord(request=i, start=i, end=i + 1, output_tokens=10, prompt_tokens=(prompts or {}).get(i, 50),
                             finish=finish if i == 0 else "eos", correct=c) for i, c in enumerate(correct)]
    base = {"ar": "ar", "lr-async": "lr-async", "lr-sync": "lr-sync"}[mode]
    tr.write_trace(path, tr.Header(source="test", mode=base, config=config), steps, reqs)
    return str(path)


def test_calibrate_reports_quality_and_acceptance_by_verifier(tmp_path):
    emb = {"name": "embedding", "threshold": None, "threshold_used": 0.85, "normalize": True}
    strict = {"name": "exact", "threshold": None, "threshold_used": 1.0, "normalize": False}
    paths = [_trace(tmp_path / "ar.jsonl", "ar", [True] * 6 + [False] * 4, emb, finish="max_tokens"),
             _trace(tmp_path / "lr.jsonl", "lr-async", [False] * 5 + [True] + [False] * 4, emb,
                    decisions=[1, 1, 0, "id"]),
             _trace(tmp_path / "ex.jsonl", "lr-sync", [True] * 6 + [False] * 4, strict, decisions=["id", 0])]
    c = cal.calibrate_files(paths)
    assert set(c.alpha1_by_verifier) == {"embedding 0.85", "exact-strict"}  # ar has none
    assert (c.alpha1_by_verifier["embedding 0.85"].k, c.alpha1_by_verifier["embedding 0.85"].n) == (3, 4)
    q = {x.run: x for x in c.quality}
    assert set(q) == {"ar", "lr-async, embedding 0.85", "lr-sync, exact-strict"}
    assert q["ar"].accuracy.k == 6 and q["ar"].capped == 1 and q["ar"].vs_ar is None
    lr = q["lr-async, embedding 0.85"]
    assert lr.accuracy.p == pytest.approx(0.1) and (lr.vs_ar["lost"], lr.vs_ar["gained"]) == (5, 0)
    assert lr.vs_ar["p_value"] == pytest.approx(0.0625)
    assert q["lr-sync, exact-strict"].vs_ar["p_value"] == 1.0
    d = json.loads(json.dumps(c.to_dict(), default=float))
    assert d["quality"][1]["vs_ar"]["lost"] == 5 and d["alpha1_by_verifier"]["exact-strict"]["n"] == 2
    text = cal.format_calibration(c)
    assert "lost 5, gained 0, exact McNemar p = 0.0625" in text and "alpha1 by verifier" in text


def test_calibrate_does_not_pair_other_problems_or_unchecked_traces(tmp_path):
    paths = [_trace(tmp_path / "ar.jsonl", "ar", [True, True]),
             _trace(tmp_path / "lr.jsonl", "lr-async", [False, True], prompts={0: 77}),
             _trace(tmp_path / "none.jsonl", "lr-async", [None, None])]
    c = cal.calibrate_files(paths)
    assert [x.run for x in c.quality] == ["ar", "lr-async"]
    assert c.quality[1].vs_ar is None and any("not paired" in w for w in c.warnings)
    assert cal.calibrate_files([paths[2]]).quality == []


def test_paired_difference_interval():
    """Newcombe's method 10: contains the difference, mirrors when the two sides swap, narrows with more items,
    and reproduces the issue's figure for the study's math row at n = 40 (+-11.5 points around 0)."""
    from lrsim.stats import paired_difference

    lo, hi = paired_difference(19, 3, 3, 15)  # 40 problems: both right 19, lost 3, gained 3
    assert lo < 0 < hi and hi == pytest.approx(-lo, abs=1e-12)
    assert (hi - lo) / 2 == pytest.approx(0.115, abs=0.006)
    a = paired_difference(20, 6, 2, 12)
    b = paired_difference(20, 2, 6, 12)
    assert a[0] < 4 / 40 < a[1] and a == pytest.approx((-b[1], -b[0]))
    wide, narrow = paired_difference(20, 6, 2, 12), paired_difference(200, 60, 20, 120)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
    assert paired_difference(0, 0, 0, 0) == (-1.0, 1.0)
    assert paired_difference(0, 10, 0, 0)[1] == 1.0  # clipped: every item gained
    p = paired_outcomes({0: True, 1: True, 2: False, 3: True}, {0: True, 1: False, 2: False, 3: True})
    assert (p.both, p.difference) == (2, 0.25) and p.difference_ci() == paired_difference(2, 1, 0, 1)
    with pytest.raises(ValueError):
        paired_difference(-1, 0, 0, 0)
