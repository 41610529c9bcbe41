"""lrsim.prediction.compose: behaviour from traces or numbers, timing from a latency profile; context growth in the simulator."""

import json
import math
from pathlib import Path

import pytest

from lrsim.cli import main
from lrsim.cost.hardware import HardwareSpec as Hardware
from lrsim.cost.library import embedded, load_profile
from lrsim.cost.passcost import ProfileCost, cost_from_dict
from lrsim.cost.passcost import constant as constant_cost
from lrsim.dists import Constant
from lrsim.errors import InputError
from lrsim.latency.profile import ArchProfile, Prefill, Profile, Provenance, write_profile
from lrsim.prediction.compose import JUDGE_TEMPLATE_TOKENS, Behaviour, behaviour_from_traces, plan, predict, sim_config
from lrsim.prediction.replay import predict as replay_predict
from lrsim.sim import SimConfig, simulate
from lrsim.trace import Setting, read_trace

BATCH, POS = (1, 2, 4, 8), (1, 2, 4, 8)


def arch(name, ms_of, context=(0,), prefill=None) -> ArchProfile:
    """An architecture whose time at (L, b, q) is ``ms_of(L, b, q)`` on the test grid."""
    ms = tuple(tuple(tuple(ms_of(L, b, q) for q in POS) for b in BATCH) for L in context)
    return ArchProfile(name, 1000, 2, 256, tuple(context), BATCH, POS, ms, (), prefill)


def profile_file(tmp_path, name, *archs) -> str:
    p = Profile(name, "kernel_sum", Provenance("test GPU", "numpy", "bfloat16", "2026-01-01"),
                {a.name: a for a in archs})
    path = tmp_path / f"{name}.json"
    write_profile(p, path)
    return str(path)


@pytest.fixture(scope="module")
def constant(tmp_path_factory):
    """Target 20 ms, draft 5 ms per pass whatever the batch and positions: c1 = 0.25; a 7B judge's prefill."""
    pre = Prefill("wall", (1,), (128, 512), ((10.0, 30.0),))
    return profile_file(tmp_path_factory.mktemp("p"), "constant", arch("big", lambda L, b, q: 20.0),
                        arch("small", lambda L, b, q: 5.0), arch("judge", lambda L, b, q: 8.0, prefill=pre))


@pytest.fixture(scope="module")
def growing(tmp_path_factory):
    """Target: batch 1 costs 10 + 0.01 L ms, batch >= 2 costs 12 ms flat; draft 0.001 ms (nearly free)."""
    def big(L, b, q):
        return 10.0 + 0.01 * L if b == 1 else 12.0

    return profile_file(tmp_path_factory.mktemp("g"), "growing", arch("big", big, context=(0, 2000)),
                        arch("small", lambda L, b, q: 0.001, context=(0, 2000)))


@pytest.fixture(scope="module")
def des_traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("des")
    common = dict(alpha1=0.7, c1=0.25, alpha2=0.6, c2=0.05, steps=6000, seed=1)
    simulate(SimConfig(mode="ar", k1=1, **common), trace=d / "ar.jsonl")
    simulate(SimConfig(mode="async", k1=4, **common), trace=d / "async.jsonl")
    return [read_trace(d / "ar.jsonl"), read_trace(d / "async.jsonl")]


@pytest.mark.parametrize("mode,k1", [("async", 3), ("sync", 4), ("ar", 1)])
def test_constant_profile_equals_a_constant_latency(constant, mode, k1):
    """Composition on a constant profile is today's simulation with constant latencies, to 1e-9."""
    b = Behaviour(alpha1=0.65, step_tokens=Constant(40), verify_calls="one")
    hw = Hardware(constant, "big", "small", verifier_latency=Constant(0.05))
    composed = simulate(sim_config(b, hw, Setting(mode, k1, 1), 3000, 7))
    direct = simulate(SimConfig(mode=mode, k1=k1, alpha1=0.65, c2=1e-9, step_tokens=Constant(40),
                                target_latency=constant_cost(0.02), draft_latency=constant_cost(0.005),
                                verifier_latency=Constant(0.05), steps=3000, seed=7))
    assert composed.speedup == pytest.approx(direct.speedup, rel=1e-9)
    assert composed.sim_time == pytest.approx(direct.sim_time, rel=1e-9)
    assert composed.c1_eff == pytest.approx(0.25)


