"""lrsim serve --modes auto (issue 34 item 3): the load-priced costs exactly, the load the chooser reads, learning
step acceptance across requests, backing off under a compute-bound load, the command line."""

import json

import numpy as np
import pytest
from test_serve import FAST, cli

from lrsim.adaptive.policy import Policy
from lrsim.cost.passcost import constant, curve
from lrsim.dists import Constant
from lrsim.serve.auto import Chooser, candidates, load_costs
from lrsim.serve.config import ServeConfig, mode_config
from lrsim.serve.engine import Row
from lrsim.serve.grid import serve_grid
from lrsim.serve.run import build_world, run_once
from lrsim.sim import SimConfig
from lrsim.theory.costaware import Arm, speedup


def linear(a, b):
    """A pricer ``T = a + b x positions`` (rows and context ignored)."""
    return lambda rows, positions, context: a + b * positions


def test_load_costs_charge_the_delay_a_pass_causes_the_other_rows():
    t = linear(0.02, 0.01)
    c = load_costs(t, t, (0, 0.0, 0, 0.0), 100.0, 0.3, True)  # an idle system: the single-request costs
    assert c.target_pass(1) == pytest.approx(0.03) and c.target_pass(5) == pytest.approx(0.07)
    assert c.draft_token_s == pytest.approx(0.03) and c.verify_pair_s == 0.3
    c = load_costs(t, t, (3, 5.0, 2, 2.0), 100.0, 0.0, True)
    # T(P + 1) = 0.02 + 0.06; T(P + 4) = 0.02 + 0.09; T_load(4) = 0.11 + 3 x 0.03
    assert c.target_pass(1) == pytest.approx(0.08) and c.target_pass(4) == pytest.approx(0.11 + 3 * 0.03)
    # the draft: Td(Pd + 1) = 0.05, Td(Pd) = 0.04, D_load = 0.05 + 2 x 0.01
    assert c.draft_token_s == pytest.approx(0.07)


def test_a_compute_bound_batch_makes_speculation_linear_and_a_free_one_keeps_it_free():
    lr, ar = Arm("async", 4), Arm("ar")
    big = load_costs(linear(0.001, 0.01), linear(0.0001, 0.001), (256, 256.0, 0, 0.0), 0.0, 0.0, True)
    assert big.beta(4) == pytest.approx(4, rel=0.01)  # beta -> n: a linear batch
    free = load_costs(linear(0.03, 0.0), linear(0.003, 0.0), (256, 256.0, 0, 0.0), 0.0, 0.0, True)
    assert free.beta(4) == 1.0
    pol = Policy(big, alpha1=0.7, candidates=[ar, lr])
    assert pol.best() == ar and speedup(lr, 0.7, 0.5, 40, big) < 1
    pol = Policy(free, alpha1=0.7, candidates=[ar, lr])
    assert pol.best() == lr and speedup(lr, 0.7, 0.5, 40, free) > 1.5


def test_candidates_are_ar_and_lr_async_at_every_depth_with_the_runs_k2():
    assert [a.label for a in candidates(SimConfig(k1=3, k2=1))] == ["ar", "lr-async gamma=2", "lr-async gamma=3"]
    assert {a.k2 for a in candidates(SimConfig(k1=3, k2=4))} == {4}


def test_the_chooser_reads_rows_positions_and_the_queue():
    cfg = ServeConfig(decode=SimConfig(k1=3), requests=4)
    world, sim = build_world(cfg, "auto")
    assert (sim.mode, sim.k1) == ("async", 3) and mode_config(cfg, "auto") == mode_config(cfg, "lr-async")
    ch = Chooser(sim, world, world.target.price, world.drafter.price, seed=0)
    assert ch.load() == (0, 0.0, 0, 0.0)
    world.target.decode += [Row(0, 1, 1, 1, q=1), Row(0, 4, 1, 4, q=4)]
    world.target.prefill.append(Row(0, 1, 1, 1, prefill=10))
    world.admission.queue.extend([(None, (1, 1))] * 2)
    world.drafter.decode.append(Row(0, 1, 1, 1, q=1))
    assert ch.load() == (5, 8.0, 1, 1.0)  # 2 decode rows (1 + 4 positions), 1 prefilling, 2 queued; 1 draft row


