"""lrsim serve with roles sharing the target's device (colocated), and intervals inside their quantity's range."""

import json

import numpy as np
import pytest
import simpy

from lrsim import cli
from lrsim.serve.engine import BatchEngine, Row
from lrsim.serve.metrics import combine, t_interval


class Flat:
    context_free = True

    def __init__(self, seconds):
        self.seconds = seconds

    def __call__(self, rows, positions, context):
        return self.seconds


def run_rows(env, plan):
    """Submit (t, engine, row) and run; each row's finish time."""
    done = {}

    def submit(t, eng, row):
        yield env.timeout(t)
        row.on_done = lambda r, now: done.__setitem__(id(r), now)
        eng.submit([row])

    for t, eng, row in plan:
        env.process(submit(t, eng, row))
    env.run()
    return [done[id(r)] for _, _, r in plan]


def test_two_engines_on_one_device_take_turns_an_iteration_each():
    # target 1 s an iteration, drafter 0.5 s: while both run each iteration lasts 1.5 s; the drafter's 2 passes
    # end at 3, the target's 4th at 3 + 2 x 1 = 5
    env = simpy.Environment()
    target, drafter = BatchEngine(env, Flat(1.0)), BatchEngine(env, Flat(0.5))
    target.share_with(drafter)
    assert run_rows(env, [(0, target, Row(0, 4, 4, 4)), (0, drafter, Row(0, 2, 2, 2))]) == [5.0, 3.0]
    assert target.stats.busy == 4.0 and drafter.stats.busy == 1.0  # each engine's own time


def test_a_verifier_call_on_the_device_stalls_the_engine():
    # 3 passes of 1 s from 0; a 2 s call at 0.5: the iteration in progress resumes at 2.5, its half done -> 5
    env = simpy.Environment()
    eng = BatchEngine(env, Flat(1.0))
    env.process((lambda: (yield env.timeout(0.5)) or eng.stall(env.now, 2.0))())
    assert run_rows(env, [(0, eng, Row(0, 3, 3, 3))]) == [5.0]
    assert eng.stall(10.0, 1.0) == 11.0 and eng.stall(10.0, 1.0) == 12.0  # calls queue on the device


def test_intervals_stay_inside_the_quantity():
    mean, lo, hi = t_interval([10.0, 1000.0])  # two replications: t = 12.7 would reach far below 0
    assert lo == 0.0 and hi > mean
    row = combine([{"throughput": 5.0, "slo_attainment": 0.99, "events": 1, "wall_seconds": 1.0},
                   {"throughput": 500.0, "slo_attainment": 0.2, "events": 1, "wall_seconds": 1.0}])
    assert row["throughput_lo"] == 0.0 and row["slo_attainment_hi"] == 1.0 and row["slo_attainment_lo"] == 0.0


def test_serve_with_a_colocated_drafter_is_slower_than_with_its_own(capsys):
    base = ["serve", "--rate", "0.5", "--modes", "lr-async", "--k1", "4", "--alpha1", "0.6", "--c1", "0.2",
            "--requests", "24", "--json"]
    tpot = {}
    for c in ("none", "draft", "draft+verifier"):
        assert cli.main(base + ["--colocated", c, "--verifier-latency", "0.005"]) == 0
        tpot[c] = json.loads(capsys.readouterr().out)[0]["tpot_mean"]
    assert tpot["none"] < tpot["draft"] <= tpot["draft+verifier"]
    assert np.isfinite(list(tpot.values())).all()


def test_serve_takes_the_placement_from_the_hardware(capsys):
    args = ["serve", "--rate", "0.2", "--modes", "lr-async", "--k1", "3", "--alpha1", "0.6", "--requests", "12",
            "--hardware", "model:h100:tp2", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b", "--json"]
    assert cli.main(args) == 0
    own = json.loads(capsys.readouterr().out)[0]["tpot_mean"]
    assert cli.main(args + ["--draft-hardware", "colocated"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["tpot_mean"] > own


@pytest.mark.parametrize("bad", ["gpu0", "draft+judge"])
def test_colocated_bad_value_is_one_line(capsys, bad):
    assert cli.main(["serve", "--rate", "0.5", "--modes", "lr-async", "--colocated", bad]) == 2
    err = capsys.readouterr().err.strip()
    assert "colocated" in err and "\n" not in err


def test_serve_calibrated_from_traces_takes_their_placement(tmp_path):
    """A trace records where its roles ran (setting.colocated); serve calibrated from it runs them the same way."""
    from lrsim.serve.calibration import placement
    from lrsim.sim import SimConfig, simulate
    from lrsim.trace import read_trace, recorded_setting

    paths = []
    for mode, col in (("sync", "draft+verifier"), ("async", "verifier"), ("ar", "none")):
        p = tmp_path / f"{mode}.jsonl"
        simulate(SimConfig(mode=mode, k1=1 if mode == "ar" else 3, steps=20, colocated=col,
                           engine="des" if mode != "async" else "auto"), trace=p)
        paths.append(p)
    traces = [read_trace(p) for p in paths]
    assert [recorded_setting(t.header).colocated for t in traces] == ["draft+verifier", "verifier", "none"]
    assert placement(traces) == {"sync": "draft+verifier", "async": "verifier", "ar": "none"}