def test_constant_profile_with_traces_matches_replay(constant, des_traces):
    """Behaviour from traces + a constant profile with the traces' c1: the replay's prediction (sampling noise)."""
    hw = Hardware(constant, "big", "small")
    for s in (Setting("async", 2, 1), Setting("sync", 3, 1)):
        p = predict(des_traces, hw, s, steps=8000, bootstrap=0)
        r = replay_predict(des_traces, s, steps=8000, bootstrap=0)
        assert p.speedup == pytest.approx(r.speedup, rel=0.03), s
        assert p.alpha1 == pytest.approx(r.alpha1) and p.c1 == pytest.approx(0.25)


def test_baseline_and_target_are_priced_at_the_growing_context(growing):
    """ar: each step at prompt + committed; sync with every draft rejected: the baseline grows, the batch does not."""
    hw = Hardware(growing, "big", "small")
    b = Behaviour(alpha1=0.0, step_tokens=Constant(10), request_tokens=Constant(1000), prompt_tokens=100)
    ar = simulate(sim_config(b, hw, Setting("ar", 1, 1), 2000, 0))
    # steps start at 0, 10, ..., 990 committed tokens: mean context 100 + 495
    assert ar.sim_time / ar.output_tokens == pytest.approx((10 + 0.01 * 595) / 1000, rel=1e-9)
    assert ar.speedup == pytest.approx(1.0, rel=1e-12)
    sync = simulate(sim_config(b, hw, Setting("sync", 2, 1), 2000, 0))
    # a request is 100 cycles of one 10-token output step: 99 with a batch of 2 (12 ms a pass) and a last one whose
    # second target step has no tokens left (batch 1 at context 1090: 20.9 ms); one 0.001 ms draft pass per token
    lr = 99 * (10 * 12 + 0.01) + (10 * 20.9 + 0.01)
    baseline = sum(10 * (10 + 0.01 * (100 + 10 * i)) for i in range(100))  # each cycle at its own context
    assert sync.speedup == pytest.approx(baseline / lr, rel=1e-9)
    lr_per_token = 12e-3 + 1e-6
    fixed = simulate(sim_config(Behaviour(alpha1=0.0, step_tokens=Constant(10), prompt_tokens=100), hw,
                                Setting("sync", 2, 1), 2000, 0))  # no requests: the context stays at the prompt
    assert fixed.speedup == pytest.approx(11e-3 / lr_per_token, rel=1e-9)


def test_async_request_end_ends_the_stage():
    """With every draft accepted a stage ends only where a request does; without requests there is one stage."""
    kw = dict(mode="async", k1=3, alpha1=1.0, step_tokens=Constant(10), steps=100)
    assert simulate(SimConfig(request_tokens=Constant(50), **kw)).cycles == 20
    assert simulate(SimConfig(**kw)).cycles == 1
    with pytest.raises(InputError, match="W = 1"):
        SimConfig(request_tokens=Constant(50), width=2, **{k: v for k, v in kw.items()})


def test_profile_cost_over_the_context(growing):
    lat = ProfileCost.of(growing, "big", "error")
    assert not lat.context_free and lat.seconds(500, 1, 1) == pytest.approx(0.015)
    assert lat.seconds(1500, 1, 4) == pytest.approx(0.025) and lat.seconds(1500, 2, 1) == pytest.approx(0.012)
    assert cost_from_dict(json.loads(json.dumps(lat.to_dict()))).to_dict() == lat.to_dict()
    with pytest.raises(InputError, match=r"growing.json: big: context 2500 is outside the measured range 0..2000"):
        lat.check(1, 1, 500, 2500)
    assert ProfileCost.of(growing, "big", "linear").seconds(2500, 1, 1) == pytest.approx(0.035)
    one = ProfileCost.of("h100-ctx0-kernel", "qwen2.5-32b")
    assert one.context_free and one.seconds(9000, 1, 1) == pytest.approx(0.027857)
    ctx = ProfileCost.of("h100-context-kernel", "qwen2.5-32b")
    assert ctx.seconds(0, 1, 1) == pytest.approx(0.02795)  # below the first measured context: clamped
    with pytest.raises(InputError, match="context 0 is outside"):
        ProfileCost.of("h100-context-kernel", "qwen2.5-32b", below="error").seconds(0, 1, 1)


