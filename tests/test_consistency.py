"""One answer from the same traces (issue 20): serve at a load where requests never overlap, replay, and simulate
agree on every mode's seconds per output token, from the embedded default traces, from synthetic traces of an
engine with known costs, and on a latency profile; and exactly where the numbers can be built by hand.

The quantity compared is what each reports for the decode phase: serve's mean time per output token (TPOT) of a
closed loop with one client (one request at a time), replay's and simulate's simulated seconds per output token.
"Agree" means the difference is within the sum of the two 95% half-widths (replay: its bootstrap; serve: its
replications; simulate: its batch means), plus 2% for what the two engines model differently at a request's edges
(serve's first token comes from the prompt's prefill, replay's from a decode pass).
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lrsim.cost.hardware import HardwareSpec
from lrsim.cost.passcost import constant, grid
from lrsim.dists import Constant, LogNormal
from lrsim.prediction.compose import Behaviour, predict
from lrsim.prediction.replay import predict as replay_predict
from lrsim.serve.calibration import decode_from_traces, length_pairs
from lrsim.modes import SIM_MODE
from lrsim.serve.config import ServeConfig
from lrsim.serve.grid import serve_grid
from lrsim.sim import SimConfig, simulate
from lrsim.trace import Setting, default_traces, read_trace

EDGE = 0.02  # what differs at a request's edges (see the module docstring)
MODES = [("ar", 1, 1), ("sd", 1, 5), ("lr-sync", 2, 1), ("lr-sync", 2, 5), ("lr-async", 2, 1), ("lr-async", 2, 5)]


def half(ci) -> float:
    return (ci[1] - ci[0]) / 2 if ci and ci[0] is not None and ci[1] is not None else 0.0


def replay_spt(p) -> tuple[float, float]:
    """A prediction's seconds per output token and its half-width (from the speedup's interval)."""
    spt = 1 / p.tokens_per_second
    if not p.speedup_ci95:
        return spt, 0.0
    lo, hi = (spt * p.speedup / s for s in reversed(p.speedup_ci95))  # spt = base_spt / speedup
    return spt, (hi - lo) / 2


def serve_spt(cfg: ServeConfig, mode: str, k1: int, k2: int) -> tuple[float, float]:
    """Serve's TPOT (s) with one client in a closed loop, and its half-width over the replications."""
    cfg = replace(cfg, decode=replace(cfg.decode, k1=max(k1, 2), k2=k2))
    rows, _ = serve_grid(cfg, [mode], [1], workers=1, key="concurrency")
    r = rows[0]
    return r["tpot_mean"], half((r["tpot_mean_lo"], r["tpot_mean_hi"]))


