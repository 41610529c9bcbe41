"""One command for what only a GPU can show: LR traces and their prediction first, then profiles, kernel sums,
model comparison, packed with provenance.

    python studies/gpu_campaign.py --device cuda                  # every default part, resumable
    python studies/gpu_campaign.py --device cuda --list           # the parts and their stated times, nothing run
    python studies/gpu_campaign.py --device cuda --parts env,traces-qwen2.5-32b,trace-points,compare-traces
    python studies/gpu_campaign.py --device cpu --tiny --out /tmp/c    # the smoke test (tests/test_gpu_campaign.py)

Parts, in the order they run (each writes into ``--work`` and a ``parts/PART.done.json`` marker; a part with a
marker is skipped, so a run cut off by a time limit resumes where it stopped; ``--force`` redoes them):

- ``env``: the device, its memory, torch / transformers / CUDA versions, ``nvidia-smi`` (seconds);
- ``traces-qwen2.5-32b``: ``lrref bench --random-weights qwen2.5-32b,qwen2.5-1.5b --device cuda`` (the paper's
  pair) in ar, lr-sync and lr-async: random verifier at p = 0.5, 6 problems of 192 tokens after a warm-up one, steps
  of 64, depth 4, on CUDA graphs (``--cuda-graphs``; ``TRACES``: stated ~3 min on an H100, within the 4 minutes the
  first window allows);
- ``trace-points``: ``lrref profile`` (wall) of only the shapes those traces ran: target and draft at rows 1..5,
  positions 1, 65 and 129 (a decode, and a row that prefills one or two unseen drafts), contexts 128 and 320;
- ``compare-traces``: each trace predicted by ``lrsim.predict`` (behaviour from the pair's traces, the mode's
  recorded setting) on this device's modelled profile in the hf-eager engine (``model:DEVICE:eager``) and on the
  measured trace points: measured tokens/s, predicted, error, per mode;
- ``peaks``: achieved bf16 matmul FLOP/s and device-to-device copy bandwidth (to set against the spec; ~1 min);
- ``profile-ARCH``: ``lrref profile --device cuda`` (wall time, synchronised) of the paper's shapes over context
  0-32K where the model says memory allows, rows 1-32, positions 1-16;
- ``kernels-ARCH``: kernel sums of the same passes under ``torch.profiler`` (what CUDA graphs approach; the kind
  the embedded H100 profiles and the model's fit use) on a smaller grid;
- ``traces-qwen3-32b``: the other pair's traces, as the first (``compare`` and ``compare-traces`` of a later run
  include them);
- ``compare``: every measured grid point against the hardware model for this device (and, on an H100, against
  the embedded H100 profiles);
- ``pack``: everything into ``studies/data/gpu-<device>/`` with ``manifest.json`` (provenance, per-part times);
- ``validate``: ``studies/gpu_model_validation.py --profiles`` on the pack (nothing is fitted on it);
- ``paper-check`` (not in the defaults: ~4 min on 2 cores): ``studies/paper_check.py`` into the pack.

Stated times (``--list``) come from the hardware model's own eager prediction for the device (x warm-up +
repeats, plus the cache prefill and ~1 s per 2 GB of weights built; the traces' decode through the paper's closed
form on those passes), so they are estimates; every subprocess part runs under a timeout of 3x its estimate (at
least 2 min); ``compare-traces``, ``compare``, ``pack`` and ``validate`` read the other parts' files, so they run
every time.  On a lent GPU machine (15 minutes of device time a session, the machine's start included: ~7 min on
2026-11-26) the campaign spans sessions: ``--archive $OUT/campaign.tar.gz`` refreshes the pack and rewrites one
archive after every part (a command killed at its limit still returns what finished, committable), its pack is
committed, and the next session's ``--resume-from studies/data/gpu-<device>`` skips the parts that pack holds;
see docs/how-to/predict-gpu.md, "GPU campaign".  ``compare-traces`` needs ``simpy`` and ``validate`` ``plotly``,
which the lent machine's Python lacks: the how-to carries their wheels.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from lrsim.atomic import atomic_output  # after the path above; standard library only, like lrsim.errors
from lrsim.errors import UsageError, run_command

PAPER_ARCHS = ("qwen2.5-1.5b", "qwen2.5-32b", "qwen2.5-7b", "qwen3-1.7b", "qwen3-32b")
GRID = {"context": (0, 1024, 4096, 8192, 16384, 32768), "batch": (1, 2, 4, 8, 16, 32), "positions": (1, 2, 4, 8, 16)}
KERNEL_GRID = {"context": (0, 1024, 8192), "batch": (1, 2, 4, 8, 16), "positions": (1, 2, 4, 8, 16)}
TINY = {"context": (0, 32), "batch": (1, 2), "positions": (1, 2)}
PAIRS = (("qwen2.5-32b", "qwen2.5-1.5b"), ("qwen3-32b", "qwen3-1.7b"))  # the first is the paper's: traced first
WARMUP, REPEATS = 2, 5
POINT_WARMUP, POINT_REPEATS = 1, 3  # trace-points: few shapes, each timed a little less (median of 3)
PROCESS_S = 10.0  # stated time of starting a Python process that imports torch and transformers
CAMPAIGN_MODES = ("ar", "lr-sync", "lr-async")
TRACE_P = 0.5  # the random verifier's acceptance probability
TRACES_BUDGET_S = 240.0  # the paper pair's traces, stated on an H100: what the first window spends before the rest
#                          (180 s before the warm-up request; the H200 of 2026-11-27 started in ~35 s, not 7 min)
DERIVED = ("compare-traces", "compare", "pack", "validate")  # parts that only read the others' files
PREDICT_STEPS = 20_000  # output steps lrsim simulates per prediction (its default; 2000 in the smoke test)
ENGINE_PREFILL = "unseen"  # lrref's per-sequence KV: a row prefills the drafts its sequence has not seen
#                           (lrsim.sim.SimConfig.prefill), on the modelled and the measured profile alike


@dataclass(frozen=True)
class TraceSetup:
    """What every random-weight trace decodes (``lrref bench`` flags)."""

    n: int  # problems per mode (--n)
    tokens: int  # generated tokens per problem (--max-tokens)
    step: int  # step cap (--max-step-tokens): random weights write no separator, so every step ends there
    gamma: int  # LR depth (--gamma): lr-sync drafts per cycle (k1 = gamma + 1 rows), lr-async steps ahead
    prompt: int  # random prompt tokens (--prompt-tokens)
    warmup: int = 1  # requests each mode decodes first, untimed and unrecorded (--warmup): the H200's first
    #                  request of 2026-11-27 ran 2.5x slow (docs/validation/gpu-h200.md)

    def grid(self) -> dict:
        """The shapes these traces price (``trace-points``): contexts from the prompt to its end, rows 1..k1,
        positions 1 (a decode) and 1 + one or two steps (a row prefilling unseen drafts; the prompt's prefill)."""
        return {"context": (self.prompt, self.prompt + self.tokens), "batch": tuple(range(1, self.gamma + 2)),
                "positions": (1, self.step + 1, 2 * self.step + 1)}


# issue 42: at least 6 timed requests per mode within 4 minutes, on CUDA graphs (lrref --cuda-graphs: passes near
# their kernel sums, so 6 x 192 tokens are stated ~3.5 min on an H100 where 2 eager ones were 3.7)
TRACES = TraceSetup(n=6, tokens=192, step=64, gamma=4, prompt=128)
GRAPH_CAPTURE_S = 20.0  # stated: each bucket's warm-up and capture, target and draft (a few dozen buckets)
TINY_TRACES = TraceSetup(n=1, tokens=24, step=6, gamma=2, prompt=12)


@dataclass
class Part:
    """One resumable piece of the campaign."""

    name: str
    what: str
    estimate_s: float
    run: Callable[[Campaign], dict]
    default: bool = True

    @property
    def derived(self) -> bool:
        """Computed from the other parts' files (:data:`DERIVED`): run every time (a marker would leave it stale)."""
        return self.name in DERIVED


@dataclass
class Campaign:
    """Where and on what the campaign runs."""

    device: str
    tiny: bool
    work: Path
    out: Path
    spec: str | None = None  # the lrsim.gpu device spec that prices this device
    memory_gib: float | None = None
    log: list = field(default_factory=list)
    deadline: float | None = None  # time.perf_counter() at which --budget-s ends: a subprocess part stops there
    offline: bool = False  # derived parts re-run on a machine without the device

    @property
    def graphs(self) -> bool:
        """Whether the traces run on CUDA graphs (``lrref --cuda-graphs``): on a CUDA device, the paper's shapes."""
        return self.device.startswith("cuda") and not self.tiny

    @property
    def archs(self) -> tuple[str, ...]:
        return ("tiny",) if self.tiny else PAPER_ARCHS

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """(target, draft) pairs to trace; the first, the paper's, first of all."""
        return (("tiny", "tiny"),) if self.tiny else PAIRS

    @property
    def traces(self) -> TraceSetup:
        return TINY_TRACES if self.tiny else TRACES


# --- the device ---------------------------------------------------------------------------------------


def torch_device_facts(device: str) -> dict:
    """Name, memory, versions of the torch device (and ``nvidia-smi`` on a GPU)."""
    import torch
    import transformers

    from lrref.host.cpu import cpu_model
    from lrref.profiling.timing import device_name

    dev = torch.device(device)
    facts = {"device": device_name(dev), "torch": torch.__version__, "transformers": transformers.__version__,
             "cpu": cpu_model(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d", time.gmtime())}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        facts |= {"memory_mib": p.total_memory // 2 ** 20, "sms": p.multi_processor_count, "cuda": torch.version.cuda,
                  "capability": f"{p.major}.{p.minor}"}
        smi = shutil.which("nvidia-smi")
        if smi:
            r = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=60, check=False)
            facts["nvidia_smi"] = r.stdout[-20000:]
    return facts


def part_env(c: Campaign) -> dict:
    facts = torch_device_facts(c.device)
    (c.work / "env.json").write_text(json.dumps(facts, indent=1) + "\n")
    return {"device": facts["device"], "files": ["env.json"]}


def part_peaks(c: Campaign) -> dict:
    """bf16 matmul (n^3) and device-to-device copy, best of a few (float32 on a CPU, small sizes with --tiny)."""
    import torch

    from lrref.profiling.timing import synchronize

    dev = torch.device(c.device)
    n, mib = (512, 64) if c.tiny else (8192, 4096)
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    src = torch.empty(mib * 2 ** 20 // 2, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)

    def best(fn, reps: int = 5) -> float:
        fn()
        synchronize(dev)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            synchronize(dev)
            ts.append(time.perf_counter() - t0)
        return min(ts)

    t_mm, t_cp = best(lambda: a @ b), best(lambda: dst.copy_(src))
    out = {"matmul_n": n, "matmul_dtype": str(dtype), "matmul_tflops": 2 * n ** 3 / t_mm / 1e12,
           "copy_bytes": 2 * src.numel() * 2, "copy_tb_s": 2 * src.numel() * 2 / t_cp / 1e12,
           "note": "copy: bytes read + written per second; best of 5 after one warm-up"}
    (c.work / "peaks.json").write_text(json.dumps(out, indent=1) + "\n")
    return {"files": ["peaks.json"], **{k: round(v, 3) for k, v in out.items() if isinstance(v, float)}}


# --- lrref profile and kernel sums ------------------------------------------------------------------


def contexts_that_fit(c: Campaign, arch: str, grid: dict) -> tuple[int, ...]:
    """The grid's contexts whose one-row prefill plus the largest pass fits (lrsim.gpu's memory model)."""
    if c.tiny or c.memory_gib is None:
        return grid["context"]
    from lrsim.gpu.archs import load_arch
    from lrsim.gpu.engines import get_engine
    from lrsim.gpu.model import memory_need

    a = load_arch(arch)
    cap = get_engine("hf-eager").usable_memory * c.memory_gib * 2 ** 30  # the torch backend's eager forward
    ok = tuple(L for L in grid["context"] if float(memory_need(a, L, 1, max(grid["positions"]))) <= cap
               and (a.max_positions is None or L + max(grid["positions"]) <= a.max_positions))
    return ok or grid["context"][:1]


def profile_command(c: Campaign, arch: str) -> list[str]:
    g = TINY if c.tiny else GRID
    return lrref_profile(c, (arch,), g | {"context": contexts_that_fit(c, arch, g)}, f"profile-{arch}.json",
                         (1, 2) if c.tiny else (WARMUP, REPEATS))


def lrref_profile(c: Campaign, archs: tuple[str, ...], grid: dict, out: str, passes: tuple[int, int]) -> list[str]:
    """``lrref profile`` of ``archs`` over ``grid`` into ``work/OUT``, ``passes`` = (warm-up, timed) per shape."""
    cmd = [sys.executable, "-m", "lrref.cli", "profile", "--device", c.device, "--arch", ",".join(archs), "--quiet",
           "--context", ",".join(map(str, grid["context"])), "--batch", ",".join(map(str, grid["batch"])),
           "--positions", ",".join(map(str, grid["positions"])), "--out", str(c.work / out),
           "--warmup", str(passes[0]), "--repeats", str(passes[1])]
    return cmd + (["--threads", "1"] if c.tiny else [])


def run_logged(c: Campaign, cmd: list[str], timeout: float, log: str) -> subprocess.CompletedProcess:
    """Run a subprocess in a process group of its own, its output to ``work/LOG``; a failure raises with the log's
    tail.  Past ``timeout`` or the end of ``--budget-s`` the whole group is killed (lr-async's draft worker too, so
    no process keeps the GPU's memory) and it raises: what the part wrote so far still goes into the archive."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the caller's entries kept
    if c.deadline is not None:
        timeout = min(timeout, max(1.0, c.deadline - time.perf_counter()))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=os.environ | {"PYTHONPATH": path}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        (c.work / log).write_text(f"$ {' '.join(cmd)}\n{out}\n{err}\nstopped after {timeout:.0f} s\n")
        raise RuntimeError(f"stopped after {timeout:.0f} s (3x its stated time, or the end of --budget-s): "
                           f"{' '.join(cmd[2:6])} ...") from None
    (c.work / log).write_text(f"$ {' '.join(cmd)}\n{out}\n{err}")
    if proc.returncode:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd[2:6])} ...: {(err or out)[-400:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@contextlib.contextmanager
def quiet_stderr():
    """Silence the C++ profiler's per-session lines on file descriptor 2 (Python's errors still propagate)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def profiled_ms(model, cache, shape, gen, dev) -> float:
    """One warm-up pass, then 3 passes under torch.profiler: ms per pass of the device's kernels (each kernel event
    once; memcpy/memset included), or on a CPU the ops' self times (a smoke test, not kernel sums)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from lrref.profiling import timing

    cuda = dev.type == "cuda"
    timing.time_passes(model, cache, shape, 1, 0, gen, dev)
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as prof:
        timing.time_passes(model, cache, shape, 0, 3, gen, dev)
    if cuda:
        total_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    else:
        total_us = sum(e.self_cpu_time_total for e in prof.key_averages())
    return round(total_us / 3 / 1000, 4)  # us over 3 passes -> ms per pass


def kernel_sums(c: Campaign, arch: str) -> dict:
    """Kernel sums (ms) of every shape of the kernel grid, as a ``kernel_sum`` profile (CPU: op self times)."""
    import torch

    from lrref.archs import load_arch
    from lrref.backends.hf_random import build_model
    from lrref.profiling import timing
    from lrsim.latency.profile import ArchProfile, Profile, Provenance, write_profile

    g = TINY if c.tiny else KERNEL_GRID
    ctx = contexts_that_fit(c, arch, g)
    dev = torch.device(c.device)
    dtype = "float32" if dev.type == "cpu" else "bfloat16"
    a = load_arch(arch)
    model = build_model(a, dtype, dev)
    gen = torch.Generator().manual_seed(0)
    base = timing.prefill_row(model, max(ctx), 1024, gen, dev)
    ms, notes = {}, []
    for L in ctx:
        for b in g["batch"]:
            cache, failed = timing._oom_safe(lambda L=L, b=b: timing.rows(model, base, L, b))
            for q in g["positions"]:
                got, failed = (None, True) if failed else timing._oom_safe(
                    lambda L=L, b=b, q=q, cache=cache: profiled_ms(model, cache, timing.Shape(L, b, q), gen, dev))
                ms[(L, b, q)] = got
                if failed:
                    notes.append(f"context {L} batch {b}: out of memory on {timing.device_name(dev)}")
            cache = None
    grid = tuple(tuple(tuple(ms[(L, b, q)] for q in g["positions"]) for b in g["batch"]) for L in ctx)
    ap = ArchProfile(name=arch, params=timing.parameters(model), layers=a.layers,
                     kv_bytes_per_token=a.kv_bytes_per_token(dtype), context=ctx, batch=g["batch"],
                     positions=g["positions"], ms=grid, missing=tuple(dict.fromkeys(notes)))
    facts = torch_device_facts(c.device)
    stat = ("sum of device kernel times over 3 profiled passes / 3" if dev.type == "cuda"
            else "sum of CPU op self times over 3 profiled passes / 3 (smoke test: not kernel sums)")
    prov = Provenance(device=facts["device"], engine=f"transformers {facts['transformers']} eager forward, SDPA, "
                      "DynamicCache; torch.profiler", dtype=dtype, date=facts["date"],
                      command=" ".join(sys.argv), torch=facts["torch"], transformers=facts["transformers"],
                      warmup=1, repeats=3, statistic=stat)
    kind = "kernels" if dev.type == "cuda" else "cpu-ops"
    write_profile(Profile(name=f"{kind}-{arch}", timed="kernel_sum", provenance=prov, archs={arch: ap},
                          description=f"{facts['device']}: kernel sums"),
                  c.work / f"kernels-{arch}.json")
    return {"files": [f"kernels-{arch}.json"], "points": sum(v is not None for v in ms.values())}


# --- traces, comparison, pack, validation -------------------------------------------------------------


def trace_command(c: Campaign, target: str, draft: str) -> list[str]:
    """``lrref bench --random-weights`` of one pair in ar, lr-sync and lr-async (no ``--require-idle``: a refusal
    would spend the window, and each trace's header records what else ran, ``hardware.load``)."""
    ts, out = c.traces, c.work / "traces" / f"{target}+{draft}"
    cmd = [sys.executable, "-m", "lrref.cli", "bench", "--random-weights", f"{target},{draft}", "--device", c.device,
           "--modes", ",".join(CAMPAIGN_MODES), "--verifier", "random", "--threshold", str(TRACE_P), "--out", str(out),
           "--n", str(ts.n), "--max-tokens", str(ts.tokens), "--max-step-tokens", str(ts.step),
           "--gamma", str(ts.gamma), "--prompt-tokens", str(ts.prompt), "--warmup", str(ts.warmup)]
    return cmd + (["--threads", "1", "--async-threads", "1,1"] if c.tiny else []) + (["--cuda-graphs"] if c.graphs
                                                                                      else [])


def points_archs(c: Campaign) -> tuple[str, ...]:
    """The paper pair's architectures, once each (the tiny pair is one)."""
    return tuple(dict.fromkeys(c.pairs[0]))


def part_trace_points(c: Campaign) -> dict:
    """``lrref profile`` (wall) of the shapes the paper pair's traces ran, so they replay on a measured profile."""
    cmd = lrref_profile(c, points_archs(c), c.traces.grid(), "trace-points.json", (POINT_WARMUP, POINT_REPEATS))
    r = run_logged(c, cmd, max(120.0, 3 * estimate_points_s(c)), "trace-points.log")
    return {"files": ["trace-points.json"], "grid": c.traces.grid(), "summary": r.stdout.strip()[-300:]}


def pair_traces(c: Campaign, target: str, draft: str) -> list:
    """The pair's traces in this work folder, ar first (none when the pair was not traced)."""
    from lrsim.trace import read_trace

    folder = c.work / "traces" / f"{target}+{draft}"
    paths = [folder / f"trace-{m}.jsonl" for m in CAMPAIGN_MODES]
    return [read_trace(p) for p in paths if p.is_file()]


def profile_archs(traces: list) -> tuple[str, str]:
    """The (target, draft) architectures the traces ran, as a profile names them: the models are ``random:ARCH``
    and the header's ``config.random_weights`` names ARCH; every trace must name the same pair."""
    names = {(rw.get("target"), rw.get("draft")) for t in traces
             for rw in [(t.header.config or {}).get("random_weights") or {}]}
    if len(names) != 1 or None in next(iter(names)):
        raise UsageError(f"traces of {[str(t.path) for t in traces]}: not one random-weight pair ({sorted(names)})")
    return next(iter(names))


def modelled_profile(c: Campaign, graphs: bool = False):
    """This device's modelled profile in the hf-eager engine: ``model:SPEC:eager`` (``:hf-eager`` once the engines
    land; ``:eager`` stays its alias); for traces on CUDA graphs its kernel sums, ``model:SPEC:hf-eager:kernel``
    (a replayed graph launches nothing from the host).  With ``--tiny`` the same model of the tiny shape on a grid
    inside its 512 positions (the whole-device grid's 1K context is beyond it, so it prices nothing near the tiny
    prompt)."""
    spec = c.spec or "h100-sxm"
    if not c.tiny:
        return f"model:{spec}:hf-eager:kernel" if graphs else f"model:{spec}:eager"
    from lrsim.gpu.synthesize import Grid, synthesize

    return synthesize(f"{spec}:eager", "tiny", grid=Grid(context=(0, 256)))


def on_graphs(traces: list) -> bool:
    """Whether every trace ran on CUDA graphs (its header's ``config.backend_info``, ``lrref --cuda-graphs``)."""
    return bool(traces) and all(((t.header.config or {}).get("backend_info") or {}).get("cuda_graphs") for t in traces)


def trace_profiles(c: Campaign, paper: bool, graphs: bool = False) -> list[tuple[str, str, object]]:
    """(label, name, profile) that price a pair's traces: ``model``, this device's modelled profile (its kernel sums
    for traces on CUDA graphs; lr-async's draft process runs eager even then), and ``points``, the measured trace
    points (the paper pair's, when that part ran; eager wall times, an upper bound for graph replays)."""
    prof = modelled_profile(c, graphs)
    out = [("model", prof if isinstance(prof, str) else f"{prof.name} (tiny grid)", prof)]
    if paper and (c.work / "trace-points.json").is_file():
        out.append(("points", "trace-points.json", str(c.work / "trace-points.json")))
    return out


def measured_tps(trace, skip: int = 0) -> tuple[float | None, int, float]:
    """Tokens per second of a trace's finished requests (their tokens over their seconds), tokens, seconds;
    ``skip`` leaves out the first requests (those that ran while the engine warmed up)."""
    done = [r for r in sorted(trace.requests, key=lambda r: r.start) if r.end > r.start][skip:]
    tokens, seconds = sum(r.output_tokens for r in done), sum(r.end - r.start for r in done)
    return (tokens / seconds if seconds else None), tokens, seconds


def request_tps(trace) -> list[float]:
    """Each finished request's tokens per second, in the order they ran."""
    return [r.output_tokens / (r.end - r.start) for r in sorted(trace.requests, key=lambda r: r.start)
            if r.end > r.start]


def predict_trace(traces: list, t, profile, archs: tuple[str, str], steps: int) -> dict:
    """``t`` predicted by ``lrsim.predict`` with timing from ``profile`` (``archs``: target and draft in it, the
    engine's prefill), behaviour from all the pair's traces (the random verifier's acceptance is the same p in every
    mode, and an ar trace alone has none) and ``t``'s recorded setting."""
    import lrsim
    from lrsim.errors import InputError
    from lrsim.trace import recorded_setting

    s = recorded_setting(t.header)
    try:
        hw = lrsim.hardware(profile, *archs, prefill=ENGINE_PREFILL)
        p = lrsim.predict(s.mode, s.k1, s.k2, s.width, traces=traces, hardware=hw, steps=steps, bootstrap=0)
    except InputError as e:  # the profile cannot price a pass: a row that says why, not a failed part
        return {"predicted_tps": None, "failed": str(e)[:400]}
    return {"predicted_tps": p.raw.tokens_per_second, "predicted_speedup": p.speedup, "alpha1": p.alpha1,
            "notes": p.notes}


def compare_trace_rows(c: Campaign) -> list[dict]:
    """One row per traced pair, mode and profile: measured tokens/s, predicted, error (predicted / measured - 1);
    speedups over the pair's ar trace, measured and predicted."""
    rows = []
    for i, (target, draft) in enumerate(c.pairs):
        traces = pair_traces(c, target, draft)
        if not traces:
            continue
        archs = profile_archs(traces)
        ar = next((t for t in traces if t.header.mode == "ar"), None)
        ar_tps, later_ar = (measured_tps(ar)[0], measured_tps(ar, skip=1)[0]) if ar else (None, None)
        for label, name, prof in trace_profiles(c, paper=i == 0, graphs=on_graphs(traces)):
            for t in traces:
                tps, tokens, seconds = measured_tps(t)
                pred = predict_trace(traces, t, prof, archs, 2000 if c.tiny else PREDICT_STEPS)
                later = measured_tps(t, skip=1)[0]
                err = pred["predicted_tps"] / tps - 1 if pred["predicted_tps"] is not None and tps else None
                err_later = (pred["predicted_tps"] / later - 1 if pred["predicted_tps"] is not None and later
                             else None)
                rows.append({"pair": f"{target}+{draft}", "mode": t.header.mode, "profile": label, "hardware": name,
                             "cuda_graphs": on_graphs([t]),
                             "archs": list(archs), "tokens": tokens, "seconds": round(seconds, 3),
                             "measured_tps": tps, "measured_speedup": tps / ar_tps if tps and ar_tps else None,
                             "request_tps": request_tps(t), "measured_tps_after_first": later,
                             "measured_speedup_after_first": later / later_ar if later and later_ar else None}
                            | pred | {"error": err, "error_after_first": err_later})
    return rows


def part_compare_traces(c: Campaign) -> dict:
    """The traces against lrsim's predictions: ``compare-traces.json`` and a line per row."""
    rows = compare_trace_rows(c)
    if not rows:
        raise UsageError(f"no traces in {c.work / 'traces'}: run the traces parts first")
    doc = {"spec": c.spec, "engine": "hf-eager", "prefill": ENGINE_PREFILL, "rows": rows,
           "note": "measured: output tokens over request seconds of each trace (after_first: without each "
                   "mode's first request, which runs while the engine warms up); predicted: lrsim.predict with "
                   "behaviour from the pair's traces, timing from the profile"
                   + ("; smoke test on a CPU priced as an H100: the numbers mean nothing" if c.tiny else "")}
    (c.work / "compare-traces.json").write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        got = (f"predicted {r['predicted_tps']:.2f}, error {100 * r['error']:+.1f}%" if r["error"] is not None
               else f"not predicted: {r.get('failed', 'no finished request')[:160]}")
        later = (f"; after the first request {r['measured_tps_after_first']:.2f}, error "
                 f"{100 * r['error_after_first']:+.1f}%" if r["error_after_first"] is not None else "")
        print(f"  {r['pair']} {r['mode']:<8} on {r['profile']:<6} ({r['hardware']}): measured "
              f"{r['measured_tps'] or 0:.2f} tok/s, {got}{later}")
    return {"files": ["compare-traces.json"], "rows": len(rows),
            "errors": {f"{r['mode']} {r['profile']}": None if r["error"] is None else round(r["error"], 4)
                       for r in rows if r["pair"] == "+".join(c.pairs[0])},
            "errors_after_first": {f"{r['mode']} {r['profile']}": None if r["error_after_first"] is None
                                   else round(r["error_after_first"], 4)
                                   for r in rows if r["pair"] == "+".join(c.pairs[0])}}


def compare_rows(c: Campaign) -> list[dict]:
    """Measured (this device) vs the hardware model for its spec, per profile and architecture."""
    import numpy as np

    from lrsim.gpu.fit import load_fit, predict_ms, profile_points
    from lrsim.latency.profile import read_profile

    eff, _ = load_fit()
    rows = []
    files = sorted(c.work.glob("profile-*.json")) + sorted(c.work.glob("kernels-*.json"))
    for f in files + sorted(c.work.glob("trace-points.json")):
        for p in profile_points(read_profile(f)):
            if p.arch == "tiny" and not c.tiny:
                continue
            pred = predict_ms(p, eff, c.spec or "h100-sxm")
            rel = pred / p.ms - 1
            rows.append({"file": f.name, "arch": p.arch, "timed": p.timed, "spec": c.spec or "h100-sxm",
                         "points": int(rel.size), "mean_abs": float(np.mean(np.abs(rel))),
                         "worst_abs": float(np.max(np.abs(rel))), "median": float(np.median(rel))})
    return rows


def h100_rows(c: Campaign) -> list[dict]:
    """On an H100: this run's kernel sums against the embedded H100 profiles at the shared grid points."""
    if c.spec != "h100-sxm":
        return []
    from lrsim.gpu.fit import PROFILE_DIR, profile_points
    from lrsim.latency.profile import read_profile

    rows = []
    for f in sorted(c.work.glob("kernels-*.json")):
        for p in profile_points(read_profile(f)):
            for name in ("h100-ctx0-kernel", "h100-context-kernel"):
                ref = read_profile(PROFILE_DIR / f"{name}.json")
                if p.arch not in ref.archs:
                    continue
                pairs = [(m, ref.time_ms(p.arch, L, b, q)) for L, b, q, m in zip(p.L, p.b, p.q, p.ms)
                         if _priced(ref, p.arch, L, b, q)]
                if pairs:
                    rel = [m / r - 1 for m, r in pairs]
                    rows.append({"file": f.name, "arch": p.arch, "against": name, "points": len(rel),
                                 "mean_abs": sum(map(abs, rel)) / len(rel), "worst_abs": max(map(abs, rel))})
    return rows


def _priced(ref, arch: str, L: float, b: float, q: float) -> bool:
    a = ref.arch(arch)
    if (L, b, q) not in {(x, y, z) for x in a.context for y in a.batch for z in a.positions}:
        return False
    try:
        ref.time_ms(arch, L, b, q)
        return True
    except ValueError:
        return False


def part_compare(c: Campaign) -> dict:
    rows, h100 = compare_rows(c), h100_rows(c)
    doc = {"spec": c.spec, "model_vs_measured": rows, "this_run_vs_embedded_h100": h100,
           "note": "model: lrsim/data/gpus/fit-h100.json on this device's spec; nothing fitted on these points"
                   + ("; smoke test on a CPU priced as an H100: the numbers mean nothing" if c.tiny else "")}
    (c.work / "compare.json").write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        print(f"  model vs {r['file']} {r['arch']} ({r['timed']}): {r['points']} points, mean |error| "
              f"{100 * r['mean_abs']:.1f}%, worst {100 * r['worst_abs']:.1f}%, median {100 * r['median']:+.1f}%")
    return {"files": ["compare.json"], "rows": len(rows), "h100_rows": len(h100)}


def part_pack(c: Campaign) -> dict:
    """Copy every output into the pack folder with a manifest of the campaign's provenance."""
    c.out.mkdir(parents=True, exist_ok=True)
    files = []
    for p in sorted(c.work.rglob("*")):
        if p.is_file() and p.parent.name != "parts" and p.name != "resumed-manifest.json":
            dst = c.out / p.relative_to(c.work)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst)
            files.append(str(p.relative_to(c.work)))
    markers = {p.name.rsplit(".", 2)[0]: json.loads(p.read_text()) | {"status": p.name.rsplit(".", 2)[1]}
               for p in sorted((c.work / "parts").glob("*.json"))}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=False)
    run = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "git_commit": commit.stdout.strip() or None,
           "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "device": c.device}
    run |= {"offline": "derived parts only, on a machine without the device"} if c.offline else {}
    manifest = {"format": "lr-gpu-campaign", "version": 1, "device": c.device, "spec": c.spec, "tiny": c.tiny,
                **run, "runs": pack_runs(c) + [run], "parts": markers, "files": files}
    (c.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return {"files": files + ["manifest.json"], "out": str(c.out)}


def pack_runs(c: Campaign) -> list[dict]:
    """The commands that built the pack before this one (its manifest's ``runs``, or the one it names; the copy
    restored by ``--resume-from`` counts), without this command's earlier entries: a pack refreshed after every part
    lists each command once."""
    for man_path in (c.out / "manifest.json", c.work / "resumed-manifest.json"):
        if man_path.is_file():
            man = json.loads(man_path.read_text())
            runs = man.get("runs") or [{k: man.get(k) for k in ("date", "git_commit", "command", "device")}]
            this = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
            return [r for r in runs if r.get("command") != this]
    return []


def part_validate(c: Campaign) -> dict:
    cmd = [sys.executable, str(ROOT / "studies" / "gpu_model_validation.py"), "--profiles", str(c.out),
           "--out", str(c.out / "validation")] + (["--device", c.spec] if c.spec else ["--device", "h100-sxm"])
    r = run_logged(c, cmd, 600, "validate.log")
    shutil.copy2(c.work / "validate.log", c.out / "validate.log")  # the pack part ran before this one
    return {"summary": [ln for ln in r.stdout.splitlines() if ln.startswith(("held-out", "other device"))]}


def part_paper_check(c: Campaign) -> dict:
    run_logged(c, [sys.executable, str(ROOT / "studies" / "paper_check.py"), "--out", str(c.out / "paper_check")],
               3600, "paper_check.log")
    return {"files": ["paper_check/"]}


# --- the plan: parts, their stated times, the runner ---------------------------------------------------


def _model_setup(c: Campaign, arch: str):
    from lrsim.gpu.archs import load_arch
    from lrsim.gpu.devices import get_device
    from lrsim.gpu.fit import load_fit
    from lrsim.gpu.model import Setup

    return Setup(load_arch(arch), get_device(c.spec or "h100-sxm"), load_fit()[0])


def build_s(s) -> float:
    """Stated seconds to build a model with random weights on the device: ~1 s per 2 GB of bf16 weights."""
    return s.arch.params * 2 / 2e9


def estimate_grid_s(c: Campaign, arch: str, grid: dict, passes: int) -> float:
    """Seconds to time ``passes`` passes of every shape that fits, plus the prefill, the process and the build."""
    if c.tiny:
        return 10.0
    import numpy as np

    from lrsim.gpu.model import fits, forward_s

    s = _model_setup(c, arch)
    ctx = contexts_that_fit(c, arch, grid)
    L, b, q = np.meshgrid(ctx, grid["batch"], grid["positions"], indexing="ij")
    wall = forward_s(s, L, b, q, "wall") * fits(s, L, b, q)
    prefill = sum(float(forward_s(s, x, 1, 1024, "kernel_sum")) for x in range(0, max(ctx), 1024))
    return float(passes * wall.sum() + prefill + PROCESS_S + build_s(s))


def estimate_points_s(c: Campaign) -> float:
    """``trace-points``: both architectures' grids in one process."""
    archs = points_archs(c)
    return sum(estimate_grid_s(c, a, c.traces.grid(), POINT_WARMUP + POINT_REPEATS) for a in archs) \
        - PROCESS_S * (len(archs) - 1) * (not c.tiny)


def trace_decode_s(c: Campaign, target: str, draft: str) -> dict[str, float]:
    """Each mode's decode seconds by the hardware model: ``ar`` one target pass per token; LR ``ar``'s over the
    paper's closed form h at alpha1 = p, c1 = the draft's pass over the target's (eager wall time at the decode's
    middle context) and k1 as lrref records it (lr-sync gamma + 1, lr-async gamma): h prices a batch of k1 rows
    as one pass, as the model's launch-bound eager passes nearly are."""
    from lrsim import theory
    from lrsim.gpu.model import forward_s
    from lrsim.modes import LR_DECODE_MODES, lookahead_schedule
    from lrsim.prediction.outcome import TINY_C2

    ts = c.traces
    ctx = ts.prompt + ts.tokens / 2
    timed = "kernel_sum" if c.graphs else "wall"  # a replayed graph's pass: its kernels, no host launches
    tt, td = (float(forward_s(_model_setup(c, a), ctx, 1, 1, timed)) for a in (target, draft))
    ar = (ts.n + ts.warmup) * ts.tokens * tt  # the warm-up request decodes as the timed ones
    lr = {m: lookahead_schedule(m, ts.gamma) for m in CAMPAIGN_MODES if m in LR_DECODE_MODES}  # gamma -> k1
    return {"ar": ar} | {m: ar / float(theory.h(TRACE_P, td / tt, s.k1, 0.5, TINY_C2, 1, s.mode))
                         for m, s in lr.items()}


def estimate_traces_s(c: Campaign, target: str, draft: str) -> float:
    """Every mode's decode plus the start: two processes (the bench, lr-async's draft), the target built once and
    the draft twice (lr-sync's in the bench, lr-async's in its process)."""
    if c.tiny:
        return 15.0
    t, d = _model_setup(c, target), _model_setup(c, draft)
    return (sum(trace_decode_s(c, target, draft).values()) + 2 * PROCESS_S + build_s(t) + 2 * build_s(d)
            + GRAPH_CAPTURE_S * c.graphs)


def traces_what(c: Campaign, target: str, draft: str) -> str:
    """What the traces part runs, and where its stated time goes (a warning when the paper pair's is past
    ``TRACES_BUDGET_S``: then ``TRACES`` must be cut again)."""
    ts = c.traces
    what = (f"lrref bench --random-weights {target},{draft}: {', '.join(CAMPAIGN_MODES)}, p = {TRACE_P}, "
            f"{ts.n} x {ts.tokens} tokens")
    if c.tiny:
        return what
    dec, total = trace_decode_s(c, target, draft), estimate_traces_s(c, target, draft)
    over = (target, draft) == c.pairs[0] and total > TRACES_BUDGET_S
    return what + " (decode " + ", ".join(f"{m} {s:.0f} s" for m, s in dec.items()) + \
        f", start {total - sum(dec.values()):.0f} s)" + (f"; PAST its {TRACES_BUDGET_S:.0f} s budget" if over else "")


def parts(c: Campaign) -> list[Part]:
    """Every part in its order: the paper pair's traces, the points that price them and their prediction first
    (the first GPU window's minutes), then the profiles, kernel sums, the other pair's traces, the rest."""
    (t0, d0), g = c.pairs[0], TINY if c.tiny else GRID
    out = [Part("env", "device, memory, versions, nvidia-smi", 5, part_env),
           _traces_part(c, t0, d0),
           Part("trace-points", f"lrref profile (wall) of {', '.join(points_archs(c))} at the traces' shapes: "
                + "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in c.traces.grid().items()),
                estimate_points_s(c), part_trace_points),
           Part("compare-traces", f"lrsim.predict of each trace on model:{c.spec or 'h100-sxm'}:eager and the "
                "trace points: measured vs predicted tokens/s", 10, part_compare_traces),
           Part("peaks", "achieved bf16 matmul and copy bandwidth", 30, part_peaks)]
    for a in c.archs:
        out.append(Part(f"profile-{a}", f"lrref profile --device {c.device} --arch {a} (wall)",
                        estimate_grid_s(c, a, g, WARMUP + REPEATS),
                        lambda c, a=a: {"files": [f"profile-{a}.json"]} | _run_profile(c, a)))
        out.append(Part(f"kernels-{a}", f"kernel sums of {a} under torch.profiler",
                        2 * estimate_grid_s(c, a, TINY if c.tiny else KERNEL_GRID, 4),
                        lambda c, a=a: kernel_sums(c, a)))
    out += [_traces_part(c, t, d) for t, d in c.pairs[1:]]
    out += [Part("compare", "measured vs the hardware model (and vs the embedded H100 profiles on an H100)", 5,
                 part_compare),
            Part("pack", f"copy into {c.out} with manifest.json", 5, part_pack),
            Part("validate", "studies/gpu_model_validation.py --profiles on the pack", 20, part_validate),
            Part("paper-check", "studies/paper_check.py into the pack (4 min on 2 cores)", 300, part_paper_check,
                 default=False)]
    return out


def _traces_part(c: Campaign, target: str, draft: str) -> Part:
    return Part(f"traces-{target}", traces_what(c, target, draft), estimate_traces_s(c, target, draft),
                lambda c, t=target, d=draft: _run_traces(c, t, d))


def _run_profile(c: Campaign, arch: str) -> dict:
    est = estimate_grid_s(c, arch, TINY if c.tiny else GRID, WARMUP + REPEATS)
    r = run_logged(c, profile_command(c, arch), max(120.0, 3 * est), f"profile-{arch}.log")
    return {"summary": r.stdout.strip()[-300:]}


def _run_traces(c: Campaign, target: str, draft: str) -> dict:
    out = c.work / "traces" / f"{target}+{draft}"
    run_logged(c, trace_command(c, target, draft), max(120.0, 3 * estimate_traces_s(c, target, draft)),
               f"traces-{target}.log")
    return {"files": [str(p.relative_to(c.work)) for p in sorted(out.glob("*"))], "setup": asdict(c.traces)}


def run_part(c: Campaign, p: Part, force: bool) -> str:
    """Run one part unless its marker says it is done (a derived part always runs); write the marker."""
    done = c.work / "parts" / f"{p.name}.done.json"
    done.parent.mkdir(exist_ok=True)
    if done.is_file() and not force and not p.derived:
        return "skipped (done)"
    t0 = time.perf_counter()
    try:
        result = p.run(c)
    except Exception as e:  # noqa: BLE001  (a part that fails is recorded; the others still run)
        (c.work / "parts" / f"{p.name}.failed.json").write_text(json.dumps({"error": str(e)[-2000:]}, indent=1) + "\n")
        return f"FAILED after {time.perf_counter() - t0:.1f} s: {str(e).splitlines()[0][:300] if str(e) else e!r}"
    wall = time.perf_counter() - t0
    (c.work / "parts" / f"{p.name}.failed.json").unlink(missing_ok=True)
    done.write_text(json.dumps({"status": "done", "wall_s": round(wall, 1), "estimate_s": round(p.estimate_s, 1),
                                "what": p.what, "result": result}, indent=1) + "\n")
    return f"done in {wall:.1f} s (stated {p.estimate_s:.0f} s)"


def resume_from(c: Campaign, pack: Path) -> list[str]:
    """Restore a committed pack (an earlier session's, maybe on another machine) into the work folder: its files,
    and a marker for each measuring part its manifest says is done, so those parts are skipped.  Returns their
    names.  Files already in the work folder are kept (they are this machine's)."""
    man_path = pack / "manifest.json"
    if not man_path.is_file():
        raise UsageError(f"--resume-from {pack}: no manifest.json there (not a campaign pack)")
    man = json.loads(man_path.read_text())
    if man.get("format") != "lr-gpu-campaign":
        raise UsageError(f"--resume-from {pack}: manifest format {man.get('format')!r}, "
                         "not lr-gpu-campaign")
    if man.get("spec") != c.spec:
        raise UsageError(f"--resume-from {pack}: packed on {man.get('spec')}, this device is {c.spec}")
    for f in man.get("files", []):
        src, dst = pack / f, c.work / f
        if src.is_file() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (c.work / "resumed-manifest.json").write_text(json.dumps(man, indent=1) + "\n")  # its runs join the new pack's
    done = []
    (c.work / "parts").mkdir(exist_ok=True)
    for name, m in man.get("parts", {}).items():
        if m.get("status") == "done" and name not in DERIVED:
            marker = c.work / "parts" / f"{name}.done.json"
            if not marker.exists():
                marker.write_text(json.dumps({k: v for k, v in m.items() if k != "status"}
                                             | {"status": "done", "resumed_from": str(pack)}, indent=1) + "\n")
            done.append(name)
    return done


def write_archive(c: Campaign, dest: Path) -> None:
    """The pack refreshed (:func:`part_pack`: the files so far, a manifest of the markers so far), then the work
    folder (markers and logs too) and the pack as one ``.tar.gz``, replaced atomically: written after every part, so
    a command killed at its time limit still leaves everything finished before it, with a pack to commit."""
    import tarfile

    part_pack(c)
    with atomic_output(dest) as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
        tar.add(c.work, arcname="work")
        tar.add(c.out, arcname="pack")


def setup(a: argparse.Namespace) -> Campaign:
    """The campaign for ``--device``: its spec and memory (a CUDA device), its folders."""
    spec, mem = a.spec, None
    if a.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available() and a.list:  # a plan for a device not here: its spec's memory
            from lrsim.gpu.devices import get_device

            spec = spec or "h100-sxm"
            return Campaign(a.device, a.tiny, a.work or ROOT / "runs" / f"gpu-campaign-{spec}",
                            a.out or ROOT / "studies" / "data" / f"gpu-{spec}", spec, get_device(spec).memory_gib)
        if not torch.cuda.is_available() and offline_parts(a):  # derived parts on another machine: the files only
            spec = spec or pack_spec(a.resume_from)
            if not spec:
                raise UsageError("without a CUDA device the derived parts need --spec or --resume-from PACK")
            return replace(_campaign(a, spec, None), offline=True)
        if not torch.cuda.is_available():
            raise UsageError(f"--device {a.device}: torch sees no CUDA device (on a machine without it, "
                             f"--parts {','.join(DERIVED)} re-derives a pack's comparisons)")
        from lrsim.gpu.devices import device_for_name

        name = torch.cuda.get_device_name(torch.device(a.device))
        spec = spec or device_for_name(name)
        mem = torch.cuda.get_device_properties(torch.device(a.device)).total_memory / 2 ** 30
    return _campaign(a, spec, mem)


def _campaign(a: argparse.Namespace, spec: str | None, mem: float | None) -> Campaign:
    label = spec or ("cpu-tiny" if a.tiny else a.device.replace(":", ""))
    out = a.out or ROOT / "studies" / "data" / f"gpu-{label}"
    work = a.work or ROOT / "runs" / f"gpu-campaign-{label}"
    work.mkdir(parents=True, exist_ok=True)
    return Campaign(a.device, a.tiny, work, out, spec, mem)


def offline_parts(a: argparse.Namespace) -> bool:
    """Whether ``--parts`` names derived parts only: they read a pack's files, so they run without the device."""
    return bool(a.parts) and set(a.parts.split(",")) <= set(DERIVED)


def pack_spec(pack: Path | None) -> str | None:
    """The device spec a committed pack was measured on (its manifest's ``spec``), if there is one."""
    man = pack / "manifest.json" if pack else None
    return json.loads(man.read_text()).get("spec") if man and man.is_file() else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="torch device: cuda, cuda:N (or cpu with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="the smoke test: the tiny config, a few shapes, seconds")
    ap.add_argument("--parts", help="comma-separated parts to run (default: every default part; --list shows them)")
    ap.add_argument("--list", action="store_true", help="print the parts and their stated times, run nothing")
    ap.add_argument("--force", action="store_true", help="redo parts that are done")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no part whose stated time would end past this many seconds, and stop a running "
                         "subprocess part there (derived parts and the archive still run)")
    ap.add_argument("--spec", help="lrsim.gpu device spec of this device (default: from its name)")
    ap.add_argument("--work", type=Path, help="working folder (default runs/gpu-campaign-<device>)")
    ap.add_argument("--out", type=Path, help="the pack (default studies/data/gpu-<device>)")
    ap.add_argument("--archive", type=Path, metavar="FILE.tar.gz",
                    help="after every part, write the work folder and the pack to this archive (atomically): on a "
                         "lent machine put it under $OUT, so a command killed at its limit still returns its data")
    ap.add_argument("--resume-from", type=Path, metavar="PACK",
                    help="a committed pack of an earlier campaign on this device: its finished measuring parts are "
                         "restored into --work and skipped; compare, pack and validate run again over everything")
    a = ap.parse_args()
    c = setup(a)
    plan = parts(c)
    chosen = [p for p in plan if (p.name in a.parts.split(",") if a.parts else p.default)]
    unknown = set(a.parts.split(",")) - {p.name for p in plan} if a.parts else set()
    if unknown:
        raise UsageError(f"unknown part(s) {', '.join(sorted(unknown))}: {', '.join(p.name for p in plan)}")
    print(f"campaign on {c.device} (spec {c.spec or 'none'}), work {c.work}, pack {c.out}")
    for p in chosen:
        print(f"  {p.name:<22} ~{p.estimate_s / 60:5.1f} min  {p.what}")
    print(f"  {'(stated in all)':<22} ~{sum(p.estimate_s for p in chosen) / 60:5.1f} min")
    if a.list:
        return 0
    if a.resume_from:
        print(f"resumed from {a.resume_from}: {', '.join(resume_from(c, a.resume_from)) or 'no finished parts'}")
    t0, failed = time.perf_counter(), 0
    c.deadline = None if a.budget_s is None else t0 + a.budget_s
    for p in chosen:
        if a.budget_s is not None and time.perf_counter() - t0 + p.estimate_s > a.budget_s:
            print(f"{p.name}: not started (stated {p.estimate_s:.0f} s would pass --budget-s {a.budget_s:g}); "
                  "run again to resume")
            continue
        status = run_part(c, p, a.force)
        failed += status.startswith("FAILED")
        print(f"{p.name}: {status}", flush=True)
        if a.archive:
            write_archive(c, a.archive)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run_command("gpu_campaign", main))
