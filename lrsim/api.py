"""The public Python API, re-exported from ``lrsim``: the command line's answers as typed results.

Example::

    import lrsim
    p = lrsim.plan(alpha1=0.6, c1=0.1, alpha2=0.6, c2=0.05, budget=16)
    print(p)                      # the text of `lrsim plan`
    p.k1, p.k2, p.speedup         # (4, 4, 3.817...)

Every function checks its input first and raises ``lrsim.errors.InputError``
(a ``ValueError``, one line) for bad input, like the commands' exit code 2.
Heavy modules (numpy, scipy, simpy, plotly) load on the first call, so
``import lrsim`` stays light.  Names that are also modules (``lrsim.prediction.replay``,
``lrsim.serve``, ``lrsim.prediction.calibrate``) stay modules: the API's functions are
``predict`` (replay traces, or numbers on a profile) and
``simulate_serving``.
"""

from __future__ import annotations

import os
from dataclasses import fields, replace
from typing import Any, Sequence

from .results import PlanResult, PredictionResult, ServeResult, SimulationResult, Table, TheoremsResult

__all__ = ["plan", "simulate", "predict", "simulate_serving", "check_theorems", "hardware", "load_traces",
           "load_profile", "write_html"]

Traces = Sequence[Any]  #: lr-traces: ``lrsim.trace.Trace`` objects or paths to trace files


def load_traces(paths: Sequence[str | os.PathLike] | None = None) -> list:
    """Read lr-trace files (JSONL, optionally ``.gz``); ``None``: the embedded default traces.

    :returns: a list of ``lrsim.trace.Trace`` (skipped lines in each one's ``warnings``).
    """
    from .trace import default_traces, read_trace

    return [read_trace(p) for p in (default_traces() if paths is None else paths)]


def load_profile(spec: Any, archs: tuple[str, ...] | None = None):
    """A latency profile: an embedded name (``lrsim profiles``), a file, or a modelled GPU
    ``model:DEVICE[:tpN][:DTYPE][:ENGINE][:kv-fp8][:wall|kernel]`` (of ``archs``, default every shipped one).

    :returns: a ``lrsim.latency.profile.Profile``.
    """
    from .cost.library import load_profile as load

    return load(spec, archs)


def hardware(profile: Any, target_arch: str, draft_arch: str | None = None, *, verifier_latency: Any = None,
             judge_arch: str | None = None, target_tp: int = 1, tp_efficiency: float | None = None,
             extrapolate: str = "linear", below_context: str = "clamp", prefill: str | None = None,
             draft_hardware: Any = None, verifier_hardware: Any = None, kv_dtype: str | None = None):
    """Where the time goes: a latency profile and the architectures on it (``--hardware`` and its flags).

    :param profile: an embedded profile's name, a file, ``model:DEVICE[:tpN][:DTYPE][:ENGINE]...`` or a loaded
        profile.
    :param verifier_latency: seconds per verifier call (a number) or a distribution spec such as
        ``"lognormal:0.013,0.5"``; ``judge_arch`` prices an LLM judge from the profile instead.
    :param draft_hardware: where the draft runs: a profile of devices of its own, ``"colocated"`` (the target's
        GPUs, sharing their time), or None (a ``model:`` target: one GPU of its device at TP 1).
    :param verifier_hardware: where the ``judge_arch`` judge runs, likewise.
    :param kv_dtype: ``"fp8"``: an FP8 KV cache in every modelled profile.
    :returns: a ``lrsim.cost.hardware.HardwareSpec``.
    """
    from .cost.hardware import HardwareSpec
    from .latency.interp import Extrapolation

    return HardwareSpec(profile, target_arch, draft_arch, Extrapolation(extrapolate, below_context), target_tp,
                        tp_efficiency, _dist(verifier_latency), judge_arch, None, prefill, draft_hardware,
                        verifier_hardware, kv_dtype).load()


def _dist(v: Any):
    """A number (a constant), a spec string (``lrsim.dists.parse_dist``), a Dist, or None."""
    from .dists import Constant, parse_dist

    if v is None or hasattr(v, "mean"):
        return v
    return Constant(float(v)) if isinstance(v, (int, float)) else parse_dist(str(v))


