"""``lrsim serve``: a serving deployment under load (the load, engine and SLO groups are plan --rate's too)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..modes import SIM_MODES
from . import HELP
from .common import (
    _number,
    add_hardware_args,
    add_html_arg,
    add_sim_args,
    choice,
    cost,
    hardware_spec,
    model,
    nonnegative_int,
    positive_int,
    read_traces,
    sim_settings,
)

if TYPE_CHECKING:
    from ..serve.command import ServeRequest

SERVE_SKIP = ("mode", "steps", "engine", "seed", "batches", "token_model", "join", "tree",
              "request_tokens")  # simulate flags that serve sets itself or refuses (width > 1 is refused later)


def add_load_args(p: argparse.ArgumentParser, plan: bool) -> None:
    """Serving under load: the load, the target engine's limits, SLOs and measurement (serve, plan --rate)."""
    from ..dists import DIST_SYNTAX, parse_dist

    g = p.add_argument_group("load (lrsim serve; plan --rate: the best configuration at each load)")
    g.add_argument("--rate", metavar="GRID", help="requests per second (> 0): R, A,B,C or START:STOP:NUM")
    g.add_argument("--requests", type=positive_int, help="requests per replication (serve 200, plan 60)")
    g.add_argument("--arrival", type=choice(("poisson", "gamma", "closed")),
                   help="arrival process (default poisson; closed: a closed loop, with --concurrency)")
    g.add_argument("--arrival-cv", type=cost, help="gamma: CV of the inter-arrival times (vLLM burstiness = 1/CV^2)")
    g.add_argument("--output-tokens", type=model(parse_dist), metavar="SPEC", help=f"output tokens: {DIST_SYNTAX}")
    if plan:  # --prompt-tokens and --step-tokens: plan's behaviour group
        g.add_argument("--modes", default="ar,sd,lr-async", help="with --rate: modes to search (ar always)")
    else:
        g.add_argument("--prompt-tokens", type=model(parse_dist), metavar="SPEC", help=f"prompt tokens: {DIST_SYNTAX}")
    g = p.add_argument_group("target engine (vLLM's scheduler limits)")
    g.add_argument("--max-num-seqs", type=positive_int, help="sequences (rows) per iteration; an LR request holds k1 "
                                                               "(default 128, vLLM's)")
    g.add_argument("--max-num-batched-tokens", type=positive_int,
                   help="tokens per iteration: decode rows first, prefill chunks in the rest (default 2048, vLLM's)")
    g.add_argument("--kv-capacity-tokens", type=positive_int, help="KV cache in tokens (default: unlimited)")
    g.add_argument("--verifier-slots", type=nonnegative_int, help="verifier calls at once (default 0: unlimited)")
    g.add_argument("--reprice", type=positive_int, help="refresh a context-aware price every N iterations (16)")
    g = p.add_argument_group("SLO and measurement")
    g.add_argument("--slo-ttft-s", type=cost, help="SLO: time to first token (s)")
    g.add_argument("--slo-tpot-ms", type=cost, help="SLO: time per output token (ms)")
    g.add_argument("--slo-e2e-s", type=cost, help="SLO: end-to-end latency (s)")
    g.add_argument("--replications", type=positive_int, help="independent replications (serve 4, plan 2)")
    g.add_argument("--warmup", type=_number(float, lambda v: 0 <= v < 0.5, "a number in [0, 0.5)"),
                   help="share of requests dropped at each end (default 0.1)")
    g.add_argument("--workers", type=positive_int, help="local processes (default: all cores)")
    g.add_argument("--scheduler", metavar="ADDRESS", help="a dask.distributed scheduler instead")
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help=HELP["serve"])
    add_sim_args(p.add_argument_group("per-request decoding (as lrsim simulate)"), grid=False, skip=SERVE_SKIP)
    add_load_args(p, plan=False)
    add_hardware_args(p, verifier=False)  # --verifier-latency is the decoding group's
    g = p.add_argument_group("workload sources and output")
    g.add_argument("--modes", help="comma list of ar, sd, lr-sync, lr-async, auto (each request's configuration "
                                   "chosen at its arrival from the load it meets: ar/sd or lr-async with depth up to "
                                   "--k1; lrsim.serve.auto) (default ar,lr-async)")
    g.add_argument("--mode", dest="sim_mode", type=choice(SIM_MODES),
                   help="one mode in lrsim simulate's and the trace header's terms instead of --modes: ar (sd when "
                        "k2 > 1), sync, async")
    g.add_argument("--concurrency", metavar="GRID", help="closed loop instead of --rate: N clients, each sending its "
                                                         "next request when the previous ended (N, A,B,C or A:B:NUM)")
    g.add_argument("--arrivals", metavar="FILE", help="arrival,prompt_tokens,output_tokens per request (CSV or JSONL); "
                                                       "with --rate the times are rescaled to that mean rate")
    g.add_argument("--trace", nargs="*", metavar="TRACE", help="calibrate decoding, pass costs and request lengths "
                                                              "from lr-traces (no file: the embedded default); each "
                                                              "mode is priced on the setup its traces ran on")
    g.add_argument("--seed", dest="serve_seed", type=nonnegative_int, help="random seed (default 0)")
    g.add_argument("--out", "-o", metavar="FILE.csv|FILE.parquet", help="one row per mode and rate (atomically)")
    g.add_argument("--figure", metavar="STEM", help="write STEM.html (and STEM.png): latency and goodput vs rate")
    g.add_argument("--json", action="store_true", help="print JSON: a list of rows, one per mode and rate")
    add_html_arg(g)


def serve_request(a: argparse.Namespace, **given) -> ServeRequest:
    """The arguments as a typed :class:`lrsim.serve.command.ServeRequest` (``given``: ServeConfig fields to use where
    the user gave none, e.g. ``plan --rate``'s defaults)."""
    from ..serve.command import GIVEN, ServeRequest

    opt = lambda name: getattr(a, name, None)  # noqa: E731 - flags only some commands have
    user = {n: opt(n) for n in GIVEN if opt(n) is not None}
    return ServeRequest(given=given | user, rate=opt("rate"), concurrency=opt("concurrency"), modes=opt("modes"),
                        sim_mode=opt("sim_mode"), seed=opt("serve_seed"), arrivals=opt("arrivals"), out=opt("out"),
                        figure=opt("figure"), html=opt("html"), workers=opt("workers"), scheduler=opt("scheduler"),
                        progress=not opt("no_progress"), json=bool(opt("json")))


def run(a: argparse.Namespace) -> str:
    """``lrsim serve``: the serving simulation over modes and rates."""
    from ..serve.command import decode_config, serve

    traces = read_traces(a.trace) if a.trace is not None else None
    hw = hardware_spec(a, need_draft=False, own=("verifier_latency", "prefill"), traces=traces)

    def html(rows: list, crosses: list, title: str, cfg) -> None:
        """``--html``: latency against load with the crossovers, and the traces' or the profile's pass costs."""
        import sys

        from ..report_html import hardware_figures, serve_figure, trace_figures, write_page
        from ..serve.report import format_rows

        figs = [serve_figure(rows, crosses, title)]
        if traces:
            figs += trace_figures(traces)
        elif cfg.hardware is not None:
            figs += hardware_figures(cfg.hardware)
        write_page(a.html, "lrsim serve: latency against load", format_rows(rows, crosses, title), figs)
        print(f"lrsim: wrote {a.html} ({len(figs)} figures)", file=sys.stderr)

    return serve(serve_request(a), *decode_config(sim_settings(a), traces, hw=hw), traces, html=html)
