"""lrsim.theorems: verdicts on small grids, and that the checks can fail."""

import json

import numpy as np

from lrsim import theorems


def test_theorem1_and_2_hold_against_monte_carlo():
    r1 = theorems.check_theorem1(resolution=4, stages=50_000)
    r2 = theorems.check_theorem2(resolution=4, stages=50_000)
    assert r1.verdict == "holds" and r1.points_checked == 4 * 5 * 7
    assert r2.verdict == "holds"
    assert r2.details["max_abs_z"] < r2.details["z_critical"]


def test_theorem2_rejects_the_seed_s2_transcription():
    r2 = theorems.check_theorem2(resolution=4, stages=50_000)
    rejected, total = (int(x) for x in r2.details["seed_S2_form_rejected"].split()[::2][:2])
    assert rejected > total // 2
    w = r2.details["seed_S2_witness"]
    assert abs(w["monte_carlo"] - w["derived_form"]) < abs(w["monte_carlo"] - w["seed_form"])


def test_mc_check_fails_on_a_wrong_formula():
    from lrsim.montecarlo import simulate_sync

    res, _ = theorems._mc_check("wrong", "", lambda a, c, k: 1.05 * (1 - a**k) / ((1 - a) * (1 - c + c * k)),
                                simulate_sync, [3], 3, 20_000, 0)
    assert res.verdict == "fails" and res.counterexamples


def test_sd_ceiling_holds():
    r = theorems.check_sd_ceiling(resolution=30)
    assert r.verdict == "holds" and r.details["max g/ceiling"] < 1


def test_theorem3_iff_fails_broadly_but_holds_in_the_working_range():
    r = theorems.check_theorem3(resolution=6, budgets=(4, 8, 16))
    assert r.verdict == "fails"
    assert r.details["broad"]["conditions_hold_but_pure_is_best"] > 0
    assert r.details["working range"]["iff_agrees"].endswith("(100.00%)")
    cx = r.counterexamples[0]
    c7, c8 = theorems.conditions_thm3(cx["alpha1"], cx["c1"], cx["alpha2"], cx["c2"], cx["M"])
    assert c7 and c8 and cx["margin"] <= 0


def test_theorem4_holds_in_its_region_and_breaks_outside():
    r = theorems.check_theorem4(resolution=4, m_max=20)
    assert r.verdict == "holds" and not r.counterexamples
    assert r.details["worst_margin"]["margin"] > 0
    out = r.details["outside_the_region"]
    assert out["c2 in [0.2, 0.9]"]["pure_optimal_points"] > 0
    assert out["M in {4,...,15}"]["pure_optimal_points"] > 0


def test_scan_margin_sign_matches_plan():
    from lrsim.planner import plan

    scan = theorems.thm4_scan(resolution=3, m_max=16)
    i = int(np.argmin(scan["margin"]))
    p = plan(*(float(scan[k][i]) for k in ("alpha1", "c1", "alpha2", "c2")), 16, "async")
    assert p.k1 >= 2 and p.k2 >= 2


def test_json_has_one_entry_per_theorem():
    results = [theorems.check_sd_ceiling(resolution=10), theorems.check_theorem3(resolution=4, budgets=(4,))]
    data = json.loads(theorems.to_json(results))
    assert [t["name"] for t in data["theorems"]] == ["SD ceiling", "Theorem 3 (sync hybrid optimality)"]
    for t in data["theorems"]:
        assert {"name", "verdict", "points_checked", "counterexamples"} <= t.keys()
