"""lrsim.prediction.replay: calibrating on simulator traces recovers the simulator; plans respect the budget."""

import json

import pytest

from lrsim.cli import main
from lrsim.cost.passcost import grid
from lrsim.prediction.calibrate import calibrate_files
from lrsim.prediction.replay import plan_from_traces, predict, predict_files
from lrsim.sim import SimConfig, simulate
from lrsim.trace import Setting, read_trace, recorded_setting


@pytest.fixture(scope="module")
def des_traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("des")
    common = dict(alpha1=0.7, c1=0.25, alpha2=0.6, c2=0.05, steps=6000, seed=1)
    ar = simulate(SimConfig(mode="ar", k1=1, **common), trace=d / "ar.jsonl")
    lr = simulate(SimConfig(mode="async", k1=4, **common), trace=d / "async.jsonl")
    sd = simulate(SimConfig(mode="sync", k1=3, k2=3, draft_sd=False, **common), trace=d / "sync_sd.jsonl")
    return d, ar, lr, sd


def test_calibration_recovers_simulator_parameters(des_traces):
    d, *_ = des_traces
    c = calibrate_files([d / "ar.jsonl", d / "async.jsonl", d / "sync_sd.jsonl"])
    assert c.alpha1.lo < 0.7 < c.alpha1.hi and c.alpha1.hi - c.alpha1.lo < 0.05
    assert c.alpha2 == pytest.approx(0.6, abs=0.02)  # from the k2 = 3 trace only
    assert c.draft_s_per_token[1].mean / c.target_s_per_token[1].mean == pytest.approx(0.25, rel=0.01)
    assert c.target_tokens.mean == 52
    assert recorded_setting(read_trace(d / "sync_sd.jsonl").header) == Setting("sync", 3, 3, 1)


def test_replay_of_own_configuration_reproduces_the_speedup(des_traces):
    d, ar, lr, _ = des_traces
    p, warnings = predict_files([str(d / "ar.jsonl"), str(d / "async.jsonl")],
                                Setting("async", 4, 1), steps=6000, bootstrap=0)
    assert warnings == []
    se = (lr.speedup_ci95[1] - lr.speedup_ci95[0]) / 3.92
    assert abs(p.speedup - lr.speedup) < 4 * se * 2 ** 0.5
    assert p.speedup == pytest.approx(lr.speedup, rel=0.04)


def test_replay_predicts_another_depth(des_traces):
    d, *_ = des_traces
    traces = [read_trace(d / "ar.jsonl"), read_trace(d / "async.jsonl")]
    p = predict(traces, Setting("async", 2, 1), steps=6000, bootstrap=12)
    direct = simulate(SimConfig(mode="async", k1=2, alpha1=0.7, c1=0.25, steps=6000, seed=5))
    assert p.speedup == pytest.approx(direct.speedup, rel=0.05)
    lo, hi = p.speedup_ci95
    assert lo < hi and hi - lo < 0.1 * p.speedup
    assert lo < direct.speedup * 1.03 and hi > direct.speedup * 0.97


def test_token_speculation_needs_data(des_traces):
    d, *_ = des_traces
    with pytest.raises(ValueError, match="token speculation"):
        predict([read_trace(d / "async.jsonl")], Setting("async", 4, 3), steps=1000, bootstrap=0)


def test_plan_from_traces_respects_budget(des_traces):
    d, *_ = des_traces
    traces = [read_trace(d / f) for f in ("ar.jsonl", "async.jsonl", "sync_sd.jsonl")]
    tp = plan_from_traces(traces, budget=6, k2_max=3, steps=1500, bootstrap=0)
    assert all(r["positions"] <= 6 for r in tp.ranked)
    assert tp.best.speedup >= max(r["speedup"] for r in tp.ranked) * 0.95
    assert tp.ranked[0]["speedup"] == max(r["speedup"] for r in tp.ranked)
    assert {"sync", "async"} == set(tp.closed_form_plan)


