"""Modelled latency profiles: the hardware model over a grid, in the profile format, marked as modelled.

A modelled profile is named by a spec, ``model:DEVICE[:tpN][:DTYPE][:ENGINE][:kv-fp8][:kernel|:wall]``
(:func:`parse_spec`; suffixes in any order):

- ``DEVICE``: a name from ``lrsim profiles --devices`` or a device JSON file;
- ``tpN``: tensor-parallel degree (1);
- ``DTYPE``: the linear layers' weights, ``bf16`` (default), ``fp16``, ``fp8``, ``int8`` or ``int4``
  (:mod:`lrsim.gpu.dtypes`); ``kv-fp8``: an FP8 KV cache;
- ``ENGINE``: an engine release of :mod:`lrsim.gpu.engines` (``lrsim profiles --engines``): ``vllm`` (the
  default: the current vLLM line), ``vllm-0.11``, ``vllm-0.10``, ``vllm-v0``, ``sglang``, ``trtllm``, or
  ``hf-eager`` (transformers' eager forward, what ``lrref --backend hf`` runs);
- ``roR``: an MoE target's routing overlap, ``R`` in [0, 1) (:mod:`lrsim.gpu.moe`; default 0, uniform routing);
- ``ep``: an MoE target's experts sharded whole over the ``tpN`` GPUs (expert parallelism, vLLM's
  ``--enable-expert-parallel``); ``dpa`` with it: data-parallel attention, each GPU running its own rows'
  attention unsharded (vLLM's ``--data-parallel-size``, SGLang's ``--enable-dp-attention``; not on ``vllm-v0``);
- timing: ``wall`` (default: an engine step as the user sees it) or ``kernel`` (the device's kernels alone);
  ``eager`` is kept from before engines existed: ``hf-eager`` with ``wall``.

``synthesize(spec, arch)`` prices one architecture; ``profile_for_spec(spec, archs)`` the given ones, or every
shipped one.  A grid point that does not fit the engine's share of the device's memory, or that lies beyond the
architecture's ``max_position_embeddings``, is ``null`` with a ``missing`` note saying why, as in a measured
profile; so is every point of an architecture whose heads the TP degree does not divide (in a whole-device
profile; :func:`synthesize` refuses it).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import numpy as np

from ..latency.profile import ArchProfile, Prefill, Profile, Provenance
from ..errors import InputError
from .archs import ArchConfig, check_context, load_arch, shipped
from .devices import DeviceSpec, get_device
from .dtypes import DTYPES
from .fit import MODEL_VERSION, load_fit
from .engines import DEFAULT as DEFAULT_ENGINE
from .engines import get_engine, names as engine_names
from .model import Setup, check_tp, forward_s, setup_memory, usable_bytes, usable_share
from .setup import attention_tp, check_layout

CONTEXT = (0, 1024, 2048, 4096, 8192, 16384, 32768)
BATCH = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
POSITIONS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64)
PREFILL_BATCH, PREFILL_PROMPT = (1, 4), (128, 512, 2048)
TIMED = {"kernel": "kernel_sum", "kernel_sum": "kernel_sum", "wall": "wall"}
KV_SUFFIX = "kv-fp8"
_TP = re.compile(r"^tp(\d+)$")
_RO = re.compile(r"^ro(0?\.\d+|0)$")  # MoE routing overlap, e.g. ro0.5 (lrsim.gpu.moe)
SPEC_SYNTAX = "DEVICE[:tpN][:bf16|fp16|fp8|int8|int4][:ENGINE][:ep[:dpa]][:kv-fp8][:roR][:wall|kernel]"
PARALLEL = {"ep": "ep", "dpa": "dp_attention"}  # suffix -> ModelSpec field


@dataclass(frozen=True)
class Grid:
    """The axes a modelled profile is priced on."""

    context: tuple[int, ...] = CONTEXT
    batch: tuple[int, ...] = BATCH
    positions: tuple[int, ...] = POSITIONS


@dataclass(frozen=True)
class ModelSpec:
    """What ``model:...`` names: a device, its TP degree, the engine, the number formats and the timing kind."""

    device: DeviceSpec
    tp: int = 1
    engine: str = DEFAULT_ENGINE
    dtype: str = "bf16"
    kv_dtype: str = "auto"
    timed: str = "wall"
    ref: str = ""  #: how the device was named, when not by its spec's name (a device JSON file)
    routing_overlap: float = 0.0  #: MoE targets: how alike a pass's tokens route (``:ro0.5``; 0: uniform)
    ep: bool = False  #: expert parallelism over the ``tp`` GPUs (``:ep``)
    dp_attention: bool = False  #: data-parallel attention over them (``:dpa``, with ``:ep``)

    def __post_init__(self) -> None:
        if self.tp == 1:  # over one GPU both are TP 1 (what a draft given its own GPU by default runs)
            object.__setattr__(self, "ep", False)
            object.__setattr__(self, "dp_attention", False)

    @property
    def attn_tp(self) -> int:
        """The attention's TP degree: 1 under DP attention, else ``tp`` (:func:`lrsim.gpu.setup.attention_tp`)."""
        return attention_tp(self.tp, self.dp_attention)

    def text(self) -> str:
        """The canonical spec string (what :func:`parse_spec` reads back)."""
        parts = [self.ref or self.device.name, f"tp{self.tp}", self.dtype, self.engine]
        parts += [s for s, f in PARALLEL.items() if getattr(self, f)]
        parts += [KV_SUFFIX] if self.kv_dtype == "fp8" else []
        parts += [f"ro{self.routing_overlap:g}"] if self.routing_overlap else []
        return ":".join(parts + ["kernel" if self.timed == "kernel_sum" else "wall"])

    def setup(self, arch: ArchConfig, context: int | None = None) -> Setup:
        """The :class:`Setup` of ``arch`` on this spec; ``context``: the tokens a request will reach (prompt and
        output), refused beyond the architecture's positions (:func:`lrsim.gpu.archs.check_context`: one line)."""
        if context is not None:
            check_context(arch, context)
        eff, _ = load_fit()
        return Setup(arch, self.device, eff, self.tp, self.engine, self.dtype, self.kv_dtype, self.routing_overlap,
                     self.ep, self.dp_attention)