def _traces(traces: Traces | None) -> list | None:
    if traces is None:
        return None
    from .trace import Trace

    out = [t if isinstance(t, Trace) else load_traces([t])[0] for t in traces]
    if not out:
        from .errors import InputError

        raise InputError("no traces given (lrsim.load_traces() reads the embedded default)")
    return out


def _behaviour(alpha1: float, alpha2: float | None, step_tokens: Any, draft_tokens: Any, request_tokens: Any,
               prompt_tokens: int):
    from .prediction.compose import Behaviour

    return Behaviour(alpha1=alpha1, alpha2=alpha2, step_tokens=_dist(step_tokens), draft_tokens=_dist(draft_tokens),
                     request_tokens=_dist(request_tokens), prompt_tokens=prompt_tokens)


def plan(alpha1: float = 0.6, c1: float = 0.1, alpha2: float = 0.6, c2: float = 0.05, budget: int = 16,
         mode: str = "async", *, top: int = 10, traces: Traces | None = None, hardware: Any = None,
         k2_max: int = 8, k1_max: int | None = None, bootstrap: int = 0, step_tokens: Any = 52,
         request_tokens: Any = None, prompt_tokens: int = 0, progress: bool = False,
         workers: int | None = 1) -> PlanResult:
    """The best split of a parallel budget ``M`` between step level (``k1``) and token level (``k2``).

    Without ``traces`` and ``hardware``: the paper's closed forms, exact (``lrsim plan``).  With
    ``traces`` (recorded workload) and/or ``hardware`` (a ``hardware`` spec: timing from a latency
    profile; behaviour from ``traces`` or from ``alpha1``, ``alpha2`` and the lengths), every (mode, k1,
    k2) under the budget is simulated and ranked (``lrsim plan --trace`` / ``--hardware``); ``mode``,
    ``c1`` and ``c2`` then come from the workload.

    :param bootstrap: simulated plans: replicates for the best's 95% interval (0: none; traces only).
    :param workers: simulated plans: processes (None: one per core); the plan is the same with any number.
    """
    if traces is None and hardware is None:
        from .format import format_plan
        from .planner import plan as closed

        p = closed(alpha1, c1, alpha2, c2, budget, mode, top=top)
        table = Table.from_dicts([{"rank": i} | vars(c) for i, c in enumerate(p.top, 1)],
                                 ("rank", "k1", "k2", "positions", "f", "g", "speedup"), "ranked (k1, k2)")
        return PlanResult(format_plan(p), p, "closed form", p.mode, p.k1, p.k2, p.speedup, None, p.budget,
                          p.pure_token.speedup, p.pure_step.speedup, table, [])
    return _simulated_plan(_traces(traces), hardware, budget, top, k2_max, k1_max, bootstrap,
                           _behaviour(alpha1, alpha2, step_tokens, None, request_tokens, prompt_tokens), progress,
                           workers)


def _simulated_plan(traces: list | None, hw: Any, budget: int, top: int, k2_max: int, k1_max: int | None,
                    bootstrap: int, numbers: Any, progress: bool, workers: int | None = 1) -> PlanResult:
    from .prediction.outcome import format_trace_plan

    if hw is None:
        from .prediction.replay import plan_from_traces

        tp = plan_from_traces(traces, budget, k2_max=k2_max, bootstrap=bootstrap, progress=progress, workers=workers)
        source = "traces"
    else:
        from .prediction.compose import plan as composed

        what = "traces" if traces is not None else "numbers"
        tp = composed(traces if traces is not None else numbers, hw, budget, k2_max=k2_max, bootstrap=bootstrap,
                      k1_max=k1_max, progress=progress, workers=workers)
        source = f"{what} on {hw.name} ({hw.target_arch} target, {hw.draft_arch} draft)"
    ranked = [{"rank": i} | r for i, r in enumerate(tp.ranked, 1)]
    cols = ("rank", "mode", "k1", "k2", "width", "positions", "speedup")
    pure_token = max((r["speedup"] for r in tp.ranked if r["k1"] == 1), default=1.0)
    pure_step = max((r["speedup"] for r in tp.ranked if r["k2"] == 1 and r["k1"] > 1), default=1.0)
    b = tp.best
    return PlanResult(format_trace_plan(tp, top, source), tp, source, b.setting.mode, b.setting.k1, b.setting.k2,
                      b.speedup, b.speedup_ci95, budget, pure_token, pure_step,
                      Table.from_dicts(ranked, cols, "ranked (mode, k1, k2), simulated"), list(tp.notes))