def test_judge_tp_and_notes(constant):
    b = Behaviour(alpha1=0.5, step_tokens=Constant(52))
    hw = Hardware(constant, "big", "small", judge_arch="judge")
    cfg = sim_config(b, hw, Setting("async", 3, 1), 100, 0)
    n = JUDGE_TEMPLATE_TOKENS + 104  # template + two 52-token steps
    assert cfg.verifier_latency.mean == pytest.approx((10 + 20 * (n - 128) / 384) / 1000)
    p = predict(b, Hardware(constant, "big", "small", target_tp=2, tp_efficiency=0.8), Setting("async", 3, 1),
                steps=500)
    assert p.c1 == pytest.approx(5 / (20 / 1.6))
    assert any("assumed" in x and "0.8" in x for x in p.notes) and any("free" in x for x in p.notes)
    with pytest.raises(InputError, match="tensor parallelism is an assumption"):
        Hardware(constant, "big", "small", target_tp=2)


def test_plan_with_a_profile_respects_the_budget(constant):
    b = Behaviour(alpha1=0.6, alpha2=0.5, step_tokens=Constant(30))
    tp = plan(b, Hardware(constant, "big", "small"), budget=6, k2_max=3, steps=1000, bootstrap=0)
    assert tp.ranked and all(r["positions"] <= 6 for r in tp.ranked)
    assert {r["mode"] for r in tp.ranked} == {"ar", "sync", "async"}
    assert tp.best.setting.k1 == tp.ranked[0]["k1"] and tp.best.speedup > 1
    assert tp.ranked[0]["speedup"] == max(r["speedup"] for r in tp.ranked if r["steps"] == 1000)


def test_behaviour_from_traces(des_traces):
    b = behaviour_from_traces(des_traces)
    assert b.alpha1 == pytest.approx(0.7, abs=0.03) and b.source == "traces" and b.step_tokens.mean == 52


# --- command line -------------------------------------------------------------------------------------


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_listed_profile_name_works_with_the_interface_example(capsys):
    code, out, _ = run(capsys, "profiles")
    names = [ln.split()[0] for ln in out.strip().splitlines()]
    assert code == 0 and names == sorted(embedded())
    for name in names:
        code, out, err = run(capsys, "replay", "--hardware", name, "--target-arch", "qwen2.5-32b", "--draft-arch",
                             "qwen2.5-1.5b", "--alpha1", "0.6", "--mode", "async", "--k1", "4",
                             "--verifier-latency", "0.013", "--steps", "1500", "--json")
        assert code == 0, err
        d = json.loads(out)
        assert d["speedup"] > 0.5 and d["setting"]["hardware"] == name and d["notes"]


def test_replay_hardware_with_context_growth_and_its_limits(capsys):
    base = ["replay", "--hardware", "h100-context-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch",
            "qwen2.5-1.5b", "--alpha1", "0.5", "--mode", "ar", "--k1", "1", "--steps", "800", "--bootstrap", "0"]
    code, out, err = run(capsys, *base, "--prompt-tokens", "1024", "--request-tokens", "4000", "--json")
    assert code == 0, err
    assert any("grows from the prompt (1024 tokens)" in n for n in json.loads(out)["notes"])
    code, out, err = run(capsys, *base, "--prompt-tokens", "1024", "--request-tokens", "20000", "--extrapolate",
                         "error")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "h100-context-kernel.json: qwen2.5-32b: context 21024 is outside the measured range" in err
    code, out, err = run(capsys, *base, "--prompt-tokens", "1024", "--request-tokens", "20000")
    assert code == 0, err  # the default policy continues the outermost segment


@pytest.mark.parametrize("argv,message", [
    (["replay", "--target-arch", "x"], "--target-arch only go(es) with --hardware"),
    (["replay", "--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b", "--alpha1", "0.5"],
     "needs --draft-arch"),
    (["replay", "--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b"],  # the traces' draft: not in it
     "no architecture 'qwen2.5-coder-0.5b'"),
    (["replay", "--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b",
      "--step-tokens", "40"], "give --alpha1 too"),
    (["replay", "some.jsonl", "--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch",
      "qwen2.5-1.5b", "--alpha1", "0.5"], "not both"),
    (["replay", "--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b",
      "--alpha1", "0.5", "--target-tp", "2"], "tensor parallelism is an assumption"),
    (["replay", "--hardware", "h100-ctx0-kernel", "--target-arch", "llama", "--draft-arch", "qwen2.5-1.5b",
      "--alpha1", "0.5"], "no architecture 'llama'"),
    (["replay", "--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b",
      "--alpha1", "0.5", "--alpha2", "0.5", "--k2", "100", "--mode", "ar", "--extrapolate", "error"],
     "positions 100 is outside the measured range 1..64"),
    (["plan", "--k1-max", "3"], "--k1-max only goes with --trace, --hardware or --rate"),
])
def test_bad_hardware_input_is_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