def test_cli_replay_and_trace_plan(des_traces, capsys, tmp_path):
    d, *_ = des_traces
    assert main(["replay", str(d / "ar.jsonl"), str(d / "async.jsonl"), "--mode", "async", "--k1", "3",
                 "--steps", "2000", "--bootstrap", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setting"]["k1"] == 3 and out["speedup"] > 1
    assert main(["plan", "--trace", str(d / "ar.jsonl"), str(d / "async.jsonl"), "--budget", "4",
                 "--bootstrap", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"mode", "k1", "k2", "speedup", "ranked", "closed_form_plan"} <= out.keys()
    bad = tmp_path / "corrupt.jsonl"
    lines = (d / "async.jsonl").read_text().splitlines()
    bad.write_text("\n".join(lines[:50] + ["{oops"] + lines[50:120]) + "\n")
    assert main(["calibrate", str(bad)]) == 0
    err = capsys.readouterr().err
    assert f"{bad}:51:" in err
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such trace file" in err
    v = tmp_path / "v9.jsonl"
    v.write_text('{"type": "header", "schema": "lr-trace", "version": 9}\n')
    assert main(["calibrate", str(v)]) == 2
    assert "unsupported lr-trace version 9" in capsys.readouterr().err


def test_a_profile_calibrated_from_traces_recovers_a_linear_engine_exactly(tmp_path):
    """Traces of an engine whose pass costs a + c b + d b (q - 1): the calibrated profile is that engine on every
    grid point (ar: b = 1, q = 1; sd: b = 1, q = 3; sync with constant steps: b = k1 on every pass)."""
    from lrsim.cost.fromtraces import GRID_BATCH, GRID_POSITIONS, profile_from_traces
    from lrsim.dists import Constant

    def ms(b, q):
        return 20 + 2 * b + 1.5 * b * (q - 1)  # fixed, per row, per speculated position

    engine = grid((1, 2, 4), (1, 3), tuple(tuple(ms(b, q) / 1e3 for q in (1, 3)) for b in (1, 2, 4)), "linear")
    common = dict(alpha1=0.7, c1=0.25, alpha2=0.6, c2=1e-12, steps=1500, seed=2, target_latency=engine,
                  step_tokens=Constant(40))
    runs = {"ar": dict(mode="ar", k1=1), "sd": dict(mode="ar", k1=1, k2=3), "s2": dict(mode="sync", k1=2),
            "s3": dict(mode="sync", k1=3)}
    traces = []
    for name, kw in runs.items():
        simulate(SimConfig(**common, **kw), trace=tmp_path / f"{name}.jsonl")
        traces.append(read_trace(tmp_path / f"{name}.jsonl"))
    prof = profile_from_traces(traces, alpha2=0.6)
    entry = prof.arch(prof.entry("simulated-target", "sync", "target"))
    for i, b in enumerate(GRID_BATCH):
        for j, q in enumerate(GRID_POSITIONS):
            assert entry.ms[0][i][j] == pytest.approx(ms(b, q), rel=1e-8), (b, q)  # c2 = 1e-9 per position
    assert "weighted rms residual 0.0%" in prof.provenance.notes[0]


def test_replay_is_composition_with_the_calibrated_profile(des_traces, tmp_path, capsys):
    """calibrate --profile-out, then replay --hardware on that file: the same prediction as replay on the traces."""
    d, *_ = des_traces
    paths = [str(d / "ar.jsonl"), str(d / "async.jsonl")]
    out = tmp_path / "cal.json"
    assert main(["calibrate", *paths, "--profile-out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    args = ["--mode", "async", "--k1", "3", "--steps", "2000", "--bootstrap", "0", "--json"]
    assert main(["replay", *paths, *args]) == 0
    own = json.loads(capsys.readouterr().out)
    assert main(["replay", *paths, *args, "--hardware", str(out), "--target-arch", "simulated-target",
                 "--draft-arch", "simulated-draft"]) == 0
    via = json.loads(capsys.readouterr().out)
    assert via["speedup"] == own["speedup"] and via["c1"] == pytest.approx(own["c1"])


def _rewrite_header(src, dst, **changes):
    """Copy a trace with header fields replaced."""
    lines = src.read_text().splitlines()
    header = json.loads(lines[0]) | changes
    dst.write_text("\n".join([json.dumps(header)] + lines[1:]) + "\n")
    return dst


def test_replay_reads_the_setting_not_the_writers_config(des_traces, tmp_path):
    """Another decoder's trace: an unknown source and config, but a `setting`; calibration and replay treat it
    exactly as the simulator's own trace."""
    d, *_ = des_traces
    foreign = [_rewrite_header(d / n, tmp_path / n, source="another-decoder", config={"depth": "?"})
               for n in ("ar.jsonl", "async.jsonl")]
    own = [read_trace(d / "ar.jsonl"), read_trace(d / "async.jsonl")]
    other = [read_trace(p) for p in foreign]
    assert [recorded_setting(t.header) for t in other] == [recorded_setting(t.header) for t in own]
    a = predict(own, Setting("async", 3, 1), steps=2000, bootstrap=0)
    b = predict(other, Setting("async", 3, 1), steps=2000, bootstrap=0)
    assert a.speedup == b.speedup and a.setting == b.setting == Setting("async", 3, 1, 1, "one", "traces@default")


def test_verifier_calls_without_spans_come_from_the_setting(des_traces):
    from dataclasses import replace

    from lrsim.prediction.compose import verify_calls

    d, *_ = des_traces
    sync = read_trace(d / "sync_sd.jsonl")
    assert verify_calls([sync]) == "one"  # its pairs share one verify span per cycle
    per_pair = Setting("sync", 3, 3, 1, "per_pair").to_dict()
    unspanned = replace(sync, header=replace(sync.header, setting=per_pair),
                        steps=[replace(s, verify_start=None, verify_end=None) for s in sync.steps])
    assert verify_calls([unspanned]) == "per_pair"
    assert verify_calls([read_trace(d / "async.jsonl")]) == "one"  # no sync trace: the simulator's default


# ----------------------------------------------------------------------------- each calibration once


@pytest.fixture
def calibrations(monkeypatch):
    """Counts :func:`lrsim.prediction.calibrate.calibrate` calls, wherever they are made from."""
    import lrsim.prediction.calibrate
    import lrsim.prediction.compose

    calls = []
    real = lrsim.prediction.calibrate.calibrate

    def counted(traces):
        calls.append(len(traces))
        return real(traces)

    monkeypatch.setattr(lrsim.prediction.calibrate, "calibrate", counted)
    monkeypatch.setattr(lrsim.prediction.compose, "calibrate", counted)
    return calls


def test_replay_and_its_plan_calibrate_the_traces_once(calibrations):
    """Behaviour and timing are calibrated once per prediction or plan; each bootstrap replicate once more (its
    resample), through compose itself (no call back into replay)."""
    from lrsim.trace import default_traces

    traces = [read_trace(p) for p in default_traces()]
    predict(traces, Setting("async", 2, 1), steps=1000, bootstrap=0)
    assert calibrations == [len(traces)]
    calibrations.clear()
    p = predict(traces, Setting("async", 2, 1), steps=1000, bootstrap=10)
    assert len(calibrations) == 1 + 10 and p.replicates == 10 and p.speedup_ci95 is not None
    calibrations.clear()
    plan_from_traces(traces, budget=3, k2_max=2, steps=1000, bootstrap=0)
    assert calibrations == [len(traces)]


def test_replay_is_compose_with_the_traces_own_timing():
    """replay.predict = compose.predict of the traces' behaviour on the profile they calibrate, bootstrap
    recalibrating both (``retime``): the same numbers, the same seeds."""
    from lrsim.prediction import compose
    from lrsim.prediction.compose import trace_hardware
    from lrsim.trace import default_traces

    traces = [read_trace(p) for p in default_traces()]
    s = Setting("sync", 3, 1)
    b = compose.behaviour_from_traces(traces)
    direct = compose.predict(b, trace_hardware(traces, b.alpha2), s, steps=1500, bootstrap=10, traces=traces,
                             retime=True)
    p = predict(traces, s, steps=1500, bootstrap=10)
    assert (p.speedup, p.speedup_ci95) == (direct.speedup, direct.speedup_ci95)


def test_bootstrap_skips_resamples_without_a_verified_draft(des_traces, monkeypatch):
    """A resample that drew no verified draft has no step acceptance: it gives no replicate (it used to stop the
    whole replay with "no step acceptance"); too few replicates left is one clear error."""
    import dataclasses
    import math

    from lrsim.errors import InputError
    from lrsim.prediction import compose

    d, *_ = des_traces
    traces = [read_trace(d / "ar.jsonl"), read_trace(d / "async.jsonl")]
    real, calls = compose.behaviour_from_traces, []

    def every_other_without_drafts(sample):
        b = real(sample)
        calls.append(1)
        return dataclasses.replace(b, alpha1=math.nan) if len(calls) % 2 == 0 else b

    monkeypatch.setattr(compose, "behaviour_from_traces", every_other_without_drafts)
    p = predict(traces, Setting("async", 2, 1), steps=2000, bootstrap=20)
    lo, hi = p.speedup_ci95
    assert lo <= hi and p.replicates == 10  # the other 10 drew no verified draft
    monkeypatch.setattr(compose, "behaviour_from_traces", lambda s: dataclasses.replace(real(s), alpha1=math.nan))
    with pytest.raises(InputError, match="only 0 of 20 resamples"):
        compose._bootstrap(traces, None, Setting("async", 2, 1), 2000, 0, 20, 0.0, False, True)


def test_replay_reads_each_trace_once(tmp_path, capsys):
    """A bad line is warned about once: ``lrsim replay`` reads its traces once (issue 43)."""
    import gzip

    from lrsim.trace import default_traces

    paths = []
    for p in default_traces():
        if p.name in ("trace-ar.jsonl.gz", "trace-lr-async.jsonl.gz"):
            out = tmp_path / p.name.removesuffix(".gz")
            out.write_text(gzip.open(p, "rt").read() + '{"kind": "step", "broken\n')
            paths.append(str(out))
    assert main(["replay", *paths, "--mode", "async", "--k1", "2", "--steps", "300", "--bootstrap", "0"]) == 0
    err = capsys.readouterr().err
    assert sum("warning" in line for line in err.splitlines()) == 2, err  # one per trace, not two