def parse_spec(spec: str) -> ModelSpec:
    """``DEVICE[:tpN][:DTYPE][:ENGINE][:ep[:dpa]][:kv-fp8][:roR][:kernel|:wall]`` (``model:`` prefix allowed) ->
    :class:`ModelSpec`.

    :raises InputError: unknown device, a bad or repeated suffix, or a format the engine does not price (one line).
    """
    text = str(spec).strip()
    parts = text.removeprefix("model:").split(":")
    got: dict[str, str] = {}

    def take(kind: str, value: str) -> None:
        if kind in got:
            raise InputError(f"model:{text.removeprefix('model:')}: two {kind} suffixes ({got[kind]!r} and "
                             f"{value!r}); the syntax is model:{SPEC_SYNTAX}")
        got[kind] = value

    while len(parts) > 1:
        last = parts[-1].lower()
        if m := _TP.match(last):
            take("tp", m.group(1))
        elif last in DTYPES:
            take("dtype", last)
        elif last in engine_names():
            take("engine", last)
        elif m := _RO.match(last):
            take("routing overlap", m.group(1))
        elif last in PARALLEL:
            take(PARALLEL[last], last)
        elif last == KV_SUFFIX:
            take("kv", "fp8")
        elif last in TIMED:
            take("timing", TIMED[last])
        elif last == "eager":  # before engines: transformers' eager forward, wall time
            take("engine", "hf-eager")
            take("timing", "wall")
        else:
            break
        parts.pop()
    device = ":".join(parts)
    if not device:
        raise InputError(f"{spec!r}: no device; the syntax is model:{SPEC_SYNTAX}")
    try:
        dev = get_device(device)
    except InputError:
        if ":" in device:
            bad = device.split(":", 1)[1]
            raise InputError(f"model:{text.removeprefix('model:')}: unknown suffix {bad!r}; the syntax is "
                             f"model:{SPEC_SYNTAX}") from None
        raise
    tp = int(got.get("tp", 1))
    if tp < 1:
        raise InputError(f"{spec!r}: TP degree must be >= 1")
    if tp == 1 and ("ep" in got or "dp_attention" in got):
        raise InputError(f"model:{text.removeprefix('model:')}: expert parallelism and DP attention over one GPU "
                         f"are TP 1; name the GPUs, e.g. :tp4:ep")
    ms = ModelSpec(dev, tp, got.get("engine", DEFAULT_ENGINE), got.get("dtype", "bf16"), got.get("kv", "auto"),
                   got.get("timing", "wall"), device if device.endswith(".json") or "/" in device else "",
                   float(got.get("routing overlap", 0.0)), "ep" in got, "dp_attention" in got)
    check_spec(spec, ms)
    return ms


