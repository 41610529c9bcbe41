"""Device specs: datasheet peaks of the GPUs the hardware model prices (``lrsim/data/gpus/devices.json``).

A spec holds what the model needs: the dense bf16 tensor-core peak, the
memory's bandwidth and capacity, and the interconnect (bandwidth per direction
between two GPUs and per GPU in all, the size of the fast domain, the link
latency), with the public datasheet it comes from.  A user's own device is a
JSON file of one such object (``docs/gpu-model.md`` gives the schema), named
wherever a device is asked for (``--synthesize my.json``, ``model:my.json``).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import InputError

DEVICES_FILE = Path(__file__).resolve().parents[1] / "data" / "gpus" / "devices.json"
GIB = 2 ** 30
_NUMBERS = ("bf16_dense_tflops", "memory_gib", "hbm_tb_s", "link_gb_s", "fabric_gb_s", "host_link_gb_s",
            "link_latency_us")
_OPTIONAL = {"aliases": [], "torch_names": [], "interconnect": "", "url": "", "notes": [], "vendor": "", "label": "",
             "domain": 8, "kernel_us": None, "host_us": None, "fp8_dense_tflops": None, "generation": ""}
_NULLABLE = ("kernel_us", "host_us", "fp8_dense_tflops")
GENERATIONS = ("", "ampere", "ada", "hopper", "blackwell", "cdna3")  # NCCL's tuning tables differ by generation


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator: datasheet peaks and interconnect (bandwidths per direction)."""

    name: str
    label: str
    vendor: str
    bf16_dense_tflops: float
    memory_gib: float
    hbm_tb_s: float
    link_gb_s: float
    fabric_gb_s: float
    host_link_gb_s: float
    link_latency_us: float
    domain: int = 8
    interconnect: str = ""
    source: str = ""
    url: str = ""
    aliases: tuple[str, ...] = ()
    torch_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    kernel_us: float | None = None
    host_us: float | None = None
    fp8_dense_tflops: float | None = None
    generation: str = ""

    @property
    def flops(self) -> float:
        """Dense bf16 peak, FLOP/s."""
        return self.bf16_dense_tflops * 1e12

    @property
    def fp8_flops(self) -> float | None:
        """Dense FP8 tensor-core peak, FLOP/s (None: no FP8 tensor cores, e.g. A100)."""
        return self.fp8_dense_tflops * 1e12 if self.fp8_dense_tflops else None

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth, bytes/s."""
        return self.hbm_tb_s * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB

    def ring_bandwidth(self, n: int) -> float:
        """Bytes/s per direction of a ring over ``n`` GPUs.

        Inside the fast domain: ``min(fabric, (n - 1) x link)`` (a switch gives each GPU its whole fabric; a
        mesh one link per peer); beyond it the host link (PCIe).
        """
        gb_s = min(self.fabric_gb_s, (n - 1) * self.link_gb_s) if n <= self.domain else self.host_link_gb_s
        return gb_s * 1e9

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return d | {k: list(d[k]) for k in ("aliases", "torch_names", "notes")}


def device_from_dict(d: object, where: str) -> DeviceSpec:
    """Validate one device object (the schema of ``docs/gpu-model.md``).

    :raises InputError: one line naming ``where`` and the problem.
    """
    if not isinstance(d, dict):
        raise InputError(f"{where}: a device spec must be a JSON object")
    known = {f.name for f in fields(DeviceSpec)}
    unknown = sorted(k for k in d if k not in known and not str(k).startswith("_"))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(known))})")
    for k in ("name", "source", *_NUMBERS):
        if k not in d:
            raise InputError(f"{where}: missing {k!r}")
    for k in _NUMBERS + _NULLABLE:
        v = d.get(k)
        ok = v is None and k in _NULLABLE or (
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
            and (v > 0 or k == "link_latency_us"))
        if not ok:
            raise InputError(f"{where}: {k} must be a finite number > 0, got {v!r}")
    dom = d.get("domain", 8)
    if isinstance(dom, bool) or not isinstance(dom, int) or dom < 1:
        raise InputError(f"{where}: domain must be an integer >= 1 (GPUs on the fast interconnect), got {dom!r}")
    if d.get("generation", "") not in GENERATIONS:
        raise InputError(f"{where}: generation must be one of {', '.join(g for g in GENERATIONS if g)}, "
                         f"got {d.get('generation')!r}")
    if not isinstance(d["name"], str) or not d["name"].strip():
        raise InputError(f"{where}: name must be a non-empty string")
    kw = {k: d.get(k, v) for k, v in _OPTIONAL.items()}
    kw |= {k: tuple(kw[k]) for k in ("aliases", "torch_names", "notes")} | {"label": kw["label"] or d["name"]}
    return DeviceSpec(**kw, **{k: float(d[k]) for k in _NUMBERS}, name=d["name"], source=str(d["source"]))


@functools.lru_cache(maxsize=1)
def _embedded() -> tuple[DeviceSpec, ...]:
    d = json.loads(DEVICES_FILE.read_text(encoding="utf-8"))
    return tuple(device_from_dict(x, f"{DEVICES_FILE.name}: devices[{i}]") for i, x in enumerate(d["devices"]))


def devices() -> list[DeviceSpec]:
    """The embedded device specs."""
    return list(_embedded())


def device_names() -> list[str]:
    return [d.name for d in _embedded()]


def get_device(spec: str | DeviceSpec) -> DeviceSpec:
    """An embedded device by name or alias (case-insensitive), or a device JSON file (a path ending ``.json``).

    :raises InputError: unknown name, unreadable or invalid file (one line).
    """
    if isinstance(spec, DeviceSpec):
        return spec
    s = str(spec).strip()
    for d in _embedded():
        if s.lower() in (d.name, *d.aliases):
            return d
    if s.endswith(".json") or "/" in s:
        p = Path(s).expanduser()
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise InputError(f"{p}: cannot read device spec: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise InputError(f"{p}: invalid JSON ({e.msg}, line {e.lineno})") from None
        return device_from_dict(data, str(p))
    raise InputError(f"unknown device {s!r}: known are {', '.join(device_names())} (or a device JSON file)")


def device_for_name(reported: str) -> str | None:
    """The embedded spec whose ``torch_names`` match a device name as torch reports it (e.g. 'NVIDIA H100 80GB
    HBM3' -> 'h100-sxm'); the longest match wins; None if none does."""
    words = set(reported.lower().replace("-", " ").split())
    best, size = None, 0
    for d in _embedded():
        for pat in d.torch_names:
            need = set(pat.lower().replace("-", " ").split())
            if need <= words and len(need) > size:
                best, size = d.name, len(need)
    return best
