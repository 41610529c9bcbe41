"""``lrref profile``: measure a latency profile (``docs/latency-profile.md``): ``--backend hf`` (the default) on
any torch device with random weights, ``--backend llamacpp`` on prepared GGUF models (:mod:`lrref.profiling.llamacpp`).

    lrref profile --arch qwen2.5-coder-1.5b,qwen2.5-coder-0.5b --device cpu --threads 2 \\
        --batch 1,2,4,8 --positions 1,2,4,8 --context 0,256,1024 --out cpu.json

With ``--backend hf`` every architecture is built from its config (a shipped
one, ``--arch``, or a model directory's ``config.json``, ``--model``) with
random weights, and timed by :mod:`lrref.profiling.timing` at every (context, batch,
positions) of the grid.  The profile (timing kind ``wall``) is written
atomically with its provenance: device, CPU model, torch and transformers
versions, dtype, threads, the command line, the date, what else ran on the
machine (:mod:`lrref.host.load`).  Validation happens before torch is imported, so
bad input is one line and exit 2 at once, and nothing is written.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from lrsim.errors import InputError, UsageError
from lrsim.fields import option
from lrsim.latency.profile import ArchProfile, Profile, Provenance, write_profile

from ..archs import DTYPE_BYTES, Arch, source_label
from ..host import cpu

DTYPES = ("auto", *DTYPE_BYTES)
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def resolve_dtype(dtype: str, device: str) -> str:
    """The dtype a profile is timed in: ``auto`` as ``--dtype auto`` picks it (:func:`lrref.host.cpu.resolve_dtype`:
    bfloat16 on a GPU; on a CPU bfloat16 only with native bf16, else float32); any other dtype (float16 included) as
    given."""
    return dtype if dtype != "auto" else cpu.resolve_dtype("auto", device)


@dataclass(frozen=True)
class ProfileSpec:
    """What ``lrref profile`` measures (validated on construction: :class:`UsageError`, one line)."""

    archs: tuple[Arch, ...] = option("architectures to time", ())
    device: str = option("torch device: cpu, cuda or cuda:N", "cpu")
    dtype: str = option("auto, float32, bfloat16 or float16 (auto: bf16 on a GPU; on a CPU bf16 only with "
                        "native bf16, avx512_bf16/amx, else float32)", "auto")
    batch: tuple[int, ...] = option("rows per pass", (1, 2, 4, 8))
    positions: tuple[int, ...] = option("new positions per row (1 = a decode step)", (1, 2, 4, 8))
    context: tuple[int, ...] = option("tokens in the KV cache of every row", (0, 1024, 8192))
    warmup: int = option("untimed passes per shape", 2)
    repeats: int = option("timed passes per shape (their median is kept)", 5)
    threads: int | None = option("torch intra-op threads on a CPU (None: torch's default)", None)
    chunk: int = option("prefill chunk: tokens per forward while filling the cache", 1024)
    seed: int = option("seed of the random weights and tokens", 0)
    name: str | None = option("profile name (default: DEVICE-DTYPE, plus -tTHREADS on a CPU)", None)

    def __post_init__(self) -> None:
        if not self.archs:
            raise UsageError("give --arch NAME[,NAME...] or --model DIR")
        names = [a.name for a in self.archs]
        if len(set(names)) != len(names):
            raise UsageError(f"architecture names must be distinct, got {', '.join(names)}")
        if not _DEVICE.match(self.device):
            raise UsageError(f"--device must be cpu, cuda or cuda:N, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for flag, v, lo in (("--warmup", self.warmup, 0), ("--repeats", self.repeats, 1), ("--chunk", self.chunk, 1),
                            ("--threads", 1 if self.threads is None else self.threads, 1), ("--seed", self.seed, 0)):
            if v < lo:
                raise UsageError(f"{flag} must be >= {lo}, got {v}")
        if self.name is not None and not _NAME.match(self.name):
            raise UsageError(f"--name uses letters, digits, '.', '_' and '-', got {self.name!r}")
        for a in self.archs:
            need = max(self.context) + max(self.positions)
            if a.max_positions is not None and need > a.max_positions:
                raise UsageError(f"context {max(self.context)} + {max(self.positions)} positions is longer than "
                                 f"{a.name}'s max_position_embeddings {a.max_positions}")

    @property
    def shapes(self) -> int:
        return len(self.context) * len(self.batch) * len(self.positions)


def parse_list(text: str, flag: str, lo: int) -> tuple[int, ...]:
    """``'1,2,4'`` -> ``(1, 2, 4)``: distinct integers >= ``lo``, sorted.

    :raises UsageError: anything else (one line naming the flag).
    """
    try:
        xs = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if any(x < lo for x in xs):
        raise UsageError(f"{flag}: values must be >= {lo}, got {text!r}")
    if len(set(xs)) != len(xs):
        raise UsageError(f"{flag}: values must be distinct, got {text!r}")
    return tuple(sorted(xs))


HF_DEFAULTS = {"batch": "1,2,4,8", "positions": "1,2,4,8", "context": "0,1024,8192", "warmup": 2, "repeats": 5,
               "chunk": 1024, "device": "cpu", "dtype": "auto"}
LLAMACPP_ONLY = ("async_threads", "budget", "logits", "co_context")


# --- measuring ----------------------------------------------------------------------------------------


def run(spec: ProfileSpec, out: Path, argv: Sequence[str], progress: bool = False) -> str:
    """Measure every architecture of ``spec`` and write the profile to ``out``; returns a one-line summary."""
    import torch
    from tqdm import tqdm

    from ..host.load import Monitor, warn_if_busy
    from . import timing

    device = torch.device(spec.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {spec.device}: torch sees no CUDA device here")
    if device.type == "cpu" and spec.threads:
        torch.set_num_threads(spec.threads)
    dtype = resolve_dtype(spec.dtype, spec.device)
    t0, load0, mon = time.perf_counter(), os.getloadavg(), Monitor()
    archs, engine = {}, ""
    with tqdm(total=spec.shapes * len(spec.archs), disable=not progress, file=sys.stderr, unit="shape") as bar:
        for arch in spec.archs:
            bar.set_description(arch.name)
            archs[arch.name], engine = measure_arch(arch, spec, dtype, device, bar.update)
    load = mon.now()
    facts = {"wall_s": round(time.perf_counter() - t0, 1), "loadavg_start": list(load0),
             "loadavg_end": list(os.getloadavg()), "load": None if load is None else load.to_dict(),
             "cpus": os.cpu_count(), "seed": spec.seed, "chunk": spec.chunk,
             "arch_configs": {a.name: source_label(a) for a in spec.archs}}
    prof = Profile(spec.name or _default_name(device, dtype, torch.get_num_threads()), "wall",
                   _provenance(spec, device, dtype, engine, argv, facts), archs,
                   f"{timing.device_name(device)}, {dtype}: wall time of one forward pass (lrref profile)")
    write_profile(prof, out)
    warn_if_busy(load, "the profile")
    return (f"wrote {out}: profile {prof.name}, {len(archs)} architecture(s) x {spec.shapes} shapes "
            f"in {facts['wall_s']} s")


def measure_arch(arch: Arch, spec: ProfileSpec, dtype: str, device, tick: Callable[[int], object]) -> tuple:
    """The :class:`ArchProfile` of one architecture, and the engine it ran on (one line)."""
    import transformers

    from ..backends.hf_random import build_model
    from . import timing

    model = build_model(arch, dtype, device, spec.seed)
    engine = (f"transformers {transformers.__version__} eager forward, {model.config._attn_implementation} attention, "
              "DynamicCache; logits at the q new positions")
    times, notes = {}, []
    try:
        grid = timing.measure_grid(model, list(spec.context), list(spec.batch), list(spec.positions), spec.warmup,
                                   spec.repeats, spec.chunk, spec.seed, device, lambda: tick(1))
        for shape, seconds, why in grid:
            times[(shape.context, shape.batch, shape.positions)] = None if seconds is None else \
                float(f"{1000 * seconds:.6g}")  # s -> ms, 6 significant digits
            notes += [why] if why else []
    except RuntimeError as e:
        if not timing._out_of_memory(e):
            raise
        raise InputError(f"{arch.name}: out of memory prefilling {max(spec.context)} tokens on "
                         f"{timing.device_name(device)}: use a shorter --context") from None
    ms = tuple(tuple(tuple(times[(L, b, q)] for q in spec.positions) for b in spec.batch) for L in spec.context)
    a = ArchProfile(arch.name, timing.parameters(model), arch.layers, arch.kv_bytes_per_token(dtype), spec.context,
                    spec.batch, spec.positions, ms, tuple(dict.fromkeys(notes)))
    del model
    return a, engine


def _default_name(device, dtype: str, threads: int) -> str:
    return f"{device.type}-{dtype}" + (f"-t{threads}" if device.type == "cpu" else "")


def _provenance(spec: ProfileSpec, device, dtype: str, engine: str, argv: Sequence[str], facts: dict) -> Provenance:
    import torch
    import transformers

    from . import timing

    return Provenance(
        device=timing.device_name(device), engine=engine, dtype=dtype, date=time.strftime("%Y-%m-%d", time.gmtime()),
        command=" ".join(argv), torch=torch.__version__, transformers=transformers.__version__,
        cpu=cpu.cpu_model(), threads=torch.get_num_threads() if device.type == "cpu" else None,
        warmup=spec.warmup, repeats=spec.repeats, statistic=f"median of {spec.repeats} timed passes",
        notes=("Random weights from each architecture's config: a forward pass costs the same whatever the weights "
               "hold.",
               "Wall time of one model(...) call (device synchronised on a GPU), logits at the q new positions of "
               "each row; the KV cache is one prefilled row of random tokens repeated to b rows and cropped back to "
               "the context after every pass (its length asserted)."),
        extra=facts)
