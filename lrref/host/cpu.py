"""The CPU this runs on, and the dtype ``--dtype auto`` picks for it.

torch's CPU kernels compute bfloat16 natively only with AVX512-BF16 or AMX;
elsewhere they convert to float32 and back around every matmul (14x slower than
float32 on a 2-core AVX2 AMD EPYC).  ``auto`` therefore means bfloat16 on CUDA
and on CPUs that have those instructions, float32 otherwise.  Evidence, in
order: the CPU flags (``/proc/cpuinfo``; elsewhere torch's own CPU capability
checks), and where neither answers (a non-x86 CPU) a 50 ms matmul probe.

No torch at import (the CLI validates flags before torch loads); results are
cached per process.
"""

from __future__ import annotations

import platform
import re
import subprocess
import time
from functools import lru_cache

from lrsim.errors import InputError

DTYPES = ("auto", "bfloat16", "float32")
DTYPE_HELP = ("weights dtype: auto = bfloat16 on CUDA and on CPUs with native bfloat16 (AVX512-BF16 or AMX), "
              "float32 otherwise; bfloat16; float32 (batch-shape-stable numerics)")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
RELEVANT_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
                  "amx_bf16", "amx_fp16", "asimd", "bf16", "sve")
PROBE_MAX_RATIO = 1.25  # bf16 no more than 25% slower than float32 in the probe = computed natively
_TORCH_CHECKS = {"avx2": "_is_avx2_supported", "avx512f": "_is_avx512_supported", "avx512_vnni": "_is_vnni_supported",
                 "avx512_bf16": "_is_avx512_bf16_supported", "amx_tile": "_is_amx_tile_supported",
                 "amx_fp16": "_is_amx_fp16_supported"}


def bind_cores(spec: str | None) -> tuple[int, ...]:
    """The cores of a ``VLLM_CPU_OMP_THREADS_BIND`` core list, its first rank's (``0-3,6|8-11`` -> 0, 1, 2, 3, 6),
    sorted, each once; () for ``auto``, ``nobind`` or anything else that is not a core list."""
    first = (spec or "").split("|")[0].strip()
    if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", first):
        return ()
    cores: set[int] = set()
    for part in first.split(","):
        a, _, b = part.partition("-")
        cores.update(range(int(a), int(b or a) + 1))
    return tuple(sorted(cores))


@lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    """The first processor block of ``/proc/cpuinfo`` (``{}`` where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip().lower(), value.strip())
    return out


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, ``sysctl`` on macOS, else what ``platform`` knows)."""
    info = _cpuinfo()
    for key in ("model name", "model", "hardware", "cpu model"):
        if info.get(key):
            return info[key]
    if platform.system() == "Darwin":
        try:
            r = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], check=False, capture_output=True,
                               text=True, timeout=5)
            if r.returncode == 0 and r.stdout.strip():
                return r.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str] | None:
    """Instruction-set flags: ``/proc/cpuinfo`` ``flags``/``Features``, else torch's CPU checks on x86, else None."""
    info = _cpuinfo()
    raw = info.get("flags") or info.get("features")
    if raw:
        return frozenset(raw.split())
    if not _x86():
        return None
    try:
        import torch.cpu as tc
    except ImportError:
        return None
    return frozenset(f for f, fn in _TORCH_CHECKS.items() if getattr(tc, fn, lambda: False)())


# AMD and Intel server microarchitectures by (vendor, family, model range): "AMD EPYC" alone names several.
KINDS = (("AuthenticAMD", 23, range(0x30, 0x40), "Zen 2"), ("AuthenticAMD", 25, range(0x00, 0x10), "Zen 3"),
         ("AuthenticAMD", 25, range(0x10, 0x20), "Zen 4"), ("AuthenticAMD", 25, range(0xa0, 0xb0), "Zen 4c"),
         ("AuthenticAMD", 26, range(0x00, 0x20), "Zen 5"), ("GenuineIntel", 6, (85,), "Skylake/Cascade Lake"),
         ("GenuineIntel", 6, (106,), "Ice Lake"), ("GenuineIntel", 6, (143,), "Sapphire Rapids"),
         ("GenuineIntel", 6, (207,), "Emerald Rapids"), ("GenuineIntel", 6, (173,), "Granite Rapids"))


