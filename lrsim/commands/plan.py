"""``lrsim plan``: the closed-form split of a budget M, or the simulated best (mode, k1, k2) from traces,
on a profile, or at each load (``--rate``)."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import InputError, UsageError
from ..format import format_plan
from . import HELP
from .common import (
    DEFAULTS,
    NUMBER_FLAGS,
    add_behaviour_args,
    add_hardware_args,
    add_html_arg,
    add_theory_args,
    add_vllm_args,
    alpha2_from_vllm,
    behaviour,
    check_html,
    given,
    hardware_spec,
    nonnegative_int,
    note_alpha2,
    positive_int,
    read_traces,
    write_html,
)
from .serve import add_load_args
from .theory import closed_plan


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help=HELP["plan"])
    add_theory_args(p)
    p.add_argument("--top", type=positive_int, default=10, help="rows in the ranked table")
    p.add_argument("--trace", nargs="*", metavar="TRACE",
                   help="plan from recorded traces (calibrated simulator) instead of the closed forms; "
                        "with no file: the embedded default traces. "
                        "--alpha*/--c*/--mode are then taken from the traces")
    p.add_argument("--k2-max", type=positive_int, default=8, help="with --trace/--hardware/--rate: largest k2 searched")
    p.add_argument("--k1-max", type=positive_int,
                   help="with --trace/--hardware: deepest async look-ahead searched (default: ceil((1 + v/T)/c1) + "
                        "2); with --rate: largest k1 (default 5)")
    p.add_argument("--bootstrap", type=nonnegative_int, default=20, help="with --trace: bootstrap replicates for the CI")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_html_arg(p)
    add_hardware_args(p)
    add_behaviour_args(p, alphas=False)
    add_load_args(p, plan=True)
    add_vllm_args(p)
    p.set_defaults(alpha2=None)  # DEFAULTS["alpha2"] once run knows whether --vllm-metrics stands in for it


def _simulated(a: argparse.Namespace, hw, traces) -> str:
    """``plan --trace`` and ``plan --hardware``: every configuration simulated on the recorded or composed
    workload (``traces``: read already when they come with ``--hardware``)."""
    from ..prediction.outcome import format_trace_plan

    progress = sys.stderr.isatty()
    if hw is None:
        from ..prediction.replay import plan_from_traces

        traces = read_traces(a.trace)
        tp = plan_from_traces(traces, a.budget, k2_max=a.k2_max, bootstrap=a.bootstrap, progress=progress,
                              workers=a.workers)
        return _simulated_out(a, tp, format_trace_plan(tp, a.top), traces, None)
    from ..prediction.compose import plan as composed_plan

    if traces is not None:
        source, what = traces, "traces"
    else:
        source, what = behaviour(a, a.alpha1, a.alpha2), "numbers"
    tp = composed_plan(source, hw, a.budget, k2_max=a.k2_max, bootstrap=a.bootstrap, k1_max=a.k1_max,
                       progress=progress, workers=a.workers)
    text = f"{what} on {hw.name} ({hw.target_arch} target, {hw.draft_arch} draft)"
    return _simulated_out(a, tp, format_trace_plan(tp, a.top, text), source if what == "traces" else None, hw)


def _simulated_out(a: argparse.Namespace, tp, text: str, traces, hw) -> str:
    """A simulated plan's output, and its ``--html`` page (the map, the pure lines, traces' and profile's curves)."""
    if getattr(a, "html", None):
        from ..report_html import hardware_figures, simulated_plan_figures, trace_figures

        figs = simulated_plan_figures(tp) + (trace_figures(traces) if traces else [])
        write_html(a, f"lrsim plan, budget M = {tp.budget}", text, figs + (hardware_figures(hw) if hw else []))
    return json.dumps(tp.to_dict(), indent=2, default=float) if a.json else text