def check_spec(spec: str, ms: ModelSpec) -> None:
    """:raises InputError: a layout the engine does not run (:func:`lrsim.gpu.setup.check_layout`), or a format
    hf-eager does not price (one line)."""
    check_layout(ms.engine, ms.ep, ms.dp_attention)
    if ms.engine == "hf-eager" and (ms.dtype not in ("bf16", "fp16") or ms.kv_dtype != "auto"):
        raise InputError(f"{spec!r}: the hf-eager engine is priced in bf16 only; {ms.dtype}"
                         f"{' with an fp8 KV cache' if ms.kv_dtype == 'fp8' else ''} needs a serving engine "
                         f"({', '.join(n for n in engine_names() if n != 'hf-eager')})")


def _missing_notes(s: Setup, g: Grid, ok: np.ndarray, too_long: np.ndarray) -> tuple[str, ...]:
    """One note per (context, batch) row with null points: beyond max_position_embeddings, or out of memory."""
    notes = []
    usable = usable_bytes(s) / 1e9
    for i, L in enumerate(g.context):
        for j, b in enumerate(g.batch):
            long_q = [q for k, q in enumerate(g.positions) if too_long[i, j, k]]
            mem_q = [q for k, q in enumerate(g.positions) if not ok[i, j, k] and not too_long[i, j, k]]
            if long_q:
                rope = (f" x {s.arch.rope_type} rope scaling = {s.arch.max_context}"
                        if s.arch.max_context != s.arch.max_positions else "")
                notes.append(f"modelled, not priced: L={L} b={b} q>={long_q[0]}: beyond {s.arch.name}'s "
                             f"max_position_embeddings {s.arch.max_positions}{rope}")
            if mem_q:
                need = float(setup_memory(s, L, b, mem_q[0])) / 1e9
                notes.append(f"does not fit: L={L} b={b} q>={mem_q[0]} needs {need:.1f} GB per GPU, more than "
                             f"{usable:.1f} GB ({usable_share(s):.0%} of {s.device.memory_gib:g} GiB on "
                             f"{s.device.name}, {s.layout})")
    return tuple(notes)


