"""Adaptive LR in simulation (issue 34, validation b): on the modelled GPUs of the paper's setups, does ``auto``
(:class:`lrsim.adaptive.Policy` choosing every few steps, :mod:`lrsim.adaptive.sim`) reach the best fixed
configuration chosen offline for the workload, and how does it compare with the paper's and the official code's
fixed defaults?

    python studies/adaptive_check.py                     # figures/adaptive_check.json and a table, ~10 min on 2 cores
    python studies/adaptive_check.py --requests 8 --steps 20 --out /tmp/a.json   # quick

Setups: the paper's H100 TP 2 (qwen2.5-32b target on two H100s, qwen2.5-1.5b draft on its own) and the official
README's H200 TP 2 (qwen3-32b, qwen3-1.7b), both modelled (vLLM-like engine, bf16, the 7B judge's 13 ms per
call); the CPU pair (qwen2.5-coder 1.5b / 0.5b) on its measured llama.cpp profile, where LR does not pay.  Workloads of
``--requests`` requests of ``--steps`` output steps (prompt 200 tokens):

- ``recorded-math``, ``recorded-judge``: each request's step acceptance drawn from the per-request acceptance of a
  recorded lr-async run (``studies/data/answer-quality``: the math verifier at 0.85, the 1.5B judge at 2), token
  acceptance the recorded n-gram acceptance (``studies/data/validation-llamacpp/g2``, sd);
- ``falling``: acceptance 0.8 for the first half of every request, 0.3 after; ``rising``: the reverse.

Every fixed configuration (ar, token SD, lr-sync and lr-async at gamma 1-8, each with k2 in 1, 4, 7, 9) runs every
request with the same random numbers as auto; "best fixed" is the one with the most tokens per second over the
whole workload (an oracle: it knows the workload).  The per-phase oracle also knows where acceptance changes: the
best fixed configuration of each phase, switched to at the phase boundary for free
(:meth:`lrsim.adaptive.sim.AutoResult.phase_oracle`), the most any policy could gain over the best fixed one there.
Auto's policy starts from a prior at the workload's mean acceptance (what a planner would be given) worth 4
observations, weighs at most the last 32 verdicts, decides every 4 steps, keeps a choice 4 decisions and switches
only for a gain of 1/16 under the same draw (a switch drops the drafts in flight: about one step in 16); issue 42
item 5's rules (``AutoOptions``: a near-tie in lr-async depth goes to the deepest, token acceptance is not drawn
before a token verdict, a changepoint test at 0.01 restarts the step-acceptance estimate; ``--policy-before``: none
of them).  Auto runs twice: its objective the closed forms (``lrsim.adaptive.speedup``) and the priced simulator's
table (``SimulatedObjective``: every configuration simulated at a grid of acceptances, ``TABLE_STEPS`` steps a
point, one table per setup shared by its workloads).
*Held out*: the policy's rules and the grid were set on a development run (``--requests 6 --steps 20 --seed 0``);
seeds 2 and 3 ran once each after them; item 5's rules were set on ``--seed 0`` (40 and 10 requests) and seed 4
ran once after them (docs/validation/adaptive.md, "How the rules were chosen").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lrsim.atomic import atomic_output
from lrsim.errors import UsageError, run_command
from lrsim.theory.costaware import Arm

SETUPS = {  # name: (profile, target arch, draft arch, verifier seconds per call); on a GPU the draft has its own
    "H100 TP 2 (paper)": ("model:h100-sxm:tp2:vllm-0.10", "qwen2.5-32b", "qwen2.5-1.5b", 0.013),  # the 7B judge
    "H200 TP 2 (official README)": ("model:h200:tp2:vllm-0.10", "qwen3-32b", "qwen3-1.7b", 0.013),  # (SPEC.md)
    # the CPU pair on its measured llama.cpp profile (AMD EPYC Zen 4, 2 cores), the math verifier (0.54 ms a pair)
    "CPU, llama.cpp (Zen 4 profile)": (str(ROOT / "studies" / "data" / "profiles" / "cpu-llamacpp-epyc-zen4.json"),
                                       "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct", 0.00054),
}
K2S = (1, 4, 7, 9)
FIXED_DEFAULTS = {  # label: Arm(mode, k1, k2)
    "paper: LR gamma 6": ("async", 6, 1), "paper: LR gamma 6 + n-gram 8": ("async", 6, 9),
    "official: depth 4": ("async", 4, 1), "official: depth 4 + n-gram 6": ("async", 4, 7),
}
DWELL, MARGIN, SEGMENT = 4, 1 / 16, 4  # decisions a choice is kept, the gain a switch needs (one step of drain over DWELL x SEGMENT steps), steps per decision
MEMORY = 32  # verdicts the posteriors weigh at most (older ones fade)
TABLE_STEPS = 1600  # output steps of a grid point of the simulated objective's table (4x the class default's)
RECORDED = {"recorded-math": "lr-async-math-0.85", "recorded-judge": "lr-async-judge-2"}


def recorded_acceptance(row: str) -> list[float]:
    """Per-request step acceptance of a recorded lr-async run: accepted steps over steps."""
    from lrsim.trace import read_trace

    t = read_trace(ROOT / "studies" / "data" / "answer-quality" / row / "trace-lr-async.jsonl.gz")
    return [r.accepted_steps / r.steps for r in t.requests if r.steps]


def token_acceptance_recorded() -> float:
    from lrsim.prediction.compose import behaviour_from_traces
    from lrsim.trace import read_trace

    t = read_trace(ROOT / "studies" / "data" / "validation-llamacpp" / "g2" / "trace-sd.jsonl.gz")
    return float(behaviour_from_traces([t]).alpha2)


def workloads(n: int, steps: int, seed: int) -> dict[str, list[list]]:
    """Each workload: ``n`` requests, each a list of :class:`lrsim.adaptive.sim.Phase`."""
    from lrsim.adaptive.sim import Phase

    rng = np.random.default_rng(seed)
    a2 = token_acceptance_recorded()
    out = {}
    for name, row in RECORDED.items():
        acc = recorded_acceptance(row)
        out[name] = [[Phase(steps, float(a), a2)] for a in rng.choice(acc, size=n)]
    half = max(1, steps // 2)
    out["falling"] = [[Phase(half, 0.8, a2), Phase(steps - half, 0.3, a2)] for _ in range(n)]
    out["rising"] = [[Phase(half, 0.3, a2), Phase(steps - half, 0.8, a2)] for _ in range(n)]
    return out


def mean_acceptance(reqs: list[list]) -> float:
    steps = sum(p.steps for r in reqs for p in r)
    return sum(p.alpha1 * p.steps for r in reqs for p in r) / steps


_TABLES: dict = {}  # (setup, seed) -> the simulated objective's table, shared by the setup's workloads


def priced_table(setup: str, hw, b, candidates, seed: int):
    """The simulated objective's table of a setup (:class:`lrsim.adaptive.sim.SimulatedObjective`, ``TABLE_STEPS``
    steps a grid point), built once and shared by its workloads: a grid point's run sets its own step and token
    acceptance, so the workloads' tables would be the same runs."""
    from lrsim.adaptive.sim import SimulatedObjective, compose_config_of

    if (setup, seed) not in _TABLES:
        _TABLES[setup, seed] = SimulatedObjective(compose_config_of(b, hw), candidates, steps=TABLE_STEPS, seed=seed)
    return _TABLES[setup, seed]


