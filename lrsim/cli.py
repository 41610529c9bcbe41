"""``lrsim`` command line: thin wrappers that parse, validate, call one function, print.

Bad input (:class:`lrsim.errors.DomainError`, or an ``OSError`` on the user's files) gives one line on stderr and
exit code 2 (:func:`lrsim.errors.run_command`); anything else is a bug and keeps its traceback.
``simulate`` and ``sweep`` take the same flags (one per :class:`lrsim.sim.SimConfig` field); in ``sweep`` the
scalar ones accept a grid.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Callable, Sequence

from . import __version__
from .errors import InputError, OneLineParser, UsageError, run_command
from .modes import LR_MODES, SIM_MODES, VERIFY_CALLS

# Illustrative defaults in the paper's working range (step acceptance "usually > 50%", n-gram drafting
# nearly free, a 16-position budget); they are not measurements.
DEFAULTS = {"alpha1": 0.6, "c1": 0.1, "alpha2": 0.6, "c2": 0.05, "budget": 16, "mode": "async"}


def _number(kind: Callable[[str], float], check: Callable[[float], bool], what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(v) and check(v)):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    return parse


probability = _number(float, lambda v: 0 < v < 1, "a number in (0, 1)")
unit = _number(float, lambda v: 0 <= v <= 1, "a number in [0, 1]")
cost = _number(float, lambda v: v > 0, "a number > 0")
nonnegative = _number(float, lambda v: v >= 0, "a number >= 0")
positive_int = _number(int, lambda v: v >= 1, "an integer >= 1")
nonnegative_int = _number(int, lambda v: v >= 0, "an integer >= 0")


def _choice(options: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(options)}, got {text!r}")
        return text

    return parse


def _model(parse: Callable[[str], object]) -> Callable[[str], object]:
    """A latency model or distribution argument; its InputError or OSError becomes a one-line usage error."""
    def wrapped(text: str) -> object:
        try:
            return parse(text)
        except (InputError, OSError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return wrapped


def _sim_flags() -> tuple[list, list]:
    """(flag, SimConfig field, parser): scalars (grids in ``sweep``) and models (one value in both commands)."""
    from .latency import load_latency, parse_dist
    from .sim import ENGINES, JOINS, TOKEN_MODELS

    scalars = [
        ("--mode", "mode", _choice(SIM_MODES)), ("--alpha1", "alpha1", unit), ("--c1", "c1", cost),
        ("--k1", "k1", positive_int), ("--alpha2", "alpha2", unit), ("--c2", "c2", cost),
        ("--k2", "k2", positive_int), ("--width", "width", positive_int), ("--correlation", "correlation", unit),
        ("--verifier-cost", "verifier_cost", nonnegative), ("--budget", "budget", positive_int),
        ("--steps", "steps", positive_int), ("--seed", "seed", nonnegative_int),
        ("--token-model", "token_model", _choice(TOKEN_MODELS)), ("--join", "join", _choice(JOINS)),
        ("--engine", "engine", _choice(ENGINES)),
        ("--verify-calls", "verify_calls", _choice(VERIFY_CALLS)),
    ]
    models = [
        ("--step-tokens", "step_tokens", _model(parse_dist)), ("--draft-tokens", "draft_tokens", _model(parse_dist)),
        ("--verifier-latency", "verifier_latency", _model(parse_dist)),
        ("--request-tokens", "request_tokens", _model(parse_dist)),
        ("--target-latency", "target_latency", _model(load_latency)),
        ("--draft-latency", "draft_latency", _model(load_latency)),
    ]
    return scalars, models


def _add_sim_args(p: Any, grid: bool, skip: Sequence[str] = ()) -> None:
    from .fields import help_texts
    from .latency import DIST_SYNTAX
    from .sim import SimConfig
    from .sweep import GRID_SYNTAX

    helps, defaults = help_texts(SimConfig), SimConfig()
    scalars, models = _sim_flags()
    scalars, models = [x for x in scalars if x[1] not in skip], [x for x in models if x[1] not in skip]
    for flag, name, parse in scalars:
        default = getattr(defaults, name)
        h = f"{helps[name]} (default {default})"
        if grid:
            p.add_argument(flag, dest=name, metavar="GRID", help=f"{h}; a grid: {GRID_SYNTAX}")
        else:
            p.add_argument(flag, dest=name, type=parse, help=h)
    for flag, name, parse in models:
        syntax = DIST_SYNTAX if "latency" not in flag or "verifier" in flag else "SECONDS | JSON | FILE.json"
        p.add_argument(flag, dest=name, type=parse, metavar="SPEC", help=f"{helps[name]}: {syntax}")
    if "tree" not in skip:
        p.add_argument("--tree", action="store_true", default=None, help=helps["tree"])
    p.add_argument("--draft-sd", action=argparse.BooleanOptionalAction, default=None, help=helps["draft_sd"])


def _add_theory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alpha1", type=probability, default=DEFAULTS["alpha1"], help="step acceptance rate, in (0, 1)")
    p.add_argument("--c1", type=cost, default=DEFAULTS["c1"], help="draft/target time per step, > 0")
    p.add_argument("--alpha2", type=probability, default=DEFAULTS["alpha2"], help="token acceptance rate, in (0, 1)")
    p.add_argument("--c2", type=cost, default=DEFAULTS["c2"],
                   help="token drafter/target time per token, > 0 (n-gram lookup: use a small value, e.g. 0.01)")
    p.add_argument("--budget", "-M", type=positive_int, default=DEFAULTS["budget"],
                   help="parallel budget M: target positions at once (sequences x tokens)")
    p.add_argument("--mode", choices=LR_MODES, default=DEFAULTS["mode"], help="LR scheduling")


HARDWARE_FLAGS = ("target_arch", "draft_arch", "verifier_latency", "judge_arch", "judge_prompt_tokens",
                  "extrapolate", "below_context", "target_tp", "tp_efficiency", "k1_max")
NUMBER_FLAGS = ("step_tokens", "draft_tokens", "request_tokens", "prompt_tokens")  # replay adds alpha1, alpha2


def _add_hardware_args(p: argparse.ArgumentParser, alphas: bool) -> None:
    """Timing from a latency profile, behaviour from traces or numbers (``lrsim.compose``)."""
    from .latency import DIST_SYNTAX, parse_dist

    policies = ("error", "clamp", "linear")
    g = p.add_argument_group("timing from a latency profile (--hardware; behaviour from traces or numbers)")
    g.add_argument("--hardware", metavar="PROFILE", help="latency profile: a name from `lrsim profiles` or a file")
    g.add_argument("--target-arch", help="target architecture in the profile, e.g. qwen2.5-32b")
    g.add_argument("--draft-arch", help="draft architecture in the profile, e.g. qwen2.5-1.5b")
    g.add_argument("--verifier-latency", type=_model(parse_dist), metavar="SPEC",
                   help=f"verifier seconds per call: {DIST_SYNTAX} (default: free, noted)")
    g.add_argument("--judge-arch", help="or: an LLM judge priced by the profile's prefill table")
    g.add_argument("--judge-prompt-tokens", type=positive_int,
                   help="judge prompt tokens (default: its template, 183, plus two mean steps)")
    g.add_argument("--extrapolate", type=_choice(policies),
                   help="beyond the last measured context, batch or positions: error (default), clamp, linear")
    g.add_argument("--below-context", type=_choice(policies),
                   help="below the first measured context: clamp (default, noted), error, linear")
    g.add_argument("--target-tp", type=positive_int,
                   help="assume the target runs tensor-parallel on N devices (needs --tp-efficiency)")
    g.add_argument("--tp-efficiency", type=cost,
                   help="E: target pass = profiled pass / (N E); an assumption you state, printed in the notes")
    g = p.add_argument_group("behaviour from numbers (with --hardware, instead of traces)")
    if alphas:
        g.add_argument("--alpha1", type=unit, help="step acceptance: behaviour from these numbers, not traces")
        g.add_argument("--alpha2", type=unit, help="token acceptance of n-gram speculation (needed for k2 > 1)")
    g.add_argument("--step-tokens", type=_model(parse_dist), metavar="SPEC",
                   help=f"tokens per target step (default 52): {DIST_SYNTAX}")
    g.add_argument("--draft-tokens", type=_model(parse_dist), metavar="SPEC",
                   help="tokens per draft step (default: as --step-tokens)")
    g.add_argument("--request-tokens", type=_model(parse_dist), metavar="SPEC",
                   help="output tokens per request (default: one endless request at the prompt's context)")
    g.add_argument("--prompt-tokens", type=nonnegative_int, help="prompt tokens: the context when a request starts")


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="lrsim", description="Lookahead Reasoning speedup theory, checks and planning.")
    parser.add_argument("--version", action="version", version=f"lrsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    p = sub.add_parser("plan", help="best split of the budget M between step level (k1) and token level (k2)")
    _add_theory_args(p)
    p.add_argument("--top", type=positive_int, default=10, help="rows in the ranked table")
    p.add_argument("--trace", nargs="*", metavar="TRACE",
                   help="plan from recorded traces (calibrated simulator) instead of the closed forms; "
                        "with no file: the embedded default traces. "
                        "--alpha*/--c*/--mode are then taken from the traces")
    p.add_argument("--k2-max", type=positive_int, default=8, help="with --trace/--hardware: largest k2 searched")
    p.add_argument("--k1-max", type=positive_int,
                   help="with --hardware: deepest async look-ahead searched (default: ceil((1 + v/T)/c1) + 2)")
    p.add_argument("--bootstrap", type=nonnegative_int, default=20, help="with --trace: bootstrap replicates for the CI")
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_hardware_args(p, alphas=False)
    _add_load_args(p, plan=True)

    p = sub.add_parser("replay", help="predict the speedup of a configuration on a recorded workload")
    p.add_argument("traces", nargs="*", metavar="TRACE",
                   help="lr-trace JSONL file(s), optionally .gz (default: the embedded default traces)")
    p.add_argument("--mode", type=_choice(SIM_MODES), help="default: the first trace's mode")
    p.add_argument("--k1", type=positive_int, help="sync: target steps per cycle; async: look-ahead depth")
    p.add_argument("--k2", type=positive_int, help="positions per target pass (n-gram tokens + 1)")
    p.add_argument("--width", type=positive_int, help="W draft candidates per position")
    p.add_argument("--correlation", type=unit, default=0.0, help="rho of the width acceptance model")
    p.add_argument("--steps", type=positive_int, default=20_000, help="simulated output steps")
    p.add_argument("--bootstrap", type=nonnegative_int, default=20, help="bootstrap replicates for the CI")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_hardware_args(p, alphas=True)

    p = sub.add_parser("theorems", help="check Theorems 1-4 and the SD ceiling")
    p.add_argument("--resolution", type=positive_int, default=14, help="grid values per axis (Thm 4: N^4 x 25 M values)")
    p.add_argument("--stages", type=positive_int, default=100_000, help="Monte Carlo stages per point (Thm 1/2)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("symbolic", help="derive the closed forms with sympy and compare with the seeds")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("report", help="the main job: a plan on the given/default numbers plus the theorem report")
    _add_theory_args(p)
    p.add_argument("--resolution", type=positive_int, default=10, help="theorem grid values per axis")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("simulate", help="event simulation of one request: speedup, acceptance, utilisation, trace")
    _add_sim_args(p, grid=False)
    p.add_argument("--trace", metavar="FILE.jsonl", help="write the run as an lr-trace (JSON Lines)")
    p.add_argument("--chrome", metavar="FILE.json", help="write a Chrome trace / Perfetto JSON of the run")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("calibrate", help="fit acceptance, costs, latency curves and step lengths from traces")
    p.add_argument("traces", nargs="*", metavar="TRACE",
                   help="lr-trace JSONL file(s), optionally .gz (default: the embedded default traces)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("sweep", help="simulate every point of a grid, in parallel, into a CSV or Parquet file")
    _add_sim_args(p, grid=True)
    p.add_argument("--out", "-o", required=True, metavar="FILE.csv|FILE.parquet", help="table to write (atomically)")
    p.add_argument("--workers", type=positive_int, help="local processes (default: all cores)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on this dask.distributed scheduler instead")
    p.add_argument("--skip-invalid", action="store_true", help="leave out grid points that are invalid or over budget")
    p.add_argument("--distinct-seeds", action="store_true",
                   help="point i gets seed + i (independent points), not one seed for all (common random numbers)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    _add_serve_parser(sub)

    p = sub.add_parser("profiles", help="list the embedded latency profiles, or check and price given ones")
    p.add_argument("profiles", nargs="*", metavar="PROFILE", help="profile names or files (default: the embedded ones)")
    p.add_argument("--arch", help="price one forward pass of this architecture in each profile (ms)")
    p.add_argument("--context", type=nonnegative, default=0.0, help="with --arch: tokens in the KV cache")
    p.add_argument("--batch", type=positive_int, default=1, help="with --arch: rows in the pass")
    p.add_argument("--positions", type=positive_int, default=1, help="with --arch: new positions per row")
    p.add_argument("--draft", help="with --arch: also c1 = draft / target time of a decode step (q = 1)")
    p.add_argument("--extrapolate", type=_choice(("error", "clamp", "linear")), default="error",
                   help="outside the measured range: refuse (default), clamp to it, or continue linearly")
    p.add_argument("--json", action="store_true", help="print JSON")
    from .gpu.command import add_arguments as add_gpu_arguments  # --devices, --synthesize, --tp, --timed, --out

    add_gpu_arguments(p)
    return parser


SERVE_SKIP = ("mode", "steps", "engine", "seed", "batches", "token_model", "join", "tree",
              "request_tokens")  # simulate flags that serve sets itself or refuses (width > 1 is refused later)


def _add_load_args(p: argparse.ArgumentParser, plan: bool) -> None:
    """Serving under load: the load, the target engine's limits, the hardware, SLOs and measurement (serve, plan)."""
    from .latency import DIST_SYNTAX, parse_dist

    g = p.add_argument_group("load (lrsim serve; plan --rate: the best configuration at each load)")
    g.add_argument("--rate", metavar="GRID", help="requests per second (> 0): R, A,B,C or START:STOP:NUM")
    g.add_argument("--requests", type=positive_int, help="requests per replication (serve 200, plan 60)")
    g.add_argument("--arrival", type=_choice(("poisson", "gamma", "closed")),
                   help="arrival process (default poisson; closed: a closed loop, with --concurrency)")
    g.add_argument("--arrival-cv", type=cost, help="gamma: CV of the inter-arrival times (vLLM burstiness = 1/CV^2)")
    g.add_argument("--output-tokens", type=_model(parse_dist), metavar="SPEC", help=f"output tokens: {DIST_SYNTAX}")
    if plan:  # --prompt-tokens, --step-tokens, --verifier-latency, --k1-max and the profile: plan's --hardware group
        g.add_argument("--modes", default="ar,sd,lr-async", help="with --rate: modes to search (ar always)")
    else:
        g.add_argument("--prompt-tokens", type=_model(parse_dist), metavar="SPEC", help=f"prompt tokens: {DIST_SYNTAX}")
    g = p.add_argument_group("target engine (vLLM's scheduler limits)")
    g.add_argument("--max-num-seqs", type=positive_int, help="sequences (rows) per iteration; an LR request holds k1 "
                                                               "(default 128, vLLM's)")
    g.add_argument("--max-num-batched-tokens", type=positive_int,
                   help="tokens per iteration: decode rows first, prefill chunks in the rest (default 2048, vLLM's)")
    g.add_argument("--kv-capacity-tokens", type=positive_int, help="KV cache in tokens (default: unlimited)")
    g.add_argument("--verifier-slots", type=nonnegative_int, help="verifier calls at once (default 0: unlimited)")
    g.add_argument("--no-prefill-drafts", action="store_true",
                   help="LR target rows do not prefill the draft step they are conditioned on")
    g.add_argument("--reprice", type=positive_int, help="refresh a context-aware price every N iterations (16)")
    if not plan:
        g = p.add_argument_group("hardware (a latency profile prices every iteration: lrsim profiles)")
        g.add_argument("--hardware", metavar="PROFILE", help="embedded profile name or file")
        g.add_argument("--target-arch", help="target architecture in the profile, e.g. qwen2.5-32b")
        g.add_argument("--draft-arch", help="draft architecture in the profile (default: c1 x the target's step)")
        g.add_argument("--extrapolate", type=_choice(("linear", "clamp", "error")),
                       help="profile outside its grid (default linear; rows beyond its batch fold into positions)")
    g = p.add_argument_group("SLO and measurement")
    g.add_argument("--slo-ttft-s", type=cost, help="SLO: time to first token (s)")
    g.add_argument("--slo-tpot-ms", type=cost, help="SLO: time per output token (ms)")
    g.add_argument("--slo-e2e-s", type=cost, help="SLO: end-to-end latency (s)")
    g.add_argument("--replications", type=positive_int, help="independent replications (serve 4, plan 2)")
    g.add_argument("--warmup", type=_number(float, lambda v: 0 <= v < 0.5, "a number in [0, 0.5)"),
                   help="share of requests dropped at each end (default 0.1)")
    g.add_argument("--trace-setup", metavar="LABEL", help="with --trace: the hardware setup whose latencies to use "
                                                           "(default: the lr-async one)")
    g.add_argument("--workers", type=positive_int, help="local processes (default: all cores)")
    g.add_argument("--scheduler", metavar="ADDRESS", help="a dask.distributed scheduler instead")
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="event simulation of an LR serving deployment under load: TTFT, TPOT, e2e, "
                                     "goodput, and the rate above which speculation stops paying")
    _add_sim_args(p.add_argument_group("per-request decoding (as lrsim simulate)"), grid=False, skip=SERVE_SKIP)
    _add_load_args(p, plan=False)
    g = p.add_argument_group("workload sources and output")
    g.add_argument("--modes", help="comma list of ar, sd, lr-sync, lr-async (default ar,lr-async)")
    g.add_argument("--mode", dest="sim_mode", type=_choice(SIM_MODES),
                   help="one mode in lrsim simulate's and the trace header's terms instead of --modes: ar (sd when "
                        "k2 > 1), sync, async")
    g.add_argument("--concurrency", metavar="GRID", help="closed loop instead of --rate: N clients, each sending its "
                                                         "next request when the previous ended (N, A,B,C or A:B:NUM)")
    g.add_argument("--arrivals", metavar="FILE", help="arrival,prompt_tokens,output_tokens per request (CSV or JSONL); "
                                                       "with --rate the times are rescaled to that mean rate")
    g.add_argument("--trace", nargs="*", metavar="TRACE", help="calibrate decoding and request lengths from lr-traces "
                                                              "(no file: the embedded default)")
    g.add_argument("--seed", dest="serve_seed", type=nonnegative_int, help="random seed (default 0)")
    g.add_argument("--out", "-o", metavar="FILE.csv|FILE.parquet", help="one row per mode and rate (atomically)")
    g.add_argument("--figure", metavar="STEM", help="write STEM.html (and STEM.png): latency and goodput vs rate")
    g.add_argument("--json", action="store_true", help="print JSON: a list of rows, one per mode and rate")


