"""Argument types and option groups shared by the ``lrsim`` subcommands.

The ``--hardware`` group (:func:`add_hardware_args`, :func:`hardware_spec`) is the one hardware spec of
replay, plan, serve and plan --rate: the same flags, the same defaults, each flag honoured by every command
that takes the group (or refused in one line without ``--hardware``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Callable, Sequence

from ..errors import InputError, UsageError
from ..modes import LR_MODES, SIM_MODES, VERIFY_CALLS

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


def plain(parse: Callable[[str], object]) -> Callable[[str], object]:
    """An argument parser that raises ValueError (what code below the commands catches), not argparse's error."""
    def wrapped(text: str) -> object:
        try:
            return parse(text)
        except argparse.ArgumentTypeError as e:
            raise ValueError(str(e)) from None

    return wrapped


def choice(options: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in options:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(options)}, got {text!r}")
        return text

    return parse


def model(parse: Callable[[str], object]) -> Callable[[str], object]:
    """A pass cost or distribution argument; its InputError or OSError becomes a one-line usage error."""
    def wrapped(text: str) -> object:
        try:
            return parse(text)
        except (InputError, OSError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return wrapped


def given(a: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """The flags among ``names`` (destinations) that were given."""
    return ["--" + n.replace("_", "-") for n in names if getattr(a, n, None) is not None]


def warn_skipped(warnings: Sequence[str], limit: int = 5) -> None:
    """Report skipped trace lines on stderr, one line each (file:line: reason)."""
    for w in warnings[:limit]:
        print(f"lrsim: warning: {w}", file=sys.stderr)
    if len(warnings) > limit:
        print(f"lrsim: warning: {len(warnings) - limit} more skipped line(s)", file=sys.stderr)


def read_traces(paths: Sequence[str]) -> list:
    """The given traces, or the embedded default when none is given; skipped lines reported on stderr."""
    from ..trace import default_traces, read_trace

    traces = [read_trace(p) for p in (paths or default_traces())]
    warn_skipped([w for t in traces for w in t.warnings])
    return traces


# ----------------------------------------------------------------------------- simulator flags


def sim_flags(auto: bool = False) -> tuple[list, list]:
    """(flag, SimConfig field, parser): scalars (grids in ``sweep``) and models (one value in both commands);
    ``auto``: ``--mode`` also takes ``auto`` (``lrsim simulate``)."""
    from ..cost.passcost import load_cost
    from ..dists import parse_dist
    from ..modes import COLOCATED
    from ..sim import ENGINES, JOINS, TOKEN_MODELS

    scalars = [
        ("--mode", "mode", choice(SIM_MODES + (("auto",) if auto else ()))), ("--alpha1", "alpha1", unit),
        ("--c1", "c1", cost),
        ("--k1", "k1", positive_int), ("--alpha2", "alpha2", unit), ("--c2", "c2", cost),
        ("--k2", "k2", positive_int), ("--width", "width", positive_int), ("--correlation", "correlation", unit),
        ("--verifier-cost", "verifier_cost", nonnegative), ("--budget", "budget", positive_int),
        ("--steps", "steps", positive_int), ("--seed", "seed", nonnegative_int),
        ("--token-model", "token_model", choice(TOKEN_MODELS)), ("--join", "join", choice(JOINS)),
        ("--engine", "engine", choice(ENGINES)),
        ("--verify-calls", "verify_calls", choice(VERIFY_CALLS)), ("--prefill", "prefill", choice(PREFILLS)),
        ("--colocated", "colocated", choice(COLOCATED)),
    ]
    models = [
        ("--step-tokens", "step_tokens", model(parse_dist)), ("--draft-tokens", "draft_tokens", model(parse_dist)),
        ("--verifier-latency", "verifier_latency", model(parse_dist)),
        ("--request-tokens", "request_tokens", model(parse_dist)),
        ("--target-latency", "target_latency", model(load_cost)),
        ("--draft-latency", "draft_latency", model(load_cost)),
    ]
    return scalars, models


def add_sim_args(p, grid: bool, skip: Sequence[str] = (), auto: bool = False) -> None:
    """One flag per :class:`lrsim.sim.SimConfig` field (in ``sweep`` the scalars take a grid; ``auto``: ``--mode
    auto`` too)."""
    from ..dists import DIST_SYNTAX
    from ..fields import help_texts
    from ..sim import SimConfig
    from ..sweep import GRID_SYNTAX

    helps, defaults = help_texts(SimConfig), SimConfig()
    scalars, models = sim_flags(auto)
    scalars, models = [x for x in scalars if x[1] not in skip], [x for x in models if x[1] not in skip]
    for flag, name, parse in scalars:
        h = f"{helps[name]} (default {getattr(defaults, name)})"
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


def sim_settings(a: argparse.Namespace) -> dict:
    """The SimConfig fields given on the command line (the rest keep their defaults)."""
    scalars, models = sim_flags()
    names = [name for _, name, _ in scalars + models] + ["tree", "draft_sd"]
    return {n: getattr(a, n) for n in names if getattr(a, n, None) is not None}


def add_theory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alpha1", type=probability, default=DEFAULTS["alpha1"], help="step acceptance rate, in (0, 1)")
    p.add_argument("--c1", type=cost, default=DEFAULTS["c1"], help="draft/target time per step, > 0")
    p.add_argument("--alpha2", type=probability, default=DEFAULTS["alpha2"], help="token acceptance rate, in (0, 1)")
    p.add_argument("--c2", type=cost, default=DEFAULTS["c2"],
                   help="token drafter/target time per token, > 0 (n-gram lookup: use a small value, e.g. 0.01)")
    p.add_argument("--budget", "-M", type=positive_int, default=DEFAULTS["budget"],
                   help="parallel budget M: target positions at once (sequences x tokens)")
    p.add_argument("--mode", choices=LR_MODES, default=DEFAULTS["mode"], help="LR scheduling")


# ----------------------------------------------------------------------------- the --hardware group

HARDWARE_FLAGS = ("target_arch", "draft_arch", "verifier_latency", "judge_arch", "judge_prompt_tokens",
                  "extrapolate", "below_context", "target_tp", "tp_efficiency", "prefill", "draft_hardware",
                  "verifier_hardware", "kv_dtype")
NUMBER_FLAGS = ("step_tokens", "draft_tokens", "request_tokens", "prompt_tokens")  # replay adds alpha1, alpha2
POLICIES = ("error", "clamp", "linear")
PREFILLS = ("none", "last", "unseen")


def add_hardware_args(p: argparse.ArgumentParser, verifier: bool = True) -> None:
    """The one ``--hardware`` group: timing from a latency profile (replay, plan, serve, plan --rate).

    ``verifier`` False: ``--verifier-latency`` and ``--prefill`` are the command's decoding flags (serve).
    """
    from ..dists import DIST_SYNTAX, parse_dist

    g = p.add_argument_group("hardware: timing from a latency profile (lrsim profiles)")
    g.add_argument("--hardware", metavar="PROFILE",
                   help="latency profile: a name from `lrsim profiles`, a file, or a modelled GPU "
                        "model:DEVICE[:tpN][:bf16|fp16|fp8|int8|int4][:ENGINE][:ep[:dpa]][:kv-fp8][:roR][:wall|kernel] "
                        "(ENGINE: `lrsim profiles --engines`; docs/gpu-model.md)")
    g.add_argument("--target-arch", help="target architecture: a name in the profile, e.g. qwen2.5-32b; for model: "
                   "profiles also an alias (deepseek-r1-distill-qwen-32b) or a Hugging Face config.json")
    g.add_argument("--draft-arch", help="draft architecture, e.g. qwen2.5-1.5b")
    g.add_argument("--draft-hardware", metavar="PROFILE|colocated",
                   help="where the draft runs: a profile of devices of its own (e.g. model:h100:tp1), or "
                        "'colocated' on the target's GPUs, sharing their time; default: one GPU of the target's "
                        "device (model: targets), else the profile's own draft entries")
    g.add_argument("--verifier-hardware", metavar="PROFILE|colocated",
                   help="where the --judge-arch judge runs (as --draft-hardware)")
    g.add_argument("--kv-dtype", type=choice(("fp8",)),
                   help="fp8: an FP8 KV cache in every modelled profile (model: specs only)")
    if verifier:
        g.add_argument("--verifier-latency", type=model(parse_dist), metavar="SPEC",
                       help=f"verifier seconds per call: {DIST_SYNTAX} (default: recorded in traces, else free)")
    g.add_argument("--judge-arch", help="or: an LLM judge priced by the profile's prefill table")
    g.add_argument("--judge-prompt-tokens", type=positive_int,
                   help="judge prompt tokens (default: its template, 183, plus two mean steps)")
    g.add_argument("--extrapolate", type=choice(POLICIES),
                   help="beyond the last measured context, batch or positions: linear (default), clamp, error; "
                        "rows beyond the largest measured batch fold into positions")
    g.add_argument("--below-context", type=choice(POLICIES),
                   help="below the first measured context: clamp (default), linear, error")
    g.add_argument("--target-tp", type=positive_int,
                   help="a measured profile only: assume the target runs tensor-parallel on N devices (needs "
                        "--tp-efficiency; a model: spec takes :tpN instead)")
    g.add_argument("--tp-efficiency", type=cost,
                   help="E: target pass = profiled pass / (N E); an assumption you state, printed in the notes")
    if verifier:
        g.add_argument("--prefill", type=choice(PREFILLS),
                       help="what the engine computes besides each step's positions: none, last (prefix caching), "
                            "unseen (lrref on llama.cpp); default: what the profile says, else none")


def hardware_spec(a: argparse.Namespace, need_draft: bool = True, number_flags: Sequence[str] = (),
                  own: Sequence[str] = (), traces: Sequence | None = None):
    """The :class:`lrsim.cost.hardware.HardwareSpec` of the command line, or None without ``--hardware`` (then
    its other flags, and ``number_flags``, are refused in one line; ``own``: flags of the group that mean
    something without it too, e.g. serve's ``--verifier-latency``).  With ``traces``, an architecture the command
    needs and no flag gives comes from their header's models when they name a shipped architecture or a
    ``config.json`` here (:func:`lrsim.prediction.compose.recorded_archs`); else one line names the missing flag."""
    from ..cost.hardware import HardwareSpec
    from ..latency.interp import Extrapolation

    if a.hardware is None:
        flags = given(a, [f for f in HARDWARE_FLAGS if f not in own] + list(number_flags))
        if flags:
            raise UsageError(f"{', '.join(flags)} only go(es) with --hardware PROFILE")
        return None
    archs, header = _archs(a, ("target", "draft") if need_draft else ("target",), traces)
    try:
        return HardwareSpec(a.hardware, archs["target"], archs["draft"],
                            Extrapolation(a.extrapolate or "linear", a.below_context or "clamp"), a.target_tp or 1,
                            a.tp_efficiency, getattr(a, "verifier_latency", None), a.judge_arch,
                            a.judge_prompt_tokens, getattr(a, "prefill", None), a.draft_hardware,
                            a.verifier_hardware, a.kv_dtype).load()
    except InputError as e:
        if not header:
            raise
        given_by = ", ".join(f"{r} {archs[r]}" for r in header)
        flags = " / ".join(f"--{r}-arch" for r in header)
        raise InputError(f"{e} (from the traces' header: {given_by}; give {flags})") from None


def _archs(a: argparse.Namespace, needed: Sequence[str], traces: Sequence | None) -> tuple[dict, list[str]]:
    """``({role: architecture or None}, the roles taken from the traces' header)``: the flags', else for a
    ``needed`` role the traces' model's; a needed role with neither is refused in one line naming its flag."""
    archs = {"target": a.target_arch, "draft": a.draft_arch}
    recorded = {}
    if traces and any(archs[r] is None for r in needed):
        from ..prediction.compose import recorded_archs

        recorded = recorded_archs(traces)
    header = [r for r in needed if archs[r] is None and recorded.get(r, (None, None))[1] is not None]
    archs |= {r: recorded[r][1] for r in header}
    missing = [r for r in needed if archs[r] is None]
    if missing and not traces:
        raise UsageError("--hardware needs " + " and ".join(f"--{r}-arch" for r in missing))
    if missing:
        why = [f"the traces' {r} model {recorded[r][0]} is no known architecture" if recorded[r][0] else
               f"the traces' header names no {r} model" for r in missing]
        raise UsageError("--hardware needs " + " and ".join(f"--{r}-arch" for r in missing) + f" ({'; '.join(why)})")
    return archs, header


def add_behaviour_args(p: argparse.ArgumentParser, alphas: bool) -> None:
    """Behaviour from numbers (with --hardware, instead of traces): replay and plan."""
    from ..dists import DIST_SYNTAX, parse_dist

    g = p.add_argument_group("behaviour from numbers (with --hardware, instead of traces)")
    if alphas:
        g.add_argument("--alpha1", type=unit, help="step acceptance: behaviour from these numbers, not traces")
        g.add_argument("--alpha2", type=unit, help="token acceptance of n-gram speculation (needed for k2 > 1)")
    g.add_argument("--step-tokens", type=model(parse_dist), metavar="SPEC",
                   help=f"tokens per target step (default 52): {DIST_SYNTAX}")
    g.add_argument("--draft-tokens", type=model(parse_dist), metavar="SPEC",
                   help="tokens per draft step (default: as --step-tokens)")
    g.add_argument("--request-tokens", type=model(parse_dist), metavar="SPEC",
                   help="output tokens per request (default: one endless request at the prompt's context)")
    g.add_argument("--prompt-tokens", type=nonnegative_int, help="prompt tokens: the context when a request starts")


def behaviour(a: argparse.Namespace, alpha1: float, alpha2: float | None):
    """Behaviour from the command line's numbers."""
    from ..dists import Constant
    from ..prediction.compose import Behaviour
    from ..sim import STEP_TOKENS

    return Behaviour(alpha1=alpha1, alpha2=alpha2, step_tokens=a.step_tokens or Constant(STEP_TOKENS),
                     draft_tokens=a.draft_tokens, request_tokens=a.request_tokens, prompt_tokens=a.prompt_tokens or 0)


# ----------------------------------------------------------------------------- --vllm-metrics


def add_vllm_args(p: argparse.ArgumentParser, instead: bool = True) -> None:
    """``--vllm-metrics FILE|BEFORE,AFTER`` and ``--vllm-model NAME`` (:mod:`lrsim.prediction.vllm_metrics`); ``instead``: the
    flag stands in for ``--alpha2`` (plan, replay)."""
    also = "; alpha2 from it, in place of --alpha2" if instead else ""
    g = p.add_argument_group("token acceptance from vLLM's speculative-decoding counters (lrsim.prediction.vllm_metrics)")
    g.add_argument("--vllm-metrics", action="append", metavar="FILE|BEFORE,AFTER",
                   help="a Prometheus text dump of vLLM's /metrics, or two comma-separated dumps whose difference "
                        "(the counts between them) is fitted" + also)
    g.add_argument("--vllm-model", metavar="NAME", help="the model_name to read when the dump holds several")


def vllm_metrics(a: argparse.Namespace):
    """The fitted ``--vllm-metrics`` (:class:`lrsim.prediction.vllm_metrics.VllmCalibration`), or None without the flag."""
    files = getattr(a, "vllm_metrics", None)
    if files is None:
        if getattr(a, "vllm_model", None) is not None:
            raise UsageError("--vllm-model only goes with --vllm-metrics")
        return None
    if len(files) > 1:
        raise UsageError("--vllm-metrics given twice: give a window as one flag, --vllm-metrics BEFORE,AFTER")
    from ..prediction.vllm_metrics import read_vllm_metrics

    return read_vllm_metrics(files[0], a.vllm_model)


def alpha2_from_vllm(a: argparse.Namespace, default: float | None, refuse: str | None = None):
    """Resolve ``--vllm-metrics`` into ``a.alpha2`` before the command uses it (``--alpha2`` beside it: one line;
    ``refuse``: why this use of the command takes no alpha2, said if the flag is given); without the flag
    ``a.alpha2`` stays as given, else ``default``.  Returns the fit, or None."""
    if getattr(a, "vllm_metrics", None) is not None:
        if a.alpha2 is not None:
            raise UsageError("--vllm-metrics gives alpha2: drop --alpha2")
        if refuse:
            raise UsageError(refuse)
    m = vllm_metrics(a)
    if m is not None:
        a.alpha2 = m.require_alpha2()
    elif a.alpha2 is None:
        a.alpha2 = default
    return m


def note_alpha2(a: argparse.Namespace, out: str, m) -> str:
    """The command's output saying where alpha2 came from: a note line, or ``alpha2_source`` in ``--json``."""
    if m is None:
        return out
    if getattr(a, "json", False):
        d = json.loads(out)
        if isinstance(d, dict):
            return json.dumps(d | {"alpha2_source": m.source_dict()}, indent=2, default=float)
        return out
    return f"{out}\n  note: {m.source_note()}"


# ----------------------------------------------------------------------------- --html


def add_html_arg(p: argparse.ArgumentParser) -> None:
    """``--html FILE``: the command's findings as one self-contained page (:mod:`lrsim.report_html`)."""
    p.add_argument("--html", metavar="FILE.html",
                   help="also write the report as one self-contained HTML page of figures (plotly inline, "
                        "no network needed to view it)")


def check_html(a: argparse.Namespace) -> None:
    """Refuse an unwritable ``--html`` path in one line before any work."""
    if getattr(a, "html", None):
        from ..atomic import check_writable

        check_writable(a.html)


def write_html(a: argparse.Namespace, title: str, text: str, figures: Sequence) -> None:
    """Write ``--html``'s page atomically (if asked) and say so on stderr."""
    if getattr(a, "html", None):
        from ..report_html import write_page

        write_page(a.html, title, text, figures)
        print(f"lrsim: wrote {a.html} ({len(figures)} figures)", file=sys.stderr)


# ----------------------------------------------------------------------------- --mode auto


def add_auto_args(p: argparse.ArgumentParser, phases: bool = False) -> None:
    """The adaptive policy's options (:class:`lrsim.adaptive.sim.AutoOptions`) for ``--mode auto``."""
    from ..adaptive.policy import AutoOptions

    d = AutoOptions()
    g = p.add_argument_group("--mode auto (lrsim.adaptive: the policy chooses mode, k1 and k2 every few steps)")
    if phases:
        g.add_argument("--phases", metavar="STEPS:ALPHA1[:ALPHA2],...",
                       help="the request's true acceptance, changing mid-request, e.g. 30:0.8,30:0.3 (default: "
                            "--steps at --alpha1); --alpha1 and --alpha2 are the policy's prior")
    g.add_argument("--max-gamma", type=positive_int, default=d.max_gamma,
                   help=f"deepest LR configuration (default {d.max_gamma})")
    g.add_argument("--k2-options", default=",".join(map(str, d.k2s)), metavar="K2,...",
                   help="token SD widths to choose among (default %(default)s)")
    g.add_argument("--segment-steps", type=positive_int, default=d.segment_steps,
                   help=f"output steps per decision (default {d.segment_steps})")
    g.add_argument("--dwell", type=positive_int, default=d.dwell,
                   help=f"decisions a choice is kept (default {d.dwell})")
    g.add_argument("--switch-margin", type=float, default=d.switch_margin,
                   help="gain a new choice needs under the same draw, in [0, 1) (default 1/16: a switch drops the "
                        "drafts in flight, about one step in dwell x segment-steps)")
    g.add_argument("--prior-weight", type=float, default=d.prior_weight,
                   help=f"verdicts the prior is worth (default {d.prior_weight:g})")
    g.add_argument("--memory", type=float, default=d.memory,
                   help=f"verdicts the acceptance estimate weighs at most, older ones fading (default {d.memory:g})")
    g.add_argument("--objective", choices=("closed-form", "simulated"), default=d.objective,
                   help="what ranks the configurations: the closed forms with the machine's costs, or the priced "
                        "simulator's table over a grid of acceptances (built first: seconds to a minute)")
    g.add_argument("--learn-speed", action=argparse.BooleanOptionalAction, default=d.learn_speed,
                   help="correct each configuration's predicted speedup by the time per token it got, shared across "
                        "requests (lrsim.adaptive.policy.SpeedModel; default on; --no-learn-speed: the objective alone)")
    g.add_argument("--speed-memory", type=float, default=d.speed_memory,
                   help=f"segments the speed correction weighs at most, older ones fading (default {d.speed_memory:g})")


def auto_options(a: argparse.Namespace):
    """:class:`lrsim.adaptive.sim.AutoOptions` from :func:`add_auto_args`' flags; bad values: InputError."""
    from ..adaptive.policy import AutoOptions

    try:
        k2s = tuple(sorted({int(k) for k in a.k2_options.split(",")}))
    except ValueError:
        raise InputError(f"--k2-options {a.k2_options!r}: expected integers, e.g. 1,4") from None
    if not k2s or k2s[0] < 1:
        raise InputError(f"--k2-options {a.k2_options!r}: widths >= 1")
    if a.prior_weight <= 0:
        raise InputError(f"--prior-weight must be > 0, got {a.prior_weight}")
    if not 0 <= a.switch_margin < 1:
        raise InputError(f"--switch-margin must be in [0, 1), got {a.switch_margin}")
    if a.memory < a.prior_weight:
        raise InputError(f"--memory must be >= --prior-weight ({a.prior_weight:g}), got {a.memory:g}")
    if not a.speed_memory >= 1:
        raise InputError(f"--speed-memory must be >= 1, got {a.speed_memory:g}")
    return AutoOptions(a.max_gamma, k2s, LR_MODES, a.dwell, a.switch_margin, a.segment_steps,
                       a.prior_weight, a.memory, a.objective, learn_speed=a.learn_speed, speed_memory=a.speed_memory)