def test_bad_profile_file_names_the_file(capsys, tmp_path, constant):
    bad = json.loads(Path(constant).read_text())
    bad["version"] = 2
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    code, out, err = run(capsys, "replay", "--hardware", str(path), "--target-arch", "big", "--draft-arch", "small",
                         "--alpha1", "0.5")
    assert code == 2 and out == "" and f"{path}: version: unknown version 2" in err
    del bad["archs"]["big"]["batch"]
    bad["version"] = 1
    path.write_text(json.dumps(bad))
    code, out, err = run(capsys, "plan", "--hardware", str(path), "--target-arch", "big", "--draft-arch", "small")
    assert code == 2 and "missing axis 'batch'" in err and str(path) in err


def test_plan_hardware_cli(capsys, constant):
    code, out, err = run(capsys, "plan", "--hardware", constant, "--target-arch", "big", "--draft-arch", "small",
                         "--alpha1", "0.6", "--alpha2", "0.5", "--budget", "4", "--k2-max", "2", "--bootstrap", "0",
                         "--json")
    assert code == 0, err
    d = json.loads(out)
    assert {"mode", "k1", "k2", "speedup", "ranked", "closed_form_plan", "notes"} <= d.keys()
    assert all(r["positions"] <= 4 for r in d["ranked"]) and math.isfinite(d["speedup"])
    assert load_profile(constant).name == "constant"


# ----------------------------------------------------------------------------- architectures from the traces' header


def _with_models(tmp_path, models):
    """The embedded default traces with their headers' ``models`` replaced (None: removed)."""
    import gzip

    from lrsim.trace import default_traces

    out = []
    for p in default_traces():
        lines = gzip.open(p, "rt", encoding="utf-8").read().splitlines()
        h = json.loads(lines[0])
        h["models"] = models
        q = tmp_path / p.name.replace(".gz", "")
        q.write_text("\n".join([json.dumps(h)] + lines[1:]) + "\n", encoding="utf-8")
        out.append(str(q))
    return out


def test_hardware_takes_the_architectures_from_the_traces_header(capsys):
    """The embedded traces name lrref's cache paths of the default pair: priced as qwen2.5-coder-1.5b/0.5b."""
    code, out, err = run(capsys, "replay", "--hardware", "model:h100", "--mode", "async", "--k1", "2", "--steps",
                         "1000", "--bootstrap", "0", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("target qwen2.5-coder-1.5b: model:h100") for n in notes), notes
    assert any(n.startswith("draft qwen2.5-coder-0.5b:") for n in notes) and not any("priced, but" in n for n in notes)
    code, out, err = run(capsys, "plan", "--hardware", "model:h100", "--trace", "--budget", "3", "--k2-max", "1",
                         "--bootstrap", "0", "--json")
    assert code == 0 and json.loads(out)["best"]["setting"]["hardware"].startswith("model-h100"), err


def test_flags_beside_the_traces_header_win_and_a_difference_is_a_note(capsys):
    base = ["--hardware", "model:h100", "--mode", "async", "--k1", "2", "--steps", "1000", "--bootstrap", "0", "--json"]
    code, out, err = run(capsys, "replay", *base, "--target-arch", "qwen2.5-32b")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("target: qwen2.5-32b priced, but the traces recorded ") and "(qwen2.5-coder-1.5b)" in n
               for n in notes), notes
    assert not any(n.startswith("draft:") for n in notes)  # the draft came from the header: it agrees
    code, out, err = run(capsys, "replay", *base, "--target-arch", "Qwen/Qwen2.5-Coder-1.5B-Instruct")
    assert code == 0 and not any("priced, but" in n for n in json.loads(out)["notes"]), err  # an alias: the same


def test_an_architecture_the_header_cannot_give_names_the_missing_flag(capsys, tmp_path):
    traces = _with_models(tmp_path, {"target": "/cache/smollm2-135m-instruct/model", "draft": "qwen2.5-0.5b"})
    code, out, err = run(capsys, "replay", *traces, "--hardware", "model:h100")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "--hardware needs --target-arch (the traces' target model /cache/smollm2-135m-instruct/model is no " \
           "known architecture)" in err
    traces = _with_models(tmp_path, None)
    code, out, err = run(capsys, "plan", "--trace", *traces, "--hardware", "model:h100")
    assert code == 2 and err.count("\n") == 1, err
    assert "--hardware needs --target-arch and --draft-arch (the traces' header names no target model; the " \
           "traces' header names no draft model)" in err
    code, out, err = run(capsys, "replay", *traces, "--hardware", "model:h100", "--target-arch", "qwen2.5-7b",
                         "--draft-arch", "qwen2.5-0.5b", "--steps", "1000", "--bootstrap", "0", "--json")
    notes = json.loads(out)["notes"]
    assert code == 0 and not any("priced, but" in n or "not checked" in n for n in notes), err  # nothing to compare


