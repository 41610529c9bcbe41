"""lrsim.sim: the lr-trace and Chrome trace of a run, and the setting its header carries."""

import json
from collections import Counter

import pytest

from lrsim.dists import Uniform
from lrsim.sim import SimConfig, simulate
from lrsim.trace import Setting, read_trace, recorded_setting


@pytest.mark.parametrize("mode, width", [("sync", 1), ("sync", 3), ("async", 1), ("async", 2), ("ar", 1)])
def test_trace_round_trip(tmp_path, mode, width):
    p, c = tmp_path / "t.jsonl", tmp_path / "t.chrome.json"
    r = simulate(SimConfig(mode=mode, width=width, alpha1=0.6, c1=0.2, k1=3, k2=2, steps=200, seed=5,
                           verifier_cost=0.05, step_tokens=Uniform(20, 60)), trace=p, chrome=c)
    t = read_trace(p)
    assert t.warnings == []
    assert t.header.source == "lrsim.sim" and t.header.mode == {"ar": "ar", "sync": "lr-sync"}.get(mode, "lr-async")
    assert SimConfig.from_dict(t.header.config).mode == mode
    assert t.header.summary["speedup"] == pytest.approx(r.speedup)
    req = t.requests[0]
    assert (req.steps, req.cycles, req.end) == (r.steps, r.cycles, pytest.approx(r.sim_time))
    committed = [s for s in t.steps if s.committed]
    assert len(committed) == r.steps  # one row per output step
    assert len({(s.cycle, s.position) for s in committed}) == r.steps
    assert sum(s.accepted for s in t.steps) == req.accepted_steps
    assert all(s.committed == "draft" for s in t.steps if s.accepted)
    per_cycle = Counter(s.cycle for s in committed)
    assert len(per_cycle) == r.cycles
    if mode == "sync":
        starts = {(s.cycle, s.target_start) for s in t.steps}
        assert len(starts) == r.cycles  # the k1 target steps of a cycle start together, as one batch
        assert max(per_cycle.values()) <= 3
    spans = [e for e in json.loads(c.read_text())["traceEvents"] if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 for e in spans)
    assert {e["cat"] for e in spans} >= ({"target"} if mode == "ar" else {"draft", "target", "verify"})


@pytest.mark.parametrize("kw, setting", [
    (dict(mode="sync", k1=3, k2=2, width=2, verify_calls="per_pair"), Setting("sync", 3, 2, 2, "per_pair")),
    (dict(mode="async", k1=5), Setting("async", 5, 1, 1, "one")),
    (dict(mode="ar", k1=4, k2=3), Setting("ar", 1, 3, 1, "one")),  # ar runs one sequence whatever k1 says
])
def test_header_carries_the_setting(tmp_path, kw, setting):
    p = tmp_path / "t.jsonl"
    simulate(SimConfig(steps=50, **kw), trace=p)
    header = read_trace(p).header
    assert header.setting["version"] == 1
    assert recorded_setting(header) == setting and setting.hardware == "default"


def test_a_failed_export_leaves_no_file(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError, match="disk full"):
        simulate(SimConfig(steps=50), trace=tmp_path / "t.jsonl", chrome=tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []
