"""Serving engines as versioned models: what each engine release runs around the same operators.

One data file per engine, ``lrsim/data/gpus/engines/NAME.json``, every constant with where it comes from
(:func:`engines`, ``lrsim profiles --engines``).  The operators of a pass are the fused ones of
:mod:`lrsim.gpu.engine_vllm` for every serving engine (merged QKV and gate-up GEMMs, fused norms, FlashAttention
or FlashInfer over a paged cache, a custom all-reduce), transformers' eager ones for ``hf-eager``
(:mod:`lrsim.gpu.engine_hf`).  What differs between releases is how the host drives them::

    wall = t_step + max(kernel sum, launches x t_host)

- ``cuda_graphs``: ``full`` (the whole forward is one graph up to ``capture_tokens`` tokens), ``piecewise`` (a
  graph per layer split at attention: two launches per layer), ``full_and_piecewise`` (full graphs for uniform
  decode batches, one position per row; piecewise for the rest, a verification or prefill pass),
  ``full_decode_only`` (full graphs for decode batches, every other pass eager: vLLM V0, SGLang, TensorRT-LLM),
  ``none``; beyond the capture size every kernel is launched eagerly.
- ``t_step`` (``step_us``): the host's time per engine step that the device waits for (scheduling, input
  preparation, the sampled tokens' round trip, output processing).  With ``overlap`` (vLLM's async scheduling,
  SGLang's and TensorRT-LLM's overlap schedulers) the host prepares step ``n + 1`` while the device runs step
  ``n``: only the gap that stays exposed is ``t_step``.

:func:`engine_for` maps an engine family and release (``vllm`` 0.10.1) to its model; a ``model:`` spec names an
engine (``model:h200:tp2:sglang``, ``model:b200:tp1:vllm-0.10``).  The default, ``vllm``, is the current vLLM
release line.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError

ENGINE_DIR = Path(__file__).resolve().parents[1] / "data" / "gpus" / "engines"
GRAPH_MODES = ("none", "piecewise", "full", "full_and_piecewise", "full_decode_only")
KERNELS = ("fused", "hf-eager")
FAMILIES = ("vllm", "sglang", "trtllm", "transformers")
DEFAULT = "vllm"
_FIELDS = ("name", "label", "family", "releases", "kernels", "cuda_graphs", "capture_tokens", "overlap",
           "custom_all_reduce", "usable_memory", "step_us", "sources")
# fields an engine file may leave out (a user's file written before them)
_OPTIONAL = {"dp_attention": False, "attention": "fa2", "attention_by_release": [], "decode_curve": False,
             "prefill_chunk": {"when": "never"}}
CHUNK_WHEN = ("never", "always", "long_context")  #: when an engine splits a long prompt (``prefill_chunk.when``)


@dataclass(frozen=True)
class Engine:
    """One engine release line as the hardware model prices it."""

    name: str  #: what a spec names it (``vllm``, ``vllm-0.10``, ``sglang``, ...)
    label: str  #: in words
    family: str  #: ``vllm``, ``sglang``, ``trtllm`` or ``transformers``
    releases: str  #: which releases it stands for, in words
    kernels: str  #: the operator model: ``fused`` (:mod:`lrsim.gpu.engine_vllm`) or ``hf-eager``
    cuda_graphs: str  #: one of :data:`GRAPH_MODES`
    capture_tokens: int  #: the largest pass (rows x positions) a CUDA graph covers
    overlap: bool  #: the host prepares the next step while the device runs this one
    custom_all_reduce: bool  #: a one-shot / two-shot all-reduce of its own up to 8 MiB (else NCCL)
    usable_memory: float  #: share of the device's memory for weights, KV and activations
    step_us: float  #: host time per step the device waits for (us)
    sources: dict = field(default_factory=dict)  #: per constant: where it comes from
    path: str = ""  #: the data file
    dp_attention: bool = False  #: offers data-parallel attention with expert-parallel MoE layers (``:ep:dpa``)
    attention: str = "fa2"  #: the FlashAttention generation its attention runs on Hopper (``fa3``: vLLM V1, SGLang)
    attention_by_release: list = field(default_factory=list)  #: (first release, kernel) where a release changed it
    decode_curve: bool = False  #: where its decode runs FlashAttention-2's flash-decoding, that streams at the
    #: published 2024 decode curve (kernels.json); else (FA3, FlashInfer 0.2+, XQA) at the GEMM fit's bandwidth
    prefill_chunk: dict = field(default_factory=lambda: {"when": "never"})  #: how it splits a long prompt

    def attention_kernel(self, generation: str, release: str | None = None) -> str:
        """The FlashAttention generation this engine runs on a device of ``generation``: its ``attention`` (or, for
        a ``release``, the last ``attention_by_release`` entry it reaches, FA2 before the first) on Hopper and
        Blackwell (FA3 and FA4 there: priced with FA3's curve), FA2 on every other GPU."""
        kernel = self.attention
        if release is not None and self.attention_by_release:
            kernel = _by_release(self.attention_by_release, release, "fa2")  # before the first release listed: FA2
        return kernel if generation in ("hopper", "blackwell") else "fa2"

    def chunk_tokens(self, device=None, max_model_len: int | None = None, release: str | None = None) -> int | None:
        """Tokens of one prefill chunk (``max_num_batched_tokens``, SGLang's ``chunked_prefill_size``), None where
        the prompt is prefilled in one pass.

        ``when``: ``never``; ``always`` (vLLM V1, SGLang); ``long_context``: only where ``max_model_len`` exceeds
        ``long_context_tokens`` (vLLM V0 since 0.5.3).  The size is the release's (``by_release``: the first
        release of each value; before the first, no chunking by default), else by the device's memory
        (``tokens_by_memory_gib``: the last tier the device reaches; ``small_names``: devices held at the first
        tier, vLLM's A100 rule), else ``tokens``.
        """
        c = self.prefill_chunk
        when = c.get("when", "never")
        if when == "never" or (when == "long_context" and (max_model_len is None
                                                          or max_model_len <= c["long_context_tokens"])):
            return None
        if release is not None and c.get("by_release"):
            return _by_release(c["by_release"], release, None)
        tiers = c.get("tokens_by_memory_gib")
        if tiers and device is not None:
            small = any(n in device.name.lower() for n in c.get("small_names", ()))
            return tiers[0][1] if small else [t for gib, t in tiers if device.memory_gib >= gib][-1]
        return int(c["tokens"])

    @property
    def fitted(self) -> dict | None:
        """The one public row a constant of this engine was fitted on, if any."""
        for src in self.sources.values():
            if isinstance(src, dict) and src.get("fitted_on"):
                return src["fitted_on"]
        return None

    def graph(self, q: float, tokens: float) -> str:
        """How a pass of ``tokens`` tokens, ``q`` positions per row, runs: 'full', 'piecewise' or 'eager'."""
        if self.cuda_graphs == "none" or tokens > self.capture_tokens:
            return "eager"
        if self.cuda_graphs == "full" or (self.cuda_graphs in ("full_and_piecewise", "full_decode_only") and q == 1):
            return "full"
        return "eager" if self.cuda_graphs == "full_decode_only" else "piecewise"

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (*_FIELDS, *_OPTIONAL)}