def _rate(a: argparse.Namespace) -> str:
    """``plan --rate``: the best (mode, k1, k2) at each load by serving simulation, and a policy table."""
    from ..dists import Constant
    from ..serve.command import build_config, decode_config, parse_modes, parse_rates
    from ..serve.plan import format_plan as format_load_plan
    from ..serve.plan import load_plan
    from .serve import serve_request

    traces = read_traces(a.trace) if a.trace is not None else None
    hw = hardware_spec(a, need_draft=False, number_flags=("draft_tokens", "request_tokens"),
                       own=("verifier_latency", "prefill"), traces=traces)
    if given(a, ("draft_tokens", "request_tokens")):
        raise UsageError(f"{', '.join(given(a, ('draft_tokens', 'request_tokens')))}: not used by plan --rate "
                         "(request lengths: --output-tokens)")
    settings = {"alpha1": a.alpha1, "c1": a.c1, "alpha2": a.alpha2, "c2": a.c2}
    settings |= {k: getattr(a, k) for k in ("step_tokens", "verifier_latency", "prefill") if getattr(a, k) is not None}
    decode, hw = decode_config({} if traces else settings, traces, k2_max=a.k2_max, hw=hw)
    request = serve_request(a, requests=60, replications=2)  # plan's defaults where the user gave none
    if isinstance(a.prompt_tokens, int):  # plan's --prompt-tokens is one number (the behaviour group's)
        request.given["prompt_tokens"] = Constant(a.prompt_tokens)
    modes = parse_modes(a.modes)
    if "auto" in modes:
        raise InputError("plan --rate searches fixed configurations; run auto beside them with lrsim serve --modes "
                         "ar,lr-async,auto")
    cfg = build_config(request, decode, hw, traces)
    lp = load_plan(cfg, list(parse_rates(a.rate)), modes, a.k1_max or 5, a.k2_max, a.budget,
                   a.workers, a.scheduler, progress=not a.no_progress)
    return json.dumps(lp.to_dict(), indent=1, default=float) if a.json else format_load_plan(lp)


LOAD_FLAGS = ("requests", "arrival", "arrival_cv", "output_tokens", "max_num_seqs", "max_num_batched_tokens",
              "kv_capacity_tokens", "verifier_slots", "reprice", "slo_ttft_s", "slo_tpot_ms", "slo_e2e_s",
              "replications", "warmup", "scheduler")


def run(a: argparse.Namespace) -> str:
    """The plan; ``--vllm-metrics`` resolves to ``--alpha2`` first and the output says so."""
    m = alpha2_from_vllm(a, DEFAULTS["alpha2"], None if a.trace is None else
                         "--vllm-metrics stands in for --alpha2; with --trace the traces give the token acceptance")
    return note_alpha2(a, _plan(a), m)


def _plan(a: argparse.Namespace) -> str:
    if a.rate is not None:
        if a.html:
            raise UsageError("--html does not go with --rate (lrsim serve --html draws latency against load)")
        return _rate(a)
    check_html(a)
    load = given(a, LOAD_FLAGS)
    if load:
        raise UsageError(f"{', '.join(load)} only go(es) with --rate")
    traces = None
    if a.hardware is not None and a.trace is not None:  # --hardware's timing, the traces' behaviour
        if given(a, NUMBER_FLAGS):
            raise UsageError(f"{', '.join(given(a, NUMBER_FLAGS))}: behaviour comes from the traces (--trace)")
        traces = read_traces(a.trace)
    hw = hardware_spec(a, number_flags=NUMBER_FLAGS, traces=traces)
    if hw is not None or a.trace is not None:
        return _simulated(a, hw, traces)
    if given(a, ("k1_max",)):
        raise UsageError("--k1-max only goes with --trace, --hardware or --rate")
    p = closed_plan(a)
    if a.html:
        from ..report_html import closed_plan_figures

        write_html(a, f"lrsim plan: {p.mode}, M = {p.budget}", format_plan(p), closed_plan_figures(p))
    return json.dumps(p.to_dict(), indent=2) if a.json else format_plan(p)
