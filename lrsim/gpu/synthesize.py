"""Modelled latency profiles: the hardware model over a grid, in the profile format, marked as modelled.

``synthesize(device, arch, tp)`` prices one architecture; ``profile_for_spec
("h200:tp2")`` every shipped one (what ``--hardware model:h200:tp2`` resolves
to).  A grid point that does not fit the device's memory, or that lies beyond
the architecture's ``max_position_embeddings``, is ``null`` with a ``missing``
note saying why, as in a measured profile; so is every point of an
architecture whose heads the TP degree does not divide (in a whole-device
profile; :func:`synthesize` refuses it).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..cost.profile import ArchProfile, Prefill, Profile, Provenance
from .archs import ArchConfig, load_arch, shipped
from .devices import DeviceSpec, get_device
from .fit import MODEL_VERSION, load_fit
from .model import USABLE_MEMORY, Setup, check_tp, forward_s, memory_need

CONTEXT = (0, 1024, 2048, 4096, 8192, 16384, 32768)
BATCH = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
POSITIONS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
PREFILL_BATCH, PREFILL_PROMPT = (1, 4), (128, 512, 2048)
TIMED = {"kernel": "kernel_sum", "kernel_sum": "kernel_sum", "eager": "wall", "wall": "wall"}
_TP = re.compile(r"^tp(\d+)$")


@dataclass(frozen=True)
class Grid:
    """The axes a modelled profile is priced on."""

    context: tuple[int, ...] = CONTEXT
    batch: tuple[int, ...] = BATCH
    positions: tuple[int, ...] = POSITIONS


def parse_spec(spec: str) -> tuple[DeviceSpec, int, str]:
    """``DEVICE[:tpN][:kernel|:eager]`` -> (device, TP degree, timing kind); DEVICE may be a device JSON file.

    :raises InputError: unknown device, a bad suffix (one line).
    """
    parts = str(spec).removeprefix("model:").split(":")  # the resolver's prefix, if it kept it
    tp, timed = 1, "kernel_sum"
    while len(parts) > 1 and (_TP.match(parts[-1]) or parts[-1] in TIMED):
        last = parts.pop()
        if m := _TP.match(last):
            tp = int(m.group(1))
        else:
            timed = TIMED[last]
    if tp < 1:
        raise InputError(f"{spec!r}: TP degree must be >= 1")
    return get_device(":".join(parts)), tp, timed


def _missing_notes(s: Setup, g: Grid, ok: np.ndarray, too_long: np.ndarray) -> tuple[str, ...]:
    """One note per (context, batch) row with null points: beyond max_position_embeddings, or out of memory."""
    notes = []
    usable = USABLE_MEMORY * s.device.memory_bytes / 1e9
    for i, L in enumerate(g.context):
        for j, b in enumerate(g.batch):
            long_q = [q for k, q in enumerate(g.positions) if too_long[i, j, k]]
            mem_q = [q for k, q in enumerate(g.positions) if not ok[i, j, k] and not too_long[i, j, k]]
            if long_q:
                notes.append(f"modelled, not priced: L={L} b={b} q>={long_q[0]}: beyond {s.arch.name}'s "
                             f"max_position_embeddings {s.arch.max_positions}")
            if mem_q:
                need = float(memory_need(s.arch, L, b, mem_q[0], s.tp)) / 1e9
                notes.append(f"does not fit: L={L} b={b} q>={mem_q[0]} needs {need:.1f} GB per GPU, more than "
                             f"{usable:.1f} GB ({USABLE_MEMORY:.0%} of {s.device.memory_gib:g} GiB on "
                             f"{s.device.name}, TP {s.tp})")
    return tuple(notes)


def arch_profile(s: Setup, g: Grid, timed: str) -> ArchProfile:
    """One architecture's modelled grid (ms), nulls where it does not fit or is too long, and its prefill."""
    L, b, q = np.meshgrid(np.array(g.context, float), np.array(g.batch, float), np.array(g.positions, float),
                          indexing="ij")
    ms = 1e3 * forward_s(s, L, b, q, timed)
    ok = memory_need(s.arch, L, b, q, s.tp) <= USABLE_MEMORY * s.device.memory_bytes
    too_long = (L + q > s.arch.max_positions) if s.arch.max_positions else np.zeros_like(ok)
    ok &= ~too_long
    grid = tuple(tuple(tuple(float(f"{v:.6g}") if keep else None for v, keep in zip(r1, k1))
                       for r1, k1 in zip(r0, k0)) for r0, k0 in zip(ms, ok))
    pb, pn = np.meshgrid(np.array(PREFILL_BATCH, float), np.array(PREFILL_PROMPT, float), indexing="ij")
    pre = 1e3 * forward_s(s, 0.0, pb, pn, timed, prefill=True)
    pok = memory_need(s.arch, 0.0, pb, pn, s.tp) <= USABLE_MEMORY * s.device.memory_bytes
    prefill = Prefill(timed, PREFILL_BATCH, PREFILL_PROMPT,
                      tuple(tuple(float(f"{v:.6g}") if k else None for v, k in zip(r, kr)) for r, kr in zip(pre, pok)))
    a = s.arch
    return ArchProfile(name=a.name, params=a.params, layers=a.layers, kv_bytes_per_token=a.kv_bytes_per_token(),
                       context=g.context, batch=g.batch, positions=g.positions, ms=grid,
                       missing=_missing_notes(s, g, ok, too_long),
                       prefill=prefill if all(k for r in pok for k in r) else None)