def arch_profile(s: Setup, g: Grid, timed: str, key: str | None = None) -> ArchProfile:
    """One architecture's modelled grid (ms), nulls where it does not fit or is too long, and its prefill."""
    L, b, q = np.meshgrid(np.array(g.context, float), np.array(g.batch, float), np.array(g.positions, float),
                          indexing="ij")
    ms = 1e3 * forward_s(s, L, b, q, timed)
    ok = setup_memory(s, L, b, q) <= usable_bytes(s)
    too_long = (L + q > s.arch.max_context) if s.arch.max_context else np.zeros_like(ok)
    ok &= ~too_long
    grid = tuple(tuple(tuple(float(f"{v:.6g}") if keep else None for v, keep in zip(r1, k1))
                       for r1, k1 in zip(r0, k0)) for r0, k0 in zip(ms, ok))
    pb, pn = np.meshgrid(np.array(PREFILL_BATCH, float), np.array(PREFILL_PROMPT, float), indexing="ij")
    pre = 1e3 * forward_s(s, 0.0, pb, pn, timed, prefill=True)
    pok = setup_memory(s, 0.0, pb, pn) <= usable_bytes(s)
    prefill = Prefill(timed, PREFILL_BATCH, PREFILL_PROMPT,
                      tuple(tuple(float(f"{v:.6g}") if k else None for v, k in zip(r, kr)) for r, kr in zip(pre, pok)))
    a = s.arch
    return ArchProfile(name=key or a.name, params=a.params, layers=a.layers,
                       kv_bytes_per_token=a.kv_bytes_per_token(s.kv_bytes), context=g.context, batch=g.batch,
                       positions=g.positions, ms=grid, missing=_missing_notes(s, g, ok, too_long),
                       prefill=prefill if all(k for r in pok for k in r) else None)


def _empty(arch: ArchConfig, g: Grid, why: str, key: str | None = None) -> ArchProfile:
    """An architecture the device cannot run at this TP degree: every point null, with the reason."""
    nulls = tuple(tuple(tuple(None for _ in g.positions) for _ in g.batch) for _ in g.context)
    return ArchProfile(name=key or arch.name, params=arch.params, layers=arch.layers,
                       kv_bytes_per_token=arch.kv_bytes_per_token(), context=g.context, batch=g.batch,
                       positions=g.positions, ms=nulls, missing=(f"modelled, not priced: {why}",))


def check_fits(s: Setup) -> None:
    """:raises InputError: the weights and the KV of one 1-token pass do not fit the device at this TP degree."""
    need = float(setup_memory(s, 0, 1, 1))
    usable = usable_bytes(s)
    if need > usable:
        raise InputError(f"{s.arch.name} ({s.dtype}) does not fit {s.device.name} at {s.layout}: needs "
                         f"{need / 1e9:.1f} GB per GPU, {usable / 1e9:.1f} GB usable ({usable_share(s):.0%} of "
                         f"{s.device.memory_gib:g} GiB); use more GPUs (:tpN) or a smaller format (:fp8, :int4)")


def _engine_notes(m: ModelSpec) -> tuple[str, ...]:
    if m.engine == "hf-eager":
        return (("MODELLED, not measured: lrsim.gpu's operator-level model of a transformers eager forward (SDPA "
                 "attention, DynamicCache, bf16), per operator max(FLOPs / achieved FLOP/s, bytes / achieved "
                 "bandwidth) + fixed costs."),)
    e = get_engine(m.engine)
    graphs = "no CUDA graphs" if e.cuda_graphs == "none" else f"{e.cuda_graphs} CUDA graphs up to {e.capture_tokens} tokens"
    return ((f"MODELLED, not measured: lrsim.gpu's operator-level model of {e.label} ({e.releases}): fused kernels, "
             f"merged QKV and gate-up GEMMs, paged attention over a {'fp8' if m.kv_dtype == 'fp8' else 'bf16'} KV "
             f"cache, {graphs}), weights {m.dtype}."),
            (f"Engine step host time {e.step_us:g} us per pass (wall only; "
             f"{'the gap its overlapping scheduler leaves exposed' if e.overlap else 'the host step the device waits for'}): "
             f"{e.sources.get('step_us', {}).get('from', '')}"))


