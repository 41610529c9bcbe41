"""``lrsim serve``: from a typed request to a table, a file, a figure (the command layer,
:mod:`lrsim.commands.serve`, turns the arguments into a :class:`ServeRequest`; nothing here sees a Namespace)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..cost.hardware import HardwareSpec
from ..errors import InputError
from ..sim import SimConfig
from .arrivals import read_arrivals
from .config import ServeConfig, check_mode, check_rate

WORKLOAD = ("requests", "arrival", "arrival_cv", "prompt_tokens", "output_tokens")
ENGINE = ("max_num_seqs", "max_num_batched_tokens", "kv_capacity_tokens", "verifier_slots", "reprice")
MEASURE = ("replications", "warmup", "slo_ttft_s", "slo_tpot_ms", "slo_e2e_s")
GIVEN = WORKLOAD + ENGINE + MEASURE  #: ServeConfig fields a request may set


@dataclass
class ServeRequest:
    """What ``lrsim serve`` (or ``lrsim plan --rate``) was asked, typed."""

    given: dict = field(default_factory=dict)  #: the :data:`GIVEN` ServeConfig fields the user set
    rate: str | None = None  #: --rate: a value, A,B,C or START:STOP:NUM (requests/s)
    concurrency: str | None = None  #: --concurrency: closed-loop client counts (same grammar)
    modes: str | None = None  #: --modes: serve's mode names, comma-separated
    sim_mode: str | None = None  #: --mode: one mode in the simulator's names
    seed: int | None = None  #: --seed
    arrivals: str | None = None  #: --arrivals FILE
    out: str | None = None  #: --out FILE.csv|FILE.parquet
    figure: str | None = None  #: --figure STEM
    html: str | None = None  #: --html FILE
    workers: int | None = None
    scheduler: str | None = None
    progress: bool = True
    json: bool = False


def parse_rates(text: str | None) -> list[float | None]:
    """``--rate``: one value, ``A,B,C`` or ``START:STOP:NUM``; each > 0 requests/s."""
    from ..sweep import parse_grid

    if text is None:
        return [None]
    return [check_rate(r) for r in parse_grid(text, float)]


def parse_loads(r: ServeRequest) -> tuple[list, str]:
    """(load levels, key): ``--rate`` values ('rate') or ``--concurrency`` values ('concurrency'), not both."""
    from ..sweep import parse_grid

    conc = r.concurrency
    if conc is not None and r.rate is not None:
        raise InputError("give --rate (open loop) or --concurrency (closed loop), not both")
    if r.given.get("arrival") == "closed" and conc is None:
        raise InputError("--arrival closed needs --concurrency N")
    if conc is None:
        return parse_rates(r.rate), "rate"
    levels = parse_grid(conc, int)
    if any(n < 1 for n in levels):
        raise InputError(f"--concurrency must be integers >= 1, got {conc!r}")
    return levels, "concurrency"


def serve_modes(r: ServeRequest, k2: int) -> list[str]:
    """``--modes`` (serve's names), or ``--mode`` in the simulator's names (a trace header's setting)."""
    one = r.sim_mode
    if one is not None and r.modes is not None:
        raise InputError("give --modes or --mode, not both")
    if one is not None:
        return [{"ar": "sd" if k2 > 1 else "ar", "sync": "lr-sync", "async": "lr-async"}[one]]
    return parse_modes(r.modes or "ar,lr-async")


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes:
        raise InputError("--modes: give at least one of ar, sd, lr-sync, lr-async")
    return list(dict.fromkeys(check_mode(m) for m in modes))


def build_config(r: ServeRequest, decode: SimConfig, hardware: HardwareSpec | None = None,
                 traces: list | None = None) -> ServeConfig:
    """A :class:`ServeConfig` from what the user gave (defaults for the rest)."""
    kw = {k: v for k, v in r.given.items() if v is not None} | {"decode": decode, "hardware": hardware}
    if kw.get("arrival") == "closed":
        del kw["arrival"]  # the closed loop is --concurrency's
    if r.seed is not None:
        kw["seed"] = r.seed
    if traces:
        from .calibration import length_pairs, placement

        if "prompt_tokens" not in kw and "output_tokens" not in kw:
            kw["pairs"] = length_pairs(traces)
        kw["placement"] = placement(traces)
    if r.arrivals:
        rows = read_arrivals(r.arrivals)
        kw["trace_arrivals"] = rows
        kw.setdefault("requests", len(rows))
    return ServeConfig(**kw)


def decode_config(settings: dict, traces: list | None, k2_max: int = 1, hw: HardwareSpec | None = None) -> tuple[SimConfig, HardwareSpec | None]:
    """Per-request decoding and the hardware spec: behaviour calibrated from ``traces`` (flags given on top),
    else from the flags; timing from ``hw`` (``--hardware``), else the traces' own profile, else the flags."""
    if not traces:
        return SimConfig(**settings), hw
    from .calibration import decode_from_traces

    sim, own = decode_from_traces(traces, max(k2_max, settings.get("k2", 1)))
    return replace(sim, **settings), hw or own


def serve(r: ServeRequest, decode: SimConfig, hardware: HardwareSpec | None = None,
          traces: list | None = None, html=None) -> str:
    """Run ``lrsim serve``: the grid, then the table/JSON, ``--out`` and ``--figure``; ``html(rows, crosses,
    title, cfg)`` writes ``--html``'s page (the command layer's: serve does not draw pages itself)."""
    from ..plots import save_figure
    from ..sweep import check_output, write_rows
    from .crossover import crossovers
    from .grid import check_grid, serve_grid
    from .report import figure, format_rows, json_rows, serve_title

    cfg = build_config(r, decode, hardware, traces)
    modes, (rates, key) = serve_modes(r, decode.k2), parse_loads(r)
    if rates == [None] and cfg.trace_arrivals is None:
        raise InputError("give --rate (requests/s), --concurrency N or --arrivals FILE")
    check_grid(cfg, modes, rates, key)  # bad input stops here, before any file or folder is made
    out = check_output(r.out) if r.out else None
    for path in (r.figure + ".html" if r.figure else None, r.html):
        if path:
            from ..atomic import check_writable

            check_writable(path)
    rows, per_run = serve_grid(cfg, modes, rates, r.workers, r.scheduler, progress=r.progress, key=key)
    crosses = crossovers(per_run, modes, key=key) if "ar" in modes and len(rates) > 1 else []
    title = serve_title(cfg, key)
    if out is not None:
        write_rows(rows, out)
    if r.figure:
        save_figure(figure(rows, crosses, title), r.figure)
    if r.html and html is not None:
        html(rows, crosses, title, cfg)
    return json_rows(rows, crosses) if r.json else format_rows(rows, crosses, title)