def simulate(mode: str = "async", *, trace: str | os.PathLike | None = None, chrome: str | os.PathLike | None = None,
             **settings: Any) -> SimulationResult:
    """One event simulation of a request decoded with LR (``lrsim simulate``).

    :param settings: any ``lrsim.sim.SimConfig`` field: ``alpha1``, ``c1``, ``k1``, ``alpha2``, ``c2``,
        ``k2``, ``width``, ``steps``, ``seed``, ``verifier_cost``, ``step_tokens`` (a number, a spec string such
        as ``"lognormal:52,0.5"`` or a distribution), ...
    :param trace: also write the run as an lr-trace; ``chrome``: as a Chrome/Perfetto trace.
    """
    from .atomic import check_writable
    from .format import format_sim
    from .sim import SimConfig
    from .sim import simulate as run

    dists = ("step_tokens", "draft_tokens", "verifier_latency", "request_tokens")
    kw = {k: (_dist(v) if k in dists else v) for k, v in settings.items()}
    cfg = _config(SimConfig, dict(kw, mode=mode))
    for path in (trace, chrome):
        if path:
            check_writable(path)
    r = run(cfg, trace=trace, chrome=chrome)
    return SimulationResult(format_sim(r), r, r.mode, cfg.k1, cfg.k2, r.speedup, tuple(r.speedup_ci95),
                            r.theory_speedup, r.acceptance_rate)