def _parallel_note(m: ModelSpec) -> str:
    """The provenance note of expert parallelism and DP attention ("" without them)."""
    if not m.ep:
        return ""
    bw = m.device.ring_bandwidth(m.tp) / 1e9
    if m.dp_attention:
        return (f"DP attention {m.tp} + expert parallel {m.tp}: each GPU runs the attention, dense parts and LM head "
                "of its own ceil(b / n) rows unsharded; the routed experts sharded whole, the slowest GPU reading "
                f"the experts its share wakes (expected max over GPUs); dispatch and combine as two all-to-alls at "
                f"{bw:g} GB/s egress per GPU (modelled; never measured here).")
    return (f"Tensor parallel {m.tp} attention + expert parallel {m.tp}: the routed experts sharded whole, the "
            "slowest GPU reading the experts its share wakes (expected max over GPUs), the MoE output all-reduced "
            "as under TP (modelled; never measured here).")


def _provenance(m: ModelSpec, command: str) -> Provenance:
    eff, record = load_fit()
    device, tp, timed = m.device, m.tp, m.timed
    kind = "kernel sums (the device's kernels back to back)" if timed == "kernel_sum" else (
        "eager wall time (launch-bound)" if m.engine == "hf-eager" else "engine steps (graphs, launches, host time)")
    coll = ("the engine's custom all-reduce up to 8 MiB, NCCL beyond" if get_engine(m.engine).custom_all_reduce
            else "NCCL")
    tp_note = (f"Tensor parallel {tp}: sharded GEMMs and heads, two all-reduces per layer ({coll}, priced by "
               f"message size at {device.ring_bandwidth(tp) / 1e9:g} GB/s per direction) and a logits gather "
               "(modelled; never measured here).") if tp > 1 else "One GPU (TP 1)."
    tp_note = _parallel_note(m) or tp_note
    notes = (*_engine_notes(m),
             (f"Efficiencies fitted on one H100's transformers kernels ({', '.join(record['fitted_on']['archs'])}; "
              f"{record['date']}) and applied to {device.name} relative to its datasheet peaks: an assumption."),
             f"Device spec: {device.source} ({device.url}).",
             tp_note,
             f"Timing kind {timed}: {kind}; prefill tables are modelled in the same kind (a causal prompt, no cache).",
             (f"Memory: a point is null where weights / TP + KV + activations exceed "
              f"{get_engine(m.engine).usable_memory:.0%} of the "
              "device's memory."))
    label = get_engine(m.engine).label if m.engine != "hf-eager" else "transformers eager forward (SDPA, DynamicCache)"
    return Provenance(device=f"{device.label} (modelled)", engine=f"lrsim.gpu hardware model v{MODEL_VERSION} of a "
                      f"{label}, TP {tp}", dtype=m.dtype if m.dtype != "bf16" else "bfloat16",
                      date=record["date"], command=command, source="lrsim/data/gpus/fit-h100.json", notes=notes,
                      extra={"modelled": True, "model_version": MODEL_VERSION, "tp": tp, "timed": timed,
                             "ep": m.ep, "dp_attention": m.dp_attention,
                             "engine": m.engine, "dtype": m.dtype, "kv_dtype": m.kv_dtype, "spec": m.text(),
                             "device_spec": device.to_dict(), "efficiencies": eff.to_dict(),
                             "fitted_on": record["fitted_on"], "fit_command": record["command"]})


def profile_name(m: ModelSpec) -> str:
    """``model-DEVICE-tpN-DTYPE-ENGINE[-kvfp8]-KIND``."""
    kv = "-kvfp8" if m.kv_dtype == "fp8" else ""
    ro = f"-ro{m.routing_overlap:g}" if m.routing_overlap else ""
    ro += "".join(f"-{s}" for s, f in PARALLEL.items() if getattr(m, f))
    kind = "kernel" if m.timed == "kernel_sum" else "wall"
    return f"model-{re.sub(r'[^A-Za-z0-9._-]', '-', m.device.name)}-tp{m.tp}-{m.dtype}-{m.engine}{kv}{ro}-{kind}"