def test_a_header_model_that_matches_no_architecture_is_noted_not_checked(capsys, tmp_path):
    traces = _with_models(tmp_path, {"target": "/cache/smollm2-135m-instruct/model", "draft": "qwen2.5-0.5b"})
    code, out, err = run(capsys, "replay", *traces, "--hardware", "model:h100", "--target-arch", "qwen2.5-7b",
                         "--mode", "async", "--k1", "2", "--steps", "1000", "--bootstrap", "0", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert "target: the traces' model /cache/smollm2-135m-instruct/model is no known architecture, so qwen2.5-7b " \
           "(priced) is not checked against it" in notes
    assert any(n.startswith("draft qwen2.5-0.5b:") for n in notes)  # the draft from the header


def test_prompt_kv_from_the_recorded_first_passes():
    """The llama.cpp validation recording ran each problem's modes one after another on one engine: ar prefilled
    every prompt, sd found it in the target's KV (its first pass: context = prompt - 1).  Calibration reads that
    off the pass records; the configuration and the ar baseline are priced each with their own share."""
    from lrsim.prediction.calibrate import prompt_cached, prompt_kv

    root = Path(__file__).resolve().parents[1] / "studies" / "data" / "validation-llamacpp" / "g2"
    ar, sd, lr = (read_trace(root / f"trace-{m}.jsonl.gz") for m in ("ar", "sd", "lr-async"))
    assert prompt_cached([ar]) == 0.0 and prompt_cached([sd]) == pytest.approx(1.0)
    assert prompt_cached([lr], "draft") == 0.0  # lr-async's draft process prefilled every prompt
    assert prompt_cached([ar], "draft") is None  # no draft passes: no evidence
    assert prompt_kv([ar, sd, lr]) == pytest.approx({"ar": 0.0, "target": 1.0, "draft": 0.0})
    b = behaviour_from_traces([ar, sd])
    assert (b.baseline_prompt_cached, b.prompt_cached, b.draft_prompt_cached) == (0.0, pytest.approx(1.0), 0.0)
    from lrsim.prediction.compose import trace_hardware

    hw = trace_hardware([ar, sd], b.alpha2)
    assert hw.kv_prefill == "unseen"
    assert sim_config(b, hw, Setting("ar", 1, 5), 100, 0).prompt_cached == pytest.approx(1.0)  # sd
    assert sim_config(b, hw, Setting("ar", 1, 1), 100, 0).prompt_cached == 0.0  # the baseline
    alone = behaviour_from_traces([sd])  # no ar trace: the baseline keeps the default (every prompt prefilled)
    assert alone.baseline_prompt_cached == 0.0 and alone.prompt_cached == pytest.approx(1.0)
    p = predict(b, hw, Setting("ar", 1, 5), steps=2000, bootstrap=0)
    assert any(n.startswith("prompt: a request's first pass found 100%") for n in p.notes)


def test_plan_goes_on_when_the_closed_form_choice_cannot_be_priced():
    """At a 30K-token prompt the H100 context profile has no batch-2 pass of the 32B (it needs ~78 GB): the paper's
    plan (async, several rows) cannot be priced, so it is reported as such and the plan ranks what can be priced."""
    import lrsim
    from lrsim.prediction.compose import Behaviour, plan
    from lrsim.prediction.outcome import format_trace_plan

    hw = lrsim.hardware("h100-context-kernel", "qwen2.5-32b", "qwen2.5-1.5b")
    tp = plan(Behaviour(alpha1=0.6, prompt_tokens=30000), hw, 16, steps=400)
    c = tp.closed_form_choice_simulated
    assert c["simulated_speedup"] is None and "was not measured" in c["not_priced"]
    assert tp.ranked and all(r["mode"] == "ar" for r in tp.ranked)  # one row per pass: every LR batch needs b >= 2
    assert "the profile cannot price it" in format_trace_plan(tp)