def _config(cls: type, kw: dict):
    """``cls(**kw)`` with unknown names refused in one line."""
    from .errors import InputError

    known = {f.name for f in fields(cls)}
    unknown = sorted(set(kw) - known)
    if unknown:
        raise InputError(f"unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return cls(**kw)


def predict(mode: str | None = None, k1: int | None = None, k2: int | None = None, width: int | None = None, *,
            traces: Traces | None = None, hardware: Any = None, alpha1: float | None = None,
            alpha2: float | None = None, step_tokens: Any = 52, draft_tokens: Any = None, request_tokens: Any = None,
            prompt_tokens: int = 0, steps: int = 20_000, bootstrap: int = 20, seed: int = 0,
            correlation: float = 0.0) -> PredictionResult:
    """Predicted speedup of one configuration over target-only decoding (``lrsim replay``).

    - ``traces`` alone: replay the recorded workload, behaviour and timing calibrated from it;
    - ``traces`` and ``hardware``: the traces' acceptance and lengths, the profile's timing;
    - ``alpha1`` (and ``alpha2``, the lengths) and ``hardware``: behaviour from numbers.

    ``mode`` ('ar', 'sync', 'async'), ``k1``, ``k2`` and ``width`` default to the first trace's recorded
    configuration, else async with ``k1 = 4``.
    """
    from .errors import InputError
    from .prediction.outcome import format_prediction

    tr = _traces(traces)
    if (tr is None) == (alpha1 is None) or (tr is None and hardware is None):
        raise InputError("give traces, or alpha1 with hardware (behaviour from numbers), but not both")
    setting = _setting(tr, mode, k1, k2, width)
    kw = dict(steps=steps, seed=seed, bootstrap=bootstrap, correlation=correlation)
    if hardware is None:
        from .prediction.replay import predict as replay

        p = replay(tr, setting, **kw)
    else:
        from .prediction.compose import predict as composed

        source = tr if tr is not None else _behaviour(alpha1, alpha2, step_tokens, draft_tokens, request_tokens,
                                                     prompt_tokens)
        p = composed(source, hardware, setting, **kw)
    s = p.setting
    return PredictionResult(format_prediction(p), p, s.mode, s.k1, s.k2, p.speedup, p.speedup_ci95, p.closed_form,
                            p.alpha1, p.alpha2, p.c1, list(p.notes))


def _setting(traces: list | None, mode: str | None, k1: int | None, k2: int | None, width: int | None):
    """The configuration to predict: given values over the first trace's recorded ones (as ``lrsim replay``)."""
    from .prediction.outcome import requested_setting
    from .trace import recorded_setting

    return requested_setting(recorded_setting(traces[0].header) if traces else None, mode, k1, k2, width)


def simulate_serving(rates: Sequence[float] | float | None = None, *, concurrency: Sequence[int] | None = None,
                     modes: Sequence[str] = ("ar", "lr-async"), hardware: Any = None, traces: Traces | None = None,
                     workers: int | None = None, progress: bool = False, **settings: Any) -> ServeResult:
    """A serving deployment under load (``lrsim serve``): TTFT, TPOT, e2e, throughput, goodput, crossovers.

    :param rates: request rates (requests/s), or ``concurrency``: closed-loop client counts.
    :param settings: ``lrsim.sim.SimConfig`` fields (decoding: ``alpha1``, ``k1``, ``k2``, ...) and
        ``lrsim.serve.config.ServeConfig`` fields (``requests``, ``replications``, ``prompt_tokens``,
        ``output_tokens``, ``slo_tpot_ms``, ``max_num_seqs``, ...).
    """
    from .serve.crossover import crossovers
    from .serve.grid import serve_grid
    from .serve.report import format_rows, serve_title
    from .sim import SimConfig

    loads, key = ([float(rates)] if isinstance(rates, (int, float)) else list(rates or []), "rate")
    if concurrency is not None:
        loads, key = [int(n) for n in concurrency], "concurrency"
    cfg = _serve_config(_traces(traces), hardware, settings, {f.name for f in fields(SimConfig)})
    _check_loads(loads, key, modes)
    rows, per_run = serve_grid(cfg, list(modes), loads, workers, None, progress=progress, key=key)
    crosses = crossovers(per_run, list(modes), key=key) if "ar" in modes and len(loads) > 1 else []
    title = serve_title(cfg, key)
    return ServeResult(format_rows(rows, crosses, title), rows, Table.from_dicts(rows, title=title), crosses, title)


def _check_loads(loads: list, key: str, modes: Sequence[str]) -> None:
    from .errors import InputError
    from .serve.config import check_mode, check_rate

    if not loads:
        raise InputError("give rates (requests/s) or concurrency (closed-loop clients)")
    for x in loads:
        if key == "rate":
            check_rate(x)
        elif x < 1:
            raise InputError(f"concurrency must be integers >= 1, got {x!r}")
    for m in modes:
        check_mode(m)


def _serve_config(traces: list | None, hw: Any, settings: dict, sim_names: set):
    from .serve.config import ServeConfig

    workload = ("prompt_tokens", "output_tokens")  # each request's lengths (as `lrsim serve --prompt-tokens`)
    decode = {k: v for k, v in settings.items() if k in sim_names and k not in workload}
    serve = {k: (_dist(v) if k in workload else v) for k, v in settings.items()
             if k not in sim_names or k in workload}
    for k in ("step_tokens", "draft_tokens", "verifier_latency"):
        if k in decode:
            decode[k] = _dist(decode[k])
    if traces:
        from .serve.calibration import decode_from_traces, length_pairs

        sim, own = decode_from_traces(traces, decode.get("k2", 1))
        sim, hw = replace(sim, **decode), hw or own
        if "prompt_tokens" not in serve and "output_tokens" not in serve:
            serve["pairs"] = length_pairs(traces)
    else:
        from .sim import SimConfig

        sim = _config(SimConfig, decode)
    return _config(ServeConfig, dict(serve, decode=sim, hardware=hw))


def check_theorems(resolution: int = 10, stages: int = 50_000) -> TheoremsResult:
    """Check Theorems 1-4 and the SD ceiling (``lrsim theorems``; ``resolution`` values per grid axis)."""
    from .theorems import check_all, format_report

    res = check_all(resolution, stages)
    table = Table.from_dicts([{"check": r.name, "verdict": r.verdict, "points": r.points_checked,
                               "seconds": r.seconds} for r in res], title="theorem checks")
    return TheoremsResult(format_report(res), res, table)


def write_html(path: str | os.PathLike, *results: Any, traces: Traces | None = None, hardware: Any = None,
               title: str = "Lookahead Reasoning report") -> str:
    """Write one self-contained HTML page (plotly inline, no network when viewed) of API results.

    ``results``: any of ``PlanResult`` (the (k1, k2) map, the pure-method lines),
    ``TheoremsResult`` (verdicts), ``ServeResult`` (latency against load, crossovers),
    ``PredictionResult``; ``traces`` add the calibrated acceptance by position and pass costs,
    ``hardware`` the profile's pass-cost curves.  Written atomically; returns the path.
    """
    from .report_html import page_for_results

    page_for_results(path, results, _traces(traces), hardware, title)
    return str(path)