def format_plan(plan) -> str:
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


def _plan(a: argparse.Namespace):
    from .planner import plan

    return plan(a.alpha1, a.c1, a.alpha2, a.c2, a.budget, a.mode, top=a.top)


def _read_traces(paths: Sequence[str]) -> list:
    """The given traces, or the embedded default when none is given; skipped lines reported on stderr."""
    from .trace import default_traces, read_trace

    traces = [read_trace(p) for p in (paths or default_traces())]
    warn_skipped([w for t in traces for w in t.warnings])
    return traces


def _given(a: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The flags among ``names`` (destinations) that were given."""
    return ["--" + n.replace("_", "-") for n in names if getattr(a, n, None) is not None]


def _hardware(a: argparse.Namespace):
    """The :class:`lrsim.compose.Hardware` of the command line (refusing its flags without --hardware)."""
    from .compose import Hardware

    if a.hardware is None:
        flags = _given(a, HARDWARE_FLAGS + NUMBER_FLAGS + (("alpha1", "alpha2") if a.command == "replay" else ()))
        if flags:
            raise UsageError(f"{', '.join(flags)} only go(es) with --hardware PROFILE")
        return None
    missing = [f for f in ("target_arch", "draft_arch") if getattr(a, f) is None]
    if missing:
        raise UsageError("--hardware needs " + " and ".join("--" + m.replace("_", "-") for m in missing))
    return Hardware(a.hardware, a.target_arch, a.draft_arch, a.verifier_latency, a.judge_arch,
                    a.judge_prompt_tokens, a.extrapolate or "error", a.below_context or "clamp", a.target_tp or 1,
                    a.tp_efficiency)


def _behaviour(a: argparse.Namespace, alpha1: float, alpha2: float | None):
    """Behaviour from the command line's numbers."""
    from .compose import Behaviour
    from .latency import Constant
    from .sim import STEP_TOKENS

    return Behaviour(alpha1=alpha1, alpha2=alpha2, step_tokens=a.step_tokens or Constant(STEP_TOKENS),
                     draft_tokens=a.draft_tokens, request_tokens=a.request_tokens, prompt_tokens=a.prompt_tokens or 0)


def _plan_hardware(a: argparse.Namespace, hw) -> str:
    from .compose import plan as composed_plan
    from .replay import format_trace_plan

    if a.trace is not None:
        if _given(a, NUMBER_FLAGS):
            raise UsageError(f"{', '.join(_given(a, NUMBER_FLAGS))}: behaviour comes from the traces (--trace)")
        source, what = _read_traces(a.trace), "traces"
    else:
        source, what = _behaviour(a, a.alpha1, a.alpha2), "numbers"
    tp = composed_plan(source, hw, a.budget, k2_max=a.k2_max, bootstrap=a.bootstrap, k1_max=a.k1_max,
                       progress=sys.stderr.isatty())
    text = f"{what} on {hw.profile} ({hw.target_arch} target, {hw.draft_arch} draft)"
    return json.dumps(tp.to_dict(), indent=2, default=float) if a.json else format_trace_plan(tp, a.top, text)


def cmd_plan(a: argparse.Namespace) -> str:
    if a.rate is not None:
        return cmd_plan_rate(a)
    hw = _hardware(a)
    if hw is not None:
        return _plan_hardware(a, hw)
    if a.trace is not None:
        from .replay import format_trace_plan, plan_from_traces

        tp = plan_from_traces(_read_traces(a.trace), a.budget, k2_max=a.k2_max, bootstrap=a.bootstrap,
                              progress=sys.stderr.isatty())
        return json.dumps(tp.to_dict(), indent=2, default=float) if a.json else format_trace_plan(tp, a.top)
    p = _plan(a)
    return json.dumps(p.to_dict(), indent=2) if a.json else format_plan(p)


def _replay_hardware(a: argparse.Namespace, hw) -> str:
    """``replay --hardware``: behaviour from --alpha1 ... or from traces, timing from the profile."""
    from .compose import predict as composed_predict
    from .replay import format_prediction
    from .trace import Setting, recorded_setting

    if a.alpha1 is not None:
        if a.traces:
            raise UsageError("behaviour comes from traces or from --alpha1 and its numbers, not both")
        source = _behaviour(a, a.alpha1, a.alpha2)
        mode = a.mode or "async"
        setting = Setting(mode, a.k1 or (1 if mode == "ar" else 4), a.k2 or 1, a.width or 1)
    else:
        if _given(a, NUMBER_FLAGS + ("alpha2",)):
            raise UsageError(f"{', '.join(_given(a, NUMBER_FLAGS + ('alpha2',)))} describe(s) behaviour from numbers: "
                             "give --alpha1 too, or leave them out to calibrate on traces")
        source = _read_traces(a.traces)
        rec = recorded_setting(source[0].header)
        mode = a.mode or rec.mode
        setting = Setting(mode, a.k1 or (rec.k1 if mode == rec.mode else 4), a.k2 or rec.k2, a.width or rec.width)
    if setting.mode == "ar" and setting.k1 != 1:
        raise UsageError("mode ar has k1 = 1")
    p = composed_predict(source, hw, setting, steps=a.steps, seed=a.seed, bootstrap=a.bootstrap,
                         correlation=a.correlation, progress=sys.stderr.isatty())
    return json.dumps(p.to_dict(), indent=2, default=float) if a.json else format_prediction(p)


def cmd_plan_rate(a: argparse.Namespace) -> str:
    """``plan --rate``: the best (mode, k1, k2) at each load by serving simulation, and a policy table."""
    from .serve.command import build_config, decode_config, parse_modes, parse_rates
    from .serve.plan import format_plan as format_load_plan
    from .serve.plan import load_plan

    traces = _read_traces(a.trace) if a.trace is not None else None
    settings = {"alpha1": a.alpha1, "c1": a.c1, "alpha2": a.alpha2, "c2": a.c2}
    settings |= {k: getattr(a, k) for k in ("step_tokens", "verifier_latency") if getattr(a, k) is not None}
    decode = decode_config(a, {} if traces else settings, traces, k2_max=a.k2_max)
    defaults = {"requests": 60, "replications": 2, "k1_max": 5}
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if isinstance(a.prompt_tokens, int):  # plan's --prompt-tokens is one number (the --hardware group's)
        from .latency import Constant

        a.prompt_tokens = Constant(a.prompt_tokens)
    cfg = build_config(a, decode, traces)
    modes = parse_modes(a.modes)
    lp = load_plan(cfg, [r for r in parse_rates(a.rate)], modes, a.k1_max, a.k2_max, a.budget, a.workers,
                   a.scheduler, progress=not a.no_progress)
    return json.dumps(lp.to_dict(), indent=1, default=float) if a.json else format_load_plan(lp)


def cmd_serve(a: argparse.Namespace) -> str:
    """``lrsim serve``: the serving simulation over modes and rates."""
    from .serve.command import decode_config, serve

    traces = _read_traces(a.trace) if a.trace is not None else None
    return serve(a, decode_config(a, _sim_settings(a), traces), traces)


def cmd_replay(a: argparse.Namespace) -> str:
    from .replay import format_prediction, predict
    from .trace import Setting, recorded_setting

    hw = _hardware(a)
    if hw is not None:
        return _replay_hardware(a, hw)
    traces = _read_traces(a.traces)
    rec = recorded_setting(traces[0].header)
    mode = a.mode or rec.mode
    setting = Setting(mode, a.k1 or (rec.k1 if mode == rec.mode else 4), a.k2 or rec.k2, a.width or rec.width)
    if setting.mode == "ar" and setting.k1 != 1:
        raise UsageError("mode ar has k1 = 1")
    p = predict(traces, setting, steps=a.steps, seed=a.seed, bootstrap=a.bootstrap, correlation=a.correlation,
                progress=sys.stderr.isatty())
    return json.dumps(p.to_dict(), indent=2, default=float) if a.json else format_prediction(p)


def cmd_theorems(a: argparse.Namespace) -> str:
    from .theorems import check_all, format_report, to_json

    results = check_all(a.resolution, a.stages, progress=sys.stderr.isatty())
    return to_json(results) if a.json else format_report(results)


def cmd_symbolic(a: argparse.Namespace) -> str:
    from .symbolic import report

    return report(as_json=a.json)


def cmd_report(a: argparse.Namespace) -> str:
    from .symbolic import compare_with_seeds
    from .theorems import check_all

    a.top = 5
    p = _plan(a)
    results = check_all(a.resolution, 50_000, progress=sys.stderr.isatty())
    seeds = compare_with_seeds()
    measured = _embedded_summary(a.budget)
    if a.json:
        from dataclasses import asdict

        return json.dumps({"plan": p.to_dict(), "theorems": [asdict(r) for r in results],
                           "seed_formulas": [asdict(f) for f in seeds], "embedded_trace": measured},
                          indent=2, default=float)
    summary = ["", "Theorem checks (run `lrsim theorems` for details):"]
    summary += [f"  {r.name}: {r.verdict.upper()} ({r.points_checked} points)" for r in results]
    summary += ["", "Seed formulas vs sympy derivations (run `lrsim symbolic` for details):"]
    summary += [f"  {f.name}: {f.verdict}" for f in seeds]
    m = measured
    summary += ["", f"Measured: the embedded default traces ({m['source']}; `lrsim calibrate` for details):",
                f"  alpha1 = {m['alpha1']:.3f} [{m['alpha1_ci95'][0]:.3f}, {m['alpha1_ci95'][1]:.3f}], "
                f"alpha2 = {m['alpha2']:.3f}, c1 = {m['c1']:.3f}, verifier {m['verify_ms']:.0f} ms per step pair",
                f"  closed-form plan on these numbers (M = {a.budget}): {m['closed_form']['mode']} "
                f"k1 = {m['closed_form']['k1']}, k2 = {m['closed_form']['k2']} promises "
                f"{m['closed_form']['speedup']:.2f}x; the simulator calibrated on the traces gives it "
                f"{m['closed_form']['simulated']:.2f}x",
                "  (`lrsim plan --trace --budget M` searches every configuration on the recorded workload)"]
    return format_plan(p) + "\n" + "\n".join(summary)


def _embedded_summary(budget: int) -> dict:
    """Calibration of the embedded default traces and the closed-form plan they imply, priced by the simulator."""
    from .calibrate import calibrate
    from .replay import closed_form_plan
    from .trace import mode_name

    traces = _read_traces([])
    c = calibrate(traces)
    _, choice = closed_form_plan(traces, budget, memo={"behaviour": c})
    h = traces[0].header
    return {"source": f"lrref {h.backend or ''} on {h.hardware.get('cpus', '?')} CPUs, "
                      f"modes {', '.join(sorted({mode_name(t.header) for t in traces}))}",
            "alpha1": c.alpha1.p, "alpha1_ci95": [c.alpha1.lo, c.alpha1.hi], "alpha2": c.alpha2, "c1": c.c1,
            "verify_ms": 1000 * c.verify_s.mean,
            "closed_form": {"mode": choice["mode"], "k1": choice["k1"], "k2": choice["k2"],
                            "speedup": choice["closed_form_speedup"], "simulated": choice["simulated_speedup"]}}


def _sim_settings(a: argparse.Namespace) -> dict:
    """The SimConfig fields given on the command line (the rest keep their defaults)."""
    scalars, models = _sim_flags()
    names = [name for _, name, _ in scalars + models] + ["tree", "draft_sd"]
    return {n: getattr(a, n) for n in names if getattr(a, n, None) is not None}


def format_sim(r) -> str:
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


def cmd_simulate(a: argparse.Namespace) -> str:
    from pathlib import Path

    from .atomic import check_writable
    from .sim import SimConfig, simulate

    cfg = SimConfig(**_sim_settings(a))
    for path in (a.trace, a.chrome):
        if path:
            check_writable(Path(path))
    r = simulate(cfg, trace=a.trace, chrome=a.chrome)
    return json.dumps(r.to_dict(), indent=2) if a.json else format_sim(r)


def cmd_sweep(a: argparse.Namespace) -> str:
    import time

    from .sweep import build_configs, check_output, parse_grid, run_configs, write_rows

    scalars, _ = _sim_flags()
    fixed = {k: v for k, v in _sim_settings(a).items() if k not in {n for _, n, _ in scalars}}
    axes = {name: parse_grid(getattr(a, name), parse) for _, name, parse in scalars
            if getattr(a, name) is not None}
    out = check_output(a.out)
    configs, skipped = build_configs(fixed, axes, a.skip_invalid, a.distinct_seeds)
    t = time.perf_counter()
    rows = run_configs(configs, a.workers, a.scheduler, progress=not a.no_progress)
    write_rows(rows, out)
    note = f" ({skipped} invalid point(s) left out)" if skipped else ""
    return f"wrote {len(rows)} rows to {out} in {time.perf_counter() - t:.1f} s{note}"


def warn_skipped(warnings: Sequence[str], limit: int = 5) -> None:
    """Report skipped trace lines on stderr, one line each (file:line: reason)."""
    for w in warnings[:limit]:
        print(f"lrsim: warning: {w}", file=sys.stderr)
    if len(warnings) > limit:
        print(f"lrsim: warning: {len(warnings) - limit} more skipped line(s)", file=sys.stderr)


def cmd_calibrate(a: argparse.Namespace) -> str:
    from .calibrate import calibrate, format_calibration

    c = calibrate(_read_traces(a.traces))
    return json.dumps(c.to_dict(), indent=2, default=float) if a.json else format_calibration(c)


def cmd_profiles(a: argparse.Namespace) -> str:
    from .gpu.command import run as gpu_run
    from .hardware import profiles_report

    if (out := gpu_run(a)) is not None:  # --devices / --synthesize (lrsim.gpu)
        return out

    return profiles_report(a.profiles, a.json, a.arch, a.context, a.batch, a.positions, a.draft, a.extrapolate)


COMMANDS = {"plan": cmd_plan, "theorems": cmd_theorems, "symbolic": cmd_symbolic, "report": cmd_report,
            "simulate": cmd_simulate, "sweep": cmd_sweep, "calibrate": cmd_calibrate,
            "replay": cmd_replay, "profiles": cmd_profiles, "serve": cmd_serve}


def main(argv: Sequence[str] | None = None) -> int:
    """The ``lrsim`` command: parse, run one command at the shared error boundary, return the exit code."""
    def command() -> str:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)

    return run_command("lrsim", command)


if __name__ == "__main__":
    sys.exit(main())