def agree(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return abs(a[0] - b[0]) <= a[1] + b[1] + EDGE * max(a[0], b[0])


@pytest.fixture(scope="module")
def embedded():
    return [read_trace(p) for p in default_traces()]


@pytest.mark.parametrize("mode,k1,k2", MODES)
def test_serve_agrees_with_replay_on_the_embedded_traces(embedded, mode, k1, k2):
    p = replay_predict(embedded, Setting(SIM_MODE[mode], k1, k2), steps=3000, bootstrap=10)
    decode, hw = decode_from_traces(embedded, k2)
    cfg = ServeConfig(decode=decode, hardware=hw, requests=24, pairs=length_pairs(embedded), replications=4,
                      warmup=0.0)
    a, b = replay_spt(p), serve_spt(cfg, mode, k1, k2)
    assert agree(a, b), (mode, k1, k2, a, b)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Traces of an engine whose pass costs 20 + 6 b + 2 b (q - 1) ms (a draft of 5 + 1.5 b ms), every mode."""
    d = tmp_path_factory.mktemp("engine")
    target = grid((1, 2, 4), (1, 5), tuple(tuple((20 + 6 * b + 2 * b * (q - 1)) / 1e3 for q in (1, 5))
                                            for b in (1, 2, 4)), "linear")
    draft = grid((1, 2), (1, 5), tuple(tuple((5 + 1.5 * b) / 1e3 for _ in (1, 5)) for b in (1, 2)), "linear")
    common = dict(alpha1=0.6, alpha2=0.5, c2=1e-9, steps=2500, seed=3, target_latency=target, draft_latency=draft,
                  step_tokens=LogNormal(30, 0.4))  # one endless request: a simulated trace records no others
    runs = {"ar": dict(mode="ar"), "sd": dict(mode="ar", k2=5), "sync": dict(mode="sync", k1=2),
            "async": dict(mode="async", k1=2), "sync_sd": dict(mode="sync", k1=2, k2=5),
            "async_sd": dict(mode="async", k1=2, k2=5)}
    for name, kw in runs.items():
        simulate(SimConfig(**common, **kw), trace=d / f"{name}.jsonl")
    return [read_trace(d / f"{n}.jsonl") for n in runs], common


@pytest.mark.parametrize("mode,k1,k2", MODES)
def test_replay_and_simulate_agree_on_synthetic_traces(synthetic, mode, k1, k2):
    """Replay of the traces vs simulate on the engine that wrote them (its true costs), same configuration."""
    traces, common = synthetic
    sim_mode = SIM_MODE[mode]
    p = replay_predict(traces, Setting(sim_mode, k1, k2), steps=3000, bootstrap=10)
    truth = simulate(SimConfig(**(common | {"mode": sim_mode, "k1": k1, "k2": k2, "steps": 6000, "seed": 9})))
    spt = truth.sim_time / truth.output_tokens
    se = spt * half(truth.speedup_ci95) / truth.speedup if truth.speedup_ci95[0] is not None else 0.0
    assert agree(replay_spt(p), (spt, se)), (mode, k1, k2, replay_spt(p), spt)


@pytest.mark.parametrize("mode,k1,k2", MODES)
def test_serve_agrees_with_compose_on_a_profile(mode, k1, k2):
    """--hardware: serve on h100-ctx0-kernel vs replay --hardware with the same behaviour numbers."""
    hw = HardwareSpec("h100-ctx0-kernel", "qwen2.5-32b", "qwen2.5-1.5b", verifier_latency=Constant(0.013))
    b = Behaviour(alpha1=0.6, alpha2=0.4, step_tokens=LogNormal(40, 0.4), request_tokens=Constant(400),
                  prompt_tokens=128)
    p = predict(b, hw, Setting(SIM_MODE[mode], k1, k2), steps=4000)
    decode = SimConfig(alpha1=0.6, alpha2=0.4, c2=1e-9, step_tokens=LogNormal(40, 0.4), draft_sd=k2 > 1,
                       verifier_latency=Constant(0.013))
    cfg = ServeConfig(decode=decode, hardware=hw, requests=24, prompt_tokens=Constant(128),
                      output_tokens=Constant(400), replications=4, warmup=0.0)
    a = (1 / p.tokens_per_second, replay_spt(p)[1] or 0.02 / p.tokens_per_second)
    assert agree(a, serve_spt(cfg, mode, k1, k2)), (mode, k1, k2)


@settings(max_examples=25, deadline=None)
@given(tau_t=st.floats(0.01, 0.5), tau_d=st.floats(0.001, 0.5), step=st.integers(1, 40), m=st.integers(2, 6))
def test_constant_costs_give_the_same_exact_answer_everywhere(tau_t, tau_d, step, m):
    """Constant pass costs, constant steps, requests of 1 + m steps' tokens: ar costs tau_t per token; sync with
    k1 = 2 and every draft rejected costs tau_t + tau_d per token (a cycle drafts a step, then the target writes
    one); serve's TPOT, replay's and simulate's seconds per token are these numbers exactly."""
    out = 1 + m * step  # serve's first token comes from the prompt's prefill; then m steps of `step` tokens
    decode = SimConfig(alpha1=0.0, c2=1e-9, step_tokens=Constant(step), target_latency=constant(tau_t),
                       draft_latency=constant(tau_d))
    cfg = ServeConfig(decode=decode, requests=3, prompt_tokens=Constant(8), output_tokens=Constant(out),
                      replications=2, warmup=0.0)
    for mode, exact in (("ar", tau_t), ("lr-sync", tau_t + tau_d)):
        assert serve_spt(cfg, mode, 2, 1)[0] == pytest.approx(exact, rel=1e-9), mode
        sim = simulate(replace(decode, mode=SIM_MODE[mode], k1=2 if mode != "ar" else 1, steps=3 * m,
                               request_tokens=Constant(m * step)))
        assert sim.sim_time / sim.output_tokens == pytest.approx(exact, rel=1e-9), mode