def _empty(arch: ArchConfig, g: Grid, why: str) -> ArchProfile:
    """An architecture the device cannot run at this TP degree: every point null, with the reason."""
    nulls = tuple(tuple(tuple(None for _ in g.positions) for _ in g.batch) for _ in g.context)
    return ArchProfile(name=arch.name, params=arch.params, layers=arch.layers,
                       kv_bytes_per_token=arch.kv_bytes_per_token(), context=g.context, batch=g.batch,
                       positions=g.positions, ms=nulls, missing=(f"modelled, not priced: {why}",))


def check_fits(s: Setup) -> None:
    """:raises InputError: the weights and the KV of one 1-token pass do not fit the device at this TP degree."""
    need = float(memory_need(s.arch, 0, 1, 1, s.tp))
    usable = USABLE_MEMORY * s.device.memory_bytes
    if need > usable:
        raise InputError(f"{s.arch.name} does not fit {s.device.name} at TP {s.tp}: needs {need / 1e9:.1f} GB per GPU,"
                         f" {usable / 1e9:.1f} GB usable ({USABLE_MEMORY:.0%} of {s.device.memory_gib:g} GiB)")


def _provenance(device: DeviceSpec, tp: int, timed: str, command: str) -> Provenance:
    eff, record = load_fit()
    kind = "kernel sums (what CUDA graphs approach)" if timed == "kernel_sum" else "eager wall time (launch-bound)"
    tp_note = (f"Tensor parallel {tp}: sharded GEMMs and heads, two ring all-reduces per layer at "
               f"{device.ring_bandwidth(tp) / 1e9:g} GB/s per direction and {device.link_latency_us:g} us per step, "
               "and a logits all-gather (modelled; never measured here).") if tp > 1 else "One GPU (TP 1)."
    notes = (
        ("MODELLED, not measured: lrsim.gpu's operator-level model of a transformers eager forward (SDPA attention, "
         "DynamicCache, bf16), per operator max(FLOPs / achieved FLOP/s, bytes / achieved bandwidth) + fixed costs."),
        (f"Efficiencies fitted on one H100 ({', '.join(record['fitted_on']['archs'])}; {record['date']}) and "
         f"applied to {device.name} relative to its datasheet peaks: an assumption."),
        f"Device spec: {device.source} ({device.url}).",
        tp_note,
        f"Timing kind {timed}: {kind}; prefill tables are modelled in the same kind (a causal prompt, no cache).",
        (f"Memory: a point is null where weights / TP + KV + activations exceed {USABLE_MEMORY:.0%} of the device's "
         "memory (this reproduces which 32B shapes the H100 run could not fit)."))
    return Provenance(device=f"{device.label} (modelled)", engine=f"lrsim.gpu hardware model v{MODEL_VERSION} of a "
                      f"transformers eager forward (SDPA, DynamicCache), TP {tp}", dtype="bfloat16",
                      date=record["date"], command=command, source="lrsim/data/gpus/fit-h100.json", notes=notes,
                      extra={"modelled": True, "model_version": MODEL_VERSION, "tp": tp, "timed": timed,
                             "device_spec": device.to_dict(), "efficiencies": eff.to_dict(),
                             "fitted_on": record["fitted_on"], "fit_command": record["command"]})