def check(setup: str, wname: str, reqs: list[list], seed: int, simulated: bool = True, learn_speed: bool = True,
          before: bool = False) -> dict:
    """One setup and workload: every fixed configuration and auto over the same requests (``before``: without
    issue 42 item 5's three rules, ``AutoOptions.deep_ties``, ``draw_token_prior`` and ``changepoint``)."""
    import lrsim
    from lrsim.adaptive.policy import AutoOptions, Policy
    from lrsim.adaptive.sim import ar_token_seconds, compose_config_of, costs_of, run_workload
    from lrsim.prediction.compose import Behaviour

    prof, target, draft, verifier_s = SETUPS[setup]
    hw = lrsim.hardware(prof, target, draft, verifier_latency=verifier_s)
    a2 = reqs[0][0].alpha2
    b = Behaviour(alpha1=mean_acceptance(reqs), alpha2=a2, prompt_tokens=200)
    costs = costs_of(hw, b)
    opts = AutoOptions(max_gamma=8, k2s=K2S, dwell=DWELL, switch_margin=MARGIN, segment_steps=SEGMENT,
                       prior_weight=4, memory=MEMORY, learn_speed=learn_speed)
    if before:
        opts = replace(opts, deep_ties=False, draw_token_prior=True, changepoint=None)
    t0 = time.perf_counter()
    unit = ar_token_seconds(hw, b)
    r = run_workload(reqs, compose_config_of(b, hw), costs, b.alpha1, a2, 52, opts, seed=seed, ar_token_s=unit)
    sim = (run_workload(reqs, compose_config_of(b, hw), costs, b.alpha1, a2, 52,  # the same requests and seeds as r
                        replace(opts, objective="simulated"), seed=seed, ar_token_s=unit,
                        table=priced_table(setup, hw, b, opts.candidates(), seed))
           if simulated else r)
    oracle_arms, oracle = r.phase_oracle()
    sim_best = sim.speedup(sim.fixed[sim.best])
    best = r.best
    planned = Policy(costs, alpha1=b.alpha1, alpha2=a2, step_tokens=52, candidates=opts.candidates()).best()
    used = r.auto.steps_by_arm()
    total = sum(used.values())
    top = sorted(used.items(), key=lambda kv: -kv[1])[:3]
    auto = r.speedup(r.auto)
    return {"setup": setup, "workload": wname, "requests": len(reqs), "mean_alpha1": b.alpha1, "alpha2": a2,
            "ar_tps": r.tokens_per_second(r.ar), "auto_speedup": auto, "best_fixed": best.label,
            "best_fixed_speedup": r.speedup(r.fixed[best]), "auto_over_best": auto / r.speedup(r.fixed[best]),
            "phase_oracle": [a.label for a in oracle_arms], "phase_oracle_speedup": oracle,
            "auto_over_phase_oracle": auto / oracle,
            "planned": planned.label, "planned_speedup": r.speedup(r.fixed[planned]),
            "auto_over_planned": auto / r.speedup(r.fixed[planned]),
            "defaults": {k: {"speedup": r.speedup(r.fixed[Arm(*v)]), "auto_over": auto / r.speedup(r.fixed[Arm(*v)])}
                         for k, v in FIXED_DEFAULTS.items()},
            "auto_steps": {k: v / total for k, v in top}, "switches_per_request": r.switches / len(reqs),
            "auto_simulated_speedup": sim.speedup(sim.auto) if simulated else None,
            "auto_simulated_over_best": sim.speedup(sim.auto) / sim_best if simulated else None,
            "auto_simulated_steps": dict(sorted(((k, v / total) for k, v in sim.auto.steps_by_arm().items()),
                                                key=lambda kv: -kv[1])[:3]),
            "switches_per_request_simulated": sim.switches / len(reqs),
            "wall_s": time.perf_counter() - t0}