def _check(d: object, where: str) -> Engine:
    if not isinstance(d, dict):
        raise InputError(f"{where}: an engine must be a JSON object")
    missing = [k for k in _FIELDS if k not in d]
    if missing:
        raise InputError(f"{where}: missing {', '.join(missing)}")
    if d["cuda_graphs"] not in GRAPH_MODES:
        raise InputError(f"{where}: cuda_graphs must be one of {', '.join(GRAPH_MODES)}, got {d['cuda_graphs']!r}")
    if d["kernels"] not in KERNELS or d["family"] not in FAMILIES:
        raise InputError(f"{where}: kernels must be one of {', '.join(KERNELS)} and family one of "
                         f"{', '.join(FAMILIES)}")
    for k in ("step_us", "capture_tokens"):
        if isinstance(d[k], bool) or not isinstance(d[k], (int, float)) or d[k] < 0:
            raise InputError(f"{where}: {k} must be a number >= 0, got {d[k]!r}")
    if not 0 < d["usable_memory"] <= 1:
        raise InputError(f"{where}: usable_memory must be in (0, 1], got {d['usable_memory']!r}")
    if not isinstance(d.get("dp_attention", False), bool):
        raise InputError(f"{where}: dp_attention must be true or false, got {d['dp_attention']!r}")
    if not isinstance(d.get("decode_curve", False), bool):
        raise InputError(f"{where}: decode_curve must be true or false, got {d['decode_curve']!r}")
    if d.get("attention", "fa2") not in ("fa2", "fa3") or any(
            k not in ("fa2", "fa3") for _, k in d.get("attention_by_release", [])):
        raise InputError(f"{where}: attention and attention_by_release must name fa2 or fa3, got "
                         f"{d.get('attention', 'fa2')!r}, {d.get('attention_by_release', [])!r}")
    chunk = d.get("prefill_chunk", {"when": "never"})
    if not isinstance(chunk, dict) or chunk.get("when") not in CHUNK_WHEN:
        raise InputError(f"{where}: prefill_chunk needs 'when' ({', '.join(CHUNK_WHEN)})")
    return Engine(**{k: d[k] for k in _FIELDS}, **{k: d.get(k, v) for k, v in _OPTIONAL.items()}, path=where)


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, Engine]:
    out = {}
    for p in sorted(ENGINE_DIR.glob("*.json")):
        e = _check(json.loads(p.read_text(encoding="utf-8")), f"lrsim/data/gpus/engines/{p.name}")
        out[e.name] = e
    return out


