"""``lrsim replay``: predict a configuration's speedup from traces, or from behaviour numbers on a profile."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import UsageError
from ..modes import SIM_MODES
from . import HELP
from .common import (
    NUMBER_FLAGS,
    add_auto_args,
    add_behaviour_args,
    add_hardware_args,
    add_html_arg,
    add_vllm_args,
    alpha2_from_vllm,
    auto_options,
    behaviour,
    check_html,
    choice,
    given,
    hardware_spec,
    nonnegative_int,
    note_alpha2,
    positive_int,
    read_traces,
    unit,
    write_html,
)


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help=HELP["replay"])
    p.add_argument("traces", nargs="*", metavar="TRACE",
                   help="lr-trace JSONL file(s), optionally .gz (default: the embedded default traces)")
    p.add_argument("--mode", type=choice(SIM_MODES + ("auto",)),
                   help="default: the first trace's mode; auto: the adaptive policy on each recorded request's "
                        "acceptance, against every fixed configuration")
    p.add_argument("--k1", type=positive_int, help="sync: target steps per cycle; async: look-ahead depth")
    p.add_argument("--k2", type=positive_int, help="positions per target pass (n-gram tokens + 1)")
    p.add_argument("--width", type=positive_int, help="W draft candidates per position")
    p.add_argument("--correlation", type=unit, default=0.0, help="rho of the width acceptance model")
    p.add_argument("--steps", type=positive_int, default=20_000, help="simulated output steps")
    p.add_argument("--bootstrap", type=nonnegative_int, default=20, help="bootstrap replicates for the CI")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON")
    add_html_arg(p)
    add_hardware_args(p)
    add_behaviour_args(p, alphas=True)
    add_auto_args(p)
    add_vllm_args(p)


def _setting(a: argparse.Namespace, rec=None):
    """The flags' configuration over the recorded one (:func:`lrsim.prediction.outcome.requested_setting`)."""
    from ..prediction.outcome import requested_setting

    return requested_setting(rec, a.mode, a.k1, a.k2, a.width)


def run(a: argparse.Namespace) -> str:
    """The prediction; ``--vllm-metrics`` resolves to ``--alpha2`` first (behaviour from numbers only) and the
    output says so."""
    numbers = a.mode != "auto" and a.hardware is not None and a.alpha1 is not None
    m = alpha2_from_vllm(a, None, None if numbers else "--vllm-metrics stands in for --alpha2, which replay takes "
                         "with --hardware PROFILE and --alpha1 (traces carry their own token acceptance)")
    return note_alpha2(a, _replay(a), m)


def _replay(a: argparse.Namespace) -> str:
    """Traces alone: their own behaviour and calibrated profile; with --hardware: the profile's timing and
    behaviour from the traces (architectures not given: their header's models) or from --alpha1 and its numbers."""
    from ..prediction.outcome import format_prediction
    from ..trace import recorded_setting

    if a.mode == "auto":
        return run_auto(a)
    alone = a.traces and not given(a, NUMBER_FLAGS + ("alpha1", "alpha2")) and a.hardware is None
    on_traces = a.hardware is not None and a.alpha1 is None  # --hardware's timing, the traces' behaviour
    if on_traces and given(a, NUMBER_FLAGS + ("alpha2",)):
        raise UsageError(f"{', '.join(given(a, NUMBER_FLAGS + ('alpha2',)))} describe(s) behaviour from numbers: "
                         "give --alpha1 too, or leave them out to calibrate on traces")
    traces = read_traces(a.traces) if alone or on_traces else None  # read once (a bad line is warned about once)
    if alone and any(t.header.mode == "auto" for t in traces):
        return auto_run_report(a, traces)
    hw = hardware_spec(a, number_flags=NUMBER_FLAGS + ("alpha1", "alpha2"), traces=traces if on_traces else None)
    check_html(a)
    kw = dict(steps=a.steps, seed=a.seed, bootstrap=a.bootstrap, correlation=a.correlation,
              progress=sys.stderr.isatty())
    if hw is None:
        from ..prediction.replay import predict

        traces = traces if traces is not None else read_traces(a.traces)
        p = predict(traces, _setting(a, recorded_setting(traces[0].header)), **kw)
    elif a.alpha1 is not None:
        from ..prediction.compose import predict

        if a.traces:
            raise UsageError("behaviour comes from traces or from --alpha1 and its numbers, not both")
        p = predict(behaviour(a, a.alpha1, a.alpha2), hw, _setting(a), **kw)
    else:
        from ..prediction.compose import predict

        p = predict(traces, hw, _setting(a, recorded_setting(traces[0].header)), **kw)
    if a.html:
        from ..report_html import hardware_figures, prediction_figure, trace_figures

        figs = [prediction_figure(p)] + (trace_figures(traces) if traces else [])
        write_html(a, f"lrsim replay: {p.setting.mode}, k1 = {p.setting.k1}, k2 = {p.setting.k2}",
                   format_prediction(p), figs + (hardware_figures(hw) if hw is not None else []))
    return json.dumps(p.to_dict(), indent=2, default=float) if a.json else format_prediction(p)


def auto_run_report(a: argparse.Namespace, traces) -> str:
    """``lrsim replay`` on lrref ``--mode auto`` traces: what the run did per configuration and its decisions
    checked against the closed forms (:func:`lrsim.adaptive.trace.check_auto_traces`)."""
    from ..adaptive.trace import check_auto_traces

    bad = given(a, ("k1", "k2", "width", "html"))
    if bad:
        raise UsageError(f"an auto trace's configurations are its own: drop {', '.join(bad)}")
    r = check_auto_traces(traces)
    return json.dumps(r.to_dict(), indent=2) if a.json else r.format()


def run_auto(a: argparse.Namespace) -> str:
    """``lrsim replay --mode auto``: each recorded LR request replayed at its own step acceptance, the policy
    choosing every few steps against every fixed configuration (:func:`lrsim.adaptive.sim.run_workload`); timing
    from the traces' calibrated profile, or from ``--hardware``."""
    from dataclasses import replace

    from ..adaptive.sim import ar_token_seconds, compose_config_of, costs_of, requests_from_traces, run_workload
    from ..prediction.compose import behaviour_from_traces
    from ..prediction.replay import trace_hardware

    bad = given(a, ("k1", "k2", "width", "html", "alpha1"))
    if bad:
        raise UsageError(f"--mode auto chooses k1 and k2 from the traces' behaviour: drop {', '.join(bad)}")
    traces = read_traces(a.traces)
    b = behaviour_from_traces(traces)
    if a.hardware is None:
        hw = trace_hardware(traces, b.alpha2)
    else:
        hw = hardware_spec(a, number_flags=NUMBER_FLAGS + ("alpha1", "alpha2"), traces=traces)
    opts, notes = auto_options(a), []
    if b.alpha2 is None:  # no token speculation recorded: nothing to price k2 > 1 with
        opts = replace(opts, k2s=(1,))
        notes.append("no token acceptance in these traces: k2 = 1 only (record sd or '+sd' modes for more)")
    a2 = b.alpha2 if b.alpha2 is not None else 0.5  # with k2 = 1 only it prices nothing
    r = run_workload(requests_from_traces(traces, a2), compose_config_of(b, hw), costs_of(hw, b), b.alpha1, a2,
                     b.step_tokens.mean, opts, seed=a.seed, ar_token_s=ar_token_seconds(hw, b))
    if a.json:
        return json.dumps(r.to_dict() | {"notes": notes}, indent=2, default=float)
    return "\n".join([r.format(), *(f"  note: {n}" for n in notes)])