def profile_name(device: DeviceSpec, tp: int, timed: str) -> str:
    return f"model-{re.sub(r'[^A-Za-z0-9._-]', '-', device.name)}-tp{tp}-{'kernel' if timed == 'kernel_sum' else 'eager'}"


def synthesize(device: str | DeviceSpec, arch: str, tp: int = 1, timed: str = "kernel_sum", grid: Grid = Grid(),
               name: str | None = None, command: str | None = None) -> Profile:
    """A modelled profile of one architecture on one device at one TP degree.

    :raises InputError: unknown device or architecture, TP not dividing the heads, the model not fitting memory.
    """
    dev, a = get_device(device), load_arch(arch)
    check_tp(a, tp)
    if timed not in ("kernel_sum", "wall"):
        raise InputError(f"timing kind must be kernel_sum or wall, got {timed!r}")
    eff, _ = load_fit()
    s = Setup(a, dev, eff, tp)
    check_fits(s)
    cmd = command or f"lrsim profiles --synthesize {dev.name} --arch {arch} --tp {tp} --timed {timed}"
    return Profile(name=name or profile_name(dev, tp, timed), timed=timed, provenance=_provenance(dev, tp, timed, cmd),
                   archs={a.name: arch_profile(s, grid, timed)},
                   description=f"{dev.label}, TP {tp}: modelled forward-pass times ({timed}) of {a.name}")


def whole_device(dev: DeviceSpec, tp: int, timed: str, grid: Grid = Grid(), command: str | None = None) -> Profile:
    """Every shipped architecture on ``dev`` at ``tp``; those it cannot run are all-null with the reason."""
    eff, _ = load_fit()
    archs = {}
    for n in shipped():
        a = load_arch(n)
        try:
            check_tp(a, tp)
            s = Setup(a, dev, eff, tp)
            check_fits(s)
        except InputError as e:
            archs[n] = _empty(a, grid, str(e))
            continue
        archs[n] = arch_profile(s, grid, timed)
    if all(a.unmeasured == len(grid.context) * len(grid.batch) * len(grid.positions) for a in archs.values()):
        raise InputError(f"no shipped architecture runs on {dev.name} at TP {tp} (the TP degree must divide the "
                         "attention and KV heads, and the weights must fit)")
    cmd = command or f"lrsim profiles --synthesize {dev.name} --tp {tp} --timed {timed}"
    return Profile(name=profile_name(dev, tp, timed), timed=timed, provenance=_provenance(dev, tp, timed, cmd),
                   archs=archs, description=f"{dev.label}, TP {tp}: modelled forward-pass times ({timed}) of every "
                   "shipped architecture")


@functools.lru_cache(maxsize=16)
def profile_for_spec(spec: str) -> Profile:
    """The modelled profile ``--hardware model:SPEC`` names: ``DEVICE[:tpN][:kernel|:eager]``, every architecture.

    :raises InputError: unknown device, bad suffix or TP degree (one line).
    """
    dev, tp, timed = parse_spec(spec)
    return whole_device(dev, tp, timed, command=f"lrsim profiles --synthesize {dev.name} --tp {tp} --timed {timed} "
                        f"(resolved from model:{spec})")