ORDER = ("vllm", "vllm-0.11", "vllm-0.10", "vllm-v0", "sglang", "trtllm", "hf-eager")  #: newest vLLM first


def engines() -> list[Engine]:
    """Every engine the model knows, the default first, then vLLM's older lines, the other engines."""
    reg = _registry()
    return [reg[n] for n in ORDER if n in reg] + [e for n, e in reg.items() if n not in ORDER]


def names() -> tuple[str, ...]:
    return tuple(e.name for e in engines())


def get_engine(name: str | Engine) -> Engine:
    """An engine by name (``eager`` is kept for ``hf-eager``).

    :raises InputError: an unknown engine (one line listing the known ones).
    """
    if isinstance(name, Engine):
        return name
    reg = _registry()
    key = str(name).strip().lower()
    if key not in reg:
        raise InputError(f"unknown engine {name!r}: known are {', '.join(names())} (lrsim profiles --engines)")
    return reg[key]


def _version(v: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", str(v))
    if not nums:
        raise InputError(f"engine version {v!r}: no release number in it")
    return tuple(int(x) for x in nums[:3])


def _by_release(pairs: list, release: str, before):
    """The value of the last ``(first release, value)`` pair ``release`` reaches (pairs in release order);
    ``before`` ahead of the first."""
    v, value = _version(release), before
    for first, x in pairs:
        value = x if v >= _version(first) else value
    return value


def engine_for(family: str, version: str | None = None) -> Engine:
    """The engine model of a release: vLLM < 0.8 ``vllm-v0``, 0.8-0.10 ``vllm-0.10``, 0.11-0.13 ``vllm-0.11``,
    0.14 and later ``vllm`` (no version: the current line); SGLang ``sglang``; TensorRT-LLM ``trtllm``.

    :raises InputError: an unknown family, or a version without a number.
    """
    fam = str(family).strip().lower()
    if fam in ("sglang", "trtllm", "hf-eager"):
        return get_engine(fam)
    if fam != "vllm":
        raise InputError(f"unknown engine family {family!r}: known are vllm, sglang, trtllm, hf-eager")
    if not version:
        return get_engine("vllm")
    v = _version(version)
    name = ("vllm-v0" if v < (0, 8) else "vllm-0.10" if v < (0, 11) else "vllm-0.11" if v < (0, 14) else "vllm")
    return get_engine(name)


def listing(as_json: bool = False) -> str:
    """``lrsim profiles --engines``: each engine, its constants and where each comes from."""
    es = engines()
    if as_json:
        return json.dumps([e.to_dict() for e in es], indent=1)
    head = f"{'engine':<10} {'releases':<27} {'CUDA graphs (tokens)':<26} {'overlap':<8} {'t_step us':>9}"
    rows = [f"{e.name:<10} {e.releases:<27} "
            f"{e.cuda_graphs + ('' if e.cuda_graphs == 'none' else f' <={e.capture_tokens}'):<26} "
            f"{'yes' if e.overlap else 'no':<8} {e.step_us:>9.1f}" for e in es]
    srcs = []
    for e in es:
        srcs.append(f"  {e.name}:")
        for k, s in e.sources.items():
            text = s if isinstance(s, str) else s.get("from", "")
            srcs.append(f"    {k}: {text}")
    return "\n".join([head, *rows, f"default: {DEFAULT}; model:DEVICE[:tpN][:DTYPE][:ENGINE] names one; sources:",
                      *srcs])