def _as_spec(spec: str | ModelSpec | DeviceSpec, tp: int | None = None, timed: str | None = None) -> ModelSpec:
    m = spec if isinstance(spec, ModelSpec) else (ModelSpec(spec) if isinstance(spec, DeviceSpec)
                                                   else parse_spec(spec))
    if tp is not None:
        m = replace(m, tp=tp)
    if timed is not None:
        if timed not in ("kernel_sum", "wall"):
            raise InputError(f"timing kind must be kernel_sum or wall, got {timed!r}")
        m = replace(m, timed=timed)
    return m


def synthesize(spec: str | ModelSpec | DeviceSpec, arch: str, tp: int | None = None, timed: str | None = None,
               grid: Grid = Grid(), name: str | None = None, command: str | None = None) -> Profile:
    """A modelled profile of one architecture (a shipped name, an alias or a ``config.json`` path).

    ``spec``: ``DEVICE[:tpN][:DTYPE][:ENGINE]...`` or a :class:`ModelSpec`; ``tp`` and ``timed`` override it.

    :raises InputError: unknown device or architecture, TP not dividing the heads, the model not fitting memory.
    """
    m = _as_spec(spec, tp, timed)
    a = load_arch(arch)
    check_tp(a, m.attn_tp, m.engine)
    s = m.setup(a)
    check_fits(s)
    cmd = command or f"lrsim profiles --synthesize {m.text()} --arch {arch}"
    return Profile(name=name or profile_name(m), timed=m.timed, provenance=_provenance(m, cmd),
                   archs={a.name: arch_profile(s, grid, m.timed)},
                   description=f"{m.device.label}, TP {m.tp}, {m.dtype}, {m.engine}: modelled forward-pass times "
                               f"({m.timed}) of {a.name}")


def whole_device(spec: str | ModelSpec | DeviceSpec, archs: tuple[str, ...] | None = None, grid: Grid = Grid(),
                 command: str | None = None) -> Profile:
    """``archs`` (default: every shipped architecture) on the spec's device, keyed by the names given.

    Of every shipped architecture, those the device cannot run are all-null with the reason; one asked for by
    name that cannot run is refused (:class:`InputError`, one line).
    """
    m = _as_spec(spec)
    out = {}
    for n in archs or tuple(shipped()):
        a = load_arch(n)
        key = n if archs else a.name
        try:
            check_tp(a, m.attn_tp, m.engine)
            s = m.setup(a)
            check_fits(s)
        except InputError as e:
            if archs:  # asked for by name: the reason is the answer
                raise InputError(f"model:{m.text()}: {e}") from None
            out[key] = _empty(a, grid, str(e), key)
            continue
        out[key] = arch_profile(s, grid, m.timed, key)
    if all(a.unmeasured == len(grid.context) * len(grid.batch) * len(grid.positions) for a in out.values()):
        why = "; ".join(sorted({a.missing[0].removeprefix("modelled, not priced: ") for a in out.values()}))
        raise InputError(f"nothing can be priced on model:{m.text()}: {why}")
    cmd = command or f"lrsim profiles --synthesize {m.text()}"
    return Profile(name=profile_name(m), timed=m.timed, provenance=_provenance(m, cmd), archs=out,
                   description=f"{m.device.label}, TP {m.tp}, {m.dtype}, {m.engine}: modelled forward-pass times "
                               f"({m.timed}) of {'every shipped architecture' if not archs else ', '.join(out)}")


def profile_for_spec(spec: str, archs: tuple[str, ...] | None = None) -> Profile:
    """The modelled profile ``--hardware model:SPEC`` names, of ``archs`` (default every shipped architecture).

    :raises InputError: unknown device, bad suffix or TP degree (one line).
    """
    return profile_for_model(parse_spec(spec), archs)


@functools.lru_cache(maxsize=64)
def profile_for_model(m: ModelSpec, archs: tuple[str, ...] | None = None) -> Profile:
    """The modelled profile of a parsed spec (one per spec and architectures: cached)."""
    return whole_device(m, archs, command=f"lrsim profiles --synthesize {m.text()}")
