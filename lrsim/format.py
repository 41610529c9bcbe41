"""The text of results that both the command line and the Python API print: a closed-form plan, one simulation.
Standard library only (``import lrsim`` and ``lrsim --help`` stay light); predictions and simulated plans are
written by :mod:`lrsim.prediction`, serving tables and their titles by :mod:`lrsim.serve.report`.
"""

from __future__ import annotations

import math


def format_plan(plan) -> str:
    """The text of a closed-form budget plan (:func:`lrsim.planner.plan`; ``lrsim plan``, :func:`lrsim.plan`)."""
    b, t, s = plan.best, plan.pure_token, plan.pure_step
    lines = [
        f"Lookahead Reasoning budget plan ({plan.mode}, M = {plan.budget})",
        f"  step level:  alpha1 = {plan.alpha1:g}, c1 = {plan.c1:g}    "
        f"token level: alpha2 = {plan.alpha2:g}, c2 = {plan.c2:g}",
        f"  best split:        k1 = {b.k1:3d}, k2 = {b.k2:3d}  ->  {b.speedup:.3f}x  "
        f"(f = {b.f:.3f}, g = {b.g:.3f}, {b.positions} of {plan.budget} positions)",
        f"  pure token SD:     k1 =   1, k2 = {t.k2:3d}  ->  {t.speedup:.3f}x",
        f"  pure LR:           k1 = {s.k1:3d}, k2 =   1  ->  {s.speedup:.3f}x",
        f"  hybrid gain over the best pure method: {b.speedup / max(t.speedup, s.speedup):.3f}x",
        "",
        "  rank   k1   k2  positions   f(k1)   g(k2)   speedup",
    ]
    lines += [
        f"  {i:4d} {c.k1:4d} {c.k2:4d} {c.positions:10d} {c.f:7.3f} {c.g:7.3f} {c.speedup:8.3f}x"
        for i, c in enumerate(plan.top, 1)
    ]
    if plan.mode == "async":
        lines.append(f"  (async: every k1 >= ceil(1/c1) = {math.ceil(1 / plan.c1 * (1 - 1e-9))} is equivalent; "
                     "the smallest is shown)")
    return "\n".join(lines)


def format_sim(r) -> str:
    """The text of one simulation (:class:`lrsim.sim.SimResult`; ``lrsim simulate``, :func:`lrsim.simulate`)."""
    lo, hi = r.speedup_ci95
    ci = f"95% CI {lo:.3f}-{hi:.3f}, batch means" if lo is not None else "no CI: fewer than 2 cycles"
    th = f"   closed form {r.theory_speedup:.3f}x" if r.theory_speedup is not None else ""
    acc = f"{r.acceptance_rate:.3f}" if r.acceptance_rate is not None else "-"
    cfg = r.config
    return "\n".join([
        f"Lookahead Reasoning simulation ({r.mode}, k1 = {cfg['k1']}, k2 = {cfg['k2']}, W = {cfg['width']}, "
        f"{r.steps} steps, seed {cfg['seed']})",
        f"  speedup              {r.speedup:.3f}x  ({ci}){th}",
        f"  acceptance rate      {acc}  (model P_W = {r.accept_probability:.3f})",
        f"  per cycle            {r.steps_per_cycle:.3f} steps, {r.accepted_per_cycle:.3f} accepted drafts "
        f"({r.cycles} cycles)",
        f"  target utilisation   {r.target_utilisation:.3f}   wasted target work {r.wasted_target_work:.3f}   "
        f"peak positions {r.peak_positions}",
        f"  simulated time       {r.sim_time:.6g}  (baseline {r.baseline_time:.6g}, c1_eff {r.c1_eff:.4g})",
        f"  events               {r.events}  ({r.events_per_second:.3g}/s, {r.wall_seconds:.3f} s wall)",
    ])