def cpu_ids() -> dict:
    """The CPU's family, model and stepping numbers (``/proc/cpuinfo``; None where it has none), and its
    microarchitecture where :data:`KINDS` knows it (``cpu_kind``: "AMD EPYC Zen 5"; else None)."""
    info = _cpuinfo()
    out: dict = {}
    for key, name in (("cpu family", "cpu_family"), ("model", "cpu_model_number"), ("stepping", "cpu_stepping")):
        v = info.get(key, "")
        out[name] = int(v) if v.isdigit() else None
    vendor = info.get("vendor_id")
    arch = next((k for v, f, models, k in KINDS
                 if v == vendor and f == out["cpu_family"] and out["cpu_model_number"] in models), None)
    out["cpu_kind"] = f"{cpu_model()} {arch}" if arch else None  # every key always there: headers keep one shape
    return out


def matmul_probe(budget_s: float = 0.05, n: int = 256) -> float:
    """How much slower a bfloat16 matmul runs than a float32 one here (time ratio; ~``budget_s`` in all)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)

    def rate(dtype) -> float:
        x, y = a.to(dtype), b.to(dtype)
        x @ y  # warm-up
        k, t0 = 0, time.perf_counter()
        while k < 2 or time.perf_counter() - t0 < budget_s / 2:
            x @ y
            k += 1
        return k / (time.perf_counter() - t0)

    return rate(torch.float32) / rate(torch.bfloat16)


@lru_cache(maxsize=1)
def bf16_support() -> tuple[bool, str]:
    """Whether this CPU computes bfloat16 natively, and the evidence (one phrase)."""
    flags = cpu_flags()
    if flags is not None and (_x86() or flags & set(NATIVE_BF16_FLAGS)):
        have = [f for f in NATIVE_BF16_FLAGS if f in flags]
        if have:
            return True, f"CPU flags {', '.join(have)}"
        if "amx_tile" in flags and not _cpuinfo():  # torch reports AMX tiles only; AMX implies AMX-BF16
            return True, "torch: AMX"
        return False, f"no {' or '.join(NATIVE_BF16_FLAGS)} in the CPU flags"
    ratio = matmul_probe()
    verdict = ratio <= PROBE_MAX_RATIO
    return verdict, f"matmul probe: bfloat16 {ratio:.1f}x the time of float32"


def native_bf16() -> bool:
    """True where torch's CPU kernels compute bfloat16 natively (AVX512-BF16, AMX, or a fast probe)."""
    return bf16_support()[0]


def resolve_dtype(dtype: str = "auto", device: str = "cpu") -> str:
    """``'auto'`` -> ``'bfloat16'`` on CUDA or a CPU with native bf16, else ``'float32'``; others pass through.

    :raises InputError: an unknown dtype.
    """
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "bfloat16"
    return "bfloat16" if native_bf16() else "float32"


def describe_auto(device: str = "cpu") -> str:
    """One line saying what ``--dtype auto`` chose here and why."""
    dtype = resolve_dtype("auto", device)
    why = "CUDA" if device.startswith("cuda") else f"{cpu_model()}: {bf16_support()[1]}"
    return f"dtype auto -> {dtype} ({why})"


def set_torch_threads(n: int) -> None:
    """torch's intra-op threads of this process (0: leave them as they are)."""
    if not n:
        return
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def hardware_facts(dtype: str, threads: int | None = None) -> dict:
    """What a trace header records about the compute: CPU model, its family, model and stepping numbers and kind
    (:func:`cpu_ids`: "AMD EPYC" alone names several generations), its relevant flags, dtype, threads."""
    flags = cpu_flags()
    return {"cpu_model": cpu_model(), **cpu_ids(),
            "cpu_flags": None if flags is None else [f for f in RELEVANT_FLAGS if f in flags],
            "bf16_native": native_bf16(), "dtype": dtype, "threads": threads}