def table(rows: list[dict]) -> str:
    head = ("| setup | workload | mean a1 | best fixed (oracle) | its speedup | per-phase oracle / best | "
            "planned at the mean a1 | its speedup | auto | auto / best | auto, simulated objective | its / best | "
            "auto / paper LR+n-gram (g6, k2 9) | auto / official (d4, k2 7) | auto's most used |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        d = r["defaults"]
        most = ", ".join(f"{k} {100 * v:.0f}%" for k, v in r["auto_steps"].items())
        out.append(f"| {r['setup']} | {r['workload']} | {r['mean_alpha1']:.2f} | {r['best_fixed']} | "
                   f"{r['best_fixed_speedup']:.2f}x | {r['phase_oracle_speedup'] / r['best_fixed_speedup']:.3f} | "
                   f"{r['planned']} | {r['planned_speedup']:.2f}x | "
                   f"{r['auto_speedup']:.2f}x | {r['auto_over_best']:.3f} | "
                   + (f"{r['auto_simulated_speedup']:.2f}x | {r['auto_simulated_over_best']:.3f} | "
                      if r["auto_simulated_speedup"] is not None else "- | - | ") +
                   f"{d['paper: LR gamma 6 + n-gram 8']['auto_over']:.3f} | "
                   f"{d['official: depth 4 + n-gram 6']['auto_over']:.3f} | {most} |")
    return "\n".join(out)


def depths(steps: int = 3000, seed: int = 0) -> str:
    """Why a near-tie in lr-async depth goes to the deeper one (``AutoOptions.deep_ties``): on each setup, lr-async
    with ``k2`` 4 at gamma 2-8, its speedup over ar simulated (``steps`` output steps at one acceptance, one seed)
    and by the closed forms the policy ranks by (:func:`lrsim.adaptive.speedup`), at step acceptance 0.2, 0.5 and
    0.8, token acceptance the recorded n-gram one."""
    import lrsim
    from lrsim.adaptive import speedup
    from lrsim.adaptive.sim import Phase, compose_config_of, costs_of
    from lrsim.prediction.compose import Behaviour
    from lrsim.sim import simulate

    a2, gammas = token_acceptance_recorded(), range(2, 9)
    out = ["| setup | a1 | " + " | ".join(f"gamma {g}: sim / closed form" for g in gammas) +
           " | closed forms' best | simulator's best |", "|" + "---|" * (len(gammas) + 4)]
    for setup, (prof, target, draft, verifier_s) in SETUPS.items():
        hw = lrsim.hardware(prof, target, draft, verifier_latency=verifier_s)
        b = Behaviour(alpha1=0.5, alpha2=a2, prompt_tokens=200)
        config_of, costs = compose_config_of(b, hw), costs_of(hw, b)
        for a1 in (0.2, 0.5, 0.8):
            def tps(arm: Arm) -> float:
                r = simulate(config_of(arm, Phase(steps, a1, a2), steps, seed))
                return r.output_tokens / r.sim_time

            ar = tps(Arm("ar"))
            sim = {g: tps(Arm("async", g, 4)) / ar for g in gammas}
            cf = {g: speedup(Arm("async", g, 4), a1, a2, 52, costs) for g in gammas}
            out.append(f"| {setup} | {a1:g} | " + " | ".join(f"{sim[g]:.3f} / {cf[g]:.3f}" for g in gammas) +
                       f" | {max(gammas, key=cf.__getitem__)} | {max(gammas, key=sim.__getitem__)} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=40, help="requests per workload")
    ap.add_argument("--steps", type=int, default=60, help="output steps per request")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "figures" / "adaptive_check.json")
    ap.add_argument("--closed-form-only", action="store_true",
                    help="auto with the closed forms only (the simulated objective's table takes minutes per row)")
    ap.add_argument("--no-learn-speed", action="store_true",
                    help="auto without the speed model (AutoOptions.learn_speed False: the policy before issue 42)")
    ap.add_argument("--policy-before", action="store_true",
                    help="auto without issue 42 item 5's rules (AutoOptions deep_ties False, draw_token_prior True, "
                         "changepoint None)")
    ap.add_argument("--depths", action="store_true",
                    help="only the table behind AutoOptions.deep_ties: lr-async k2 4 at gamma 2-8, simulated "
                         "(3,000 steps) and by the closed forms, at step acceptance 0.2, 0.5, 0.8 on each setup; "
                         "writes nothing")
    a = ap.parse_args()
    if a.depths:
        print(depths(seed=a.seed))
        return 0
    if a.requests < 1 or a.steps < 2:
        raise UsageError("--requests >= 1 and --steps >= 2")
    t0 = time.perf_counter()
    rows = []
    for setup in SETUPS:
        for wname, reqs in workloads(a.requests, a.steps, a.seed).items():
            rows.append(check(setup, wname, reqs, a.seed, simulated=not a.closed_form_only,
                              learn_speed=not a.no_learn_speed, before=a.policy_before))
            print(f"{setup} / {wname}: auto {rows[-1]['auto_speedup']:.2f}x, best fixed "
                  f"{rows[-1]['best_fixed']} {rows[-1]['best_fixed_speedup']:.2f}x", file=sys.stderr, flush=True)
    doc = {"command": " ".join(["python", "studies/adaptive_check.py", *sys.argv[1:]]), "requests": a.requests,
           "steps": a.steps, "seed": a.seed, "learn_speed": not a.no_learn_speed, "policy_before": a.policy_before,
           "table_steps": TABLE_STEPS, "setups": SETUPS, "k2s": list(K2S), "rows": rows,
           "wall_s": round(time.perf_counter() - t0, 1)}
    with atomic_output(a.out, text=True) as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    print(table(rows))
    print(f"\nwrote {a.out} in {doc['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(run_command("adaptive_check", main))