def _cfg(alpha1, **kw):
    dec = SimConfig(alpha1=alpha1, c1=0.1, k1=4, verifier_cost=0.3, step_tokens=Constant(20))
    return ServeConfig(decode=dec, requests=40, output_tokens=Constant(400), prompt_tokens=Constant(32),
                       replications=1, warmup=0, **kw)


@pytest.mark.parametrize("alpha1,lr", [(0.9, True), (0.1, False)])
def test_auto_learns_step_acceptance_across_requests(alpha1, lr):
    # one request at a time (constant passes, a verifier call costs 0.3 of a step): lr-async at depth 4 pays
    # ~2x at a1 = 0.9 and loses (< 0.83x) at 0.1; the prior (0.5) starts in LR either way
    out = run_once(_cfg(alpha1), "auto", 1e-3, 0)
    k1 = out.requests["k1"]
    assert k1[0] > 1  # the neutral prior's choice
    late = float(np.mean(k1[20:] > 1))
    assert (late >= 0.9) if lr else (late <= 0.15), late
    again = run_once(_cfg(alpha1), "auto", 1e-3, 0)
    assert np.array_equal(again.requests["end"], out.requests["end"])  # seeded: the same run exactly


def test_auto_backs_off_under_a_compute_bound_load():
    # passes cost 10 ms + 2 ms per position: alone, lr-async pays; 48 clients at once make every position count
    # and ar wins; auto follows both
    dec = SimConfig(alpha1=0.7, c1=0.1, k1=4, step_tokens=Constant(20),
                    target_latency=curve([1, 8192], [0.012, 0.010 + 0.002 * 8192], extrapolate="linear"),
                    draft_latency=constant(0.002))
    cfg = ServeConfig(decode=dec, requests=96, output_tokens=Constant(200), prompt_tokens=Constant(32),
                      replications=1, warmup=0.25)
    rows, _ = serve_grid(cfg, ["ar", "lr-async", "auto"], [1, 48], workers=1, key="concurrency")
    by = {(r["mode"], r["concurrency"]): r for r in rows}
    assert by["lr-async", 1]["tpot_mean"] < by["ar", 1]["tpot_mean"]
    assert by["lr-async", 48]["throughput"] < by["ar", 48]["throughput"]  # the premise: LR loses under load
    assert by["auto", 1]["lr_share"] >= 0.9 and by["auto", 48]["lr_share"] <= 0.2
    assert by["auto", 1]["tpot_mean"] <= 1.05 * by["lr-async", 1]["tpot_mean"]
    assert by["auto", 48]["throughput"] >= 0.95 * by["ar", 48]["throughput"]


def test_serve_modes_auto_on_the_command_line(capsys):
    code, out, _ = cli(capsys, "serve", "--rate", "0.5,4", "--modes", "ar,lr-async,auto", "--alpha1", "0.7",
                       "--c1", "0.2", "--k1", "3", *FAST)
    assert code == 0 and "auto: requests that ran lr-async" in out
    code, out, _ = cli(capsys, "serve", "--rate", "1", "--modes", "ar,auto", "--json", *FAST)
    rows = json.loads(out)
    assert code == 0 and rows[1]["mode"] == "auto" and 0 <= rows[1]["lr_share"] <= 1
    assert rows[0]["lr_share"] == 0 and rows[0]["k1_mean"] == 1


def test_plan_rate_refuses_auto(capsys):
    code, out, err = cli(capsys, "plan", "--rate", "1", "--modes", "ar,auto", *FAST)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "lrsim serve" in err
