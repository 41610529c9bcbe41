"""Decoding modes and :class:`DecodeConfig` (serialised, with its help, into every trace header).

No torch here: the CLI validates a configuration before any model loads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields

from lrsim.errors import InputError
from lrsim.fields import help_texts, option
from lrsim.modes import ALL_DECODE_MODES as MODES  # every mode, canonical names (lrsim.modes: the one home)
from lrsim.modes import AUTO, REGISTRY, DecodeMode
from lrsim.modes import DECODE_MODES as BASE_MODES
from lrsim.modes import LR_DECODE_MODES as LR_MODES  # base modes that need a draft and a verifier

from .backends.base import Sampling
from .backends.ngram import NgramConfig
from .host.cpu import DTYPE_HELP, DTYPES

DEFAULT_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
BENCH_MODES = ("ar", "sd", "lr-sync", "lr-async", "lr+sd")  # lrref bench's default
BACKENDS = ("auto", "hf", "vllm", "llamacpp")  # --backend, SessionConfig.backend
MODE_HELP = ("ar, sd (= ar + n-gram), lr-sync, lr-async; append '+sd' for n-gram inside steps; 'lr+sd' = "
             "lr-async+sd; auto: the decoder chooses among ar, sd and lr-sync(+sd) and gamma at every step boundary "
             "(--auto-modes: lr-async too)")
DRAFT_IN_PROCESS = tuple(n for n, m in REGISTRY.items() if m.draft_runs == "main")  #: draft in the main process
DRAFT_MODES = tuple(n for n, m in REGISTRY.items() if m.draft)  #: need a draft and a verifier (auto may choose LR)
DEFAULT_NGRAM = 4  # n-gram tokens per pass of the '+sd' modes
MAX_AUTO_GAMMA = 8  # auto_max_gamma's bound
AUTO_MODES = ("ar", "sd", "lr-sync", "lr-async")  #: what auto may choose among (auto_modes)
DEFAULT_AUTO_MODES = ("ar", "sd", "lr-sync")  #: auto_modes' default: lr-async (a draft process) is asked for
AUTO_MODES_HELP = ("auto: the modes it chooses among, of ar, sd, lr-sync (with and without '+sd') and lr-async "
                   "(gamma 2..auto_max_gamma, stage by stage; starts the draft process); default ar,sd,lr-sync")
DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def mode_list(given: str | Sequence[str]) -> tuple[str, ...]:
    """Modes as a tuple: a comma-separated string (each name stripped) or a sequence (``modes``, ``auto_modes``)."""
    return tuple(m.strip() for m in given.split(",")) if isinstance(given, str) else tuple(given)


def config_dict(obj) -> dict:
    """A dataclass config as ``{field: value}`` (nested dataclasses as dicts), for the trace header."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = config_dict(v) if hasattr(v, "__dataclass_fields__") else v
    return out


def parse_mode(mode: str) -> tuple[str, bool]:
    """``'lr-async+sd'`` -> ``('lr-async', True)``; ``'sd'`` -> ``('ar', True)``; ``'lr+sd'`` = lr-async+sd;
    ``'auto'`` -> ``('auto', False)`` (it chooses n-gram speculation itself).

    :raises InputError: an unknown mode.
    """
    m = mode.strip().lower()
    ng = m.endswith("+sd")
    if ng:
        m = m[:-3]
    m = {"lr": "lr-async"}.get(m, m)
    if m == AUTO and not ng:
        return AUTO, False
    spec = REGISTRY.get(m)
    if spec is None or spec.sim is None or (ng and spec.ngram != "suffix"):
        raise InputError(f"unknown mode {mode!r} ({MODE_HELP})")
    if spec.ngram == "on":  # sd: ar with n-gram speculation
        return "ar", True
    return m, ng


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode (serialised, with this help, into every trace header)."""

    mode: str = option(MODE_HELP, "lr-sync")
    gamma: int = option("lookahead depth: draft steps per cycle (sync) / steps ahead (async)", 4)
    width: int = option("W: distinct draft candidates per position (sync only; needs draft temperature > 0)", 1)
    ngram: int = option("n-gram (prompt lookup) tokens proposed per target pass; 0 = off ('+sd' modes default 4)", 0)
    ngram_max: int = option("longest n-gram matched (prompt_lookup_max)", 2)
    ngram_min: int = option("shortest n-gram matched (prompt_lookup_min)", 1)
    draft_ngram: bool = option("the draft also uses n-gram speculation inside its steps when n-gram is on", True)
    max_step_tokens: int = option("step token cap", 96)
    max_tokens: int = option("total generated-token cap per request", 512)
    temperature: float = option("target sampling temperature (0 = greedy)", 0.0)
    top_p: float = option("nucleus mass", 1.0)
    top_k: int = option("top-k (0 = off)", 0)
    draft_temperature: float | None = option("draft temperature (default: same as the target)", None)
    seed: int = option("seed of every sampler (per request/cycle/position/branch)", 0)
    system: str = option("system prompt of the chat template", DEFAULT_SYSTEM)
    threads: int = option("torch (or llama.cpp) threads of the main process in ar/sd/lr-sync", 2)
    draft_threads: int = option("torch (or llama.cpp) threads of the draft process in lr-async", 1)
    target_threads: int = option("torch (or llama.cpp) threads of the target in lr-async (sync modes use the process "
                                 "setting)", 1)
    log_text: bool = option("write step and answer texts into the trace", False)
    dtype: str = option(DTYPE_HELP + " (the models are loaded with it; the trace's hardware has the choice; the "
                        "llama.cpp backend ignores it: GGUF quantised weights, see config.backend_info)", "auto")
    concurrency: int = option("requests decoded at once (closed loop: the next starts when one ends); the target "
                              "steps of all of them share forward passes", 1)
    verify_identical: bool = option("send token-identical drafts to the verifier too (random weights: acceptance "
                                    "is then the random verifier's p alone)", False)
    device: str = option("torch device of the target (hf backend): cpu, cuda or cuda:N", "cpu")
    auto_max_gamma: int = option("auto: the deepest lr-sync configuration it may choose (gamma 1..this)", 4)
    draft_device: str | None = option("torch device of the draft, in or out of process (default: the target's); "
                                      "with --backend vllm, lr-async's draft engine: cpu or cuda:N, a GPU of its own",
                                      None)
    auto_modes: tuple[str, ...] = option(AUTO_MODES_HELP, DEFAULT_AUTO_MODES)

    def __post_init__(self) -> None:
        """:raises InputError: a value out of range or settings that do not go together."""
        base = parse_mode(self.mode)[0]
        self._check_auto_modes()
        if self.dtype not in DTYPES:
            raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name, lo in (("gamma", 1), ("width", 1), ("max_step_tokens", 1), ("max_tokens", 1), ("concurrency", 1)):
            if getattr(self, name) < lo:
                raise InputError(f"{name} must be >= {lo}, got {getattr(self, name)}")
        if self.ngram < 0:
            raise InputError(f"ngram must be >= 0, got {self.ngram}")
        for name in ("device", "draft_device"):
            v = getattr(self, name)
            if v is not None and not DEVICE.match(v):
                raise InputError(f"{name.replace('_', '-')} must be cpu, cuda or cuda:N, got {v!r}")
        if base == AUTO:
            self._check_auto()
        if self.width > 1 and not REGISTRY[base].widths:
            raise InputError(f"width > 1 is implemented for {', '.join(n for n, m in REGISTRY.items() if m.widths)} "
                             "only")
        if self.width > 1 and self.draft_sampling.greedy:
            raise InputError("width > 1 needs a draft temperature > 0 (greedy drafts are all the same)")
        if self.width ** self.gamma > 256:
            raise InputError(f"width**gamma = {self.width ** self.gamma} draft paths is too many (max 256)")
        Sampling(self.temperature, self.top_p, self.top_k)
        NgramConfig(self.ngram_k, self.ngram_max, self.ngram_min)

    def _check_auto_modes(self) -> None:
        """``auto_modes`` as a tuple (:func:`mode_list`) of distinct :data:`AUTO_MODES`."""
        modes = mode_list(self.auto_modes)
        object.__setattr__(self, "auto_modes", modes)
        bad = [m for m in modes if m not in AUTO_MODES]
        if bad or not modes or len(set(modes)) != len(modes):
            why = f"{bad[0]!r} is not one of" if bad else "list distinct modes of"
            raise InputError(f"auto_modes: {why} {', '.join(AUTO_MODES)}, got {','.join(modes)!r}")

    def _check_auto(self) -> None:
        """auto chooses gamma and n-gram itself, one request at a time, width 1."""
        if not 1 <= self.auto_max_gamma <= MAX_AUTO_GAMMA:
            raise InputError(f"auto_max_gamma must be in 1..{MAX_AUTO_GAMMA}, got {self.auto_max_gamma}")
        if "lr-async" in self.auto_modes and self.auto_max_gamma < 2:
            raise InputError("auto_max_gamma must be >= 2 with lr-async among auto's modes (its gamma starts at 2: "
                             "gamma 1 runs no draft ahead of the target)")
        if self.width != 1:
            raise InputError("mode auto runs width 1 (it chooses among ar, sd and lr-sync with one draft per step)")
        if self.concurrency != 1:
            raise InputError("mode auto decodes one request at a time (concurrency 1)")

    @property
    def base(self) -> str:
        return parse_mode(self.mode)[0]

    @property
    def spec(self) -> DecodeMode:
        """The base mode's rules (:data:`lrsim.modes.REGISTRY`)."""
        return REGISTRY[self.base]

    @property
    def is_lr(self) -> bool:
        """A Lookahead Reasoning mode, or auto, which may choose one (needs a draft and a verifier)."""
        return self.base in DRAFT_MODES

    @property
    def draft_in_process(self) -> bool:
        """The draft model runs in the main process (lr-sync; auto with lr-sync among its modes)."""
        return self.base in DRAFT_IN_PROCESS and (self.base != AUTO or "lr-sync" in self.auto_modes)

    @property
    def draft_process(self) -> bool:
        """The draft runs in a process of its own (:mod:`lrref.decode.draft_worker`): lr-async; auto with lr-async
        among its modes."""
        return self.spec.draft_runs == "own" or (self.base == AUTO and "lr-async" in self.auto_modes)

    @property
    def ngram_k(self) -> int:
        return self.ngram or (DEFAULT_NGRAM if parse_mode(self.mode)[1] else 0)

    @property
    def draft_ngram_cfg(self) -> NgramConfig:
        return self.ngram_cfg if self.draft_ngram else NgramConfig()

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)

    @property
    def draft_sampling(self) -> Sampling:
        t = self.temperature if self.draft_temperature is None else self.draft_temperature
        return Sampling(t, self.top_p, self.top_k)

    @property
    def ngram_cfg(self) -> NgramConfig:
        return NgramConfig(self.ngram_k, self.ngram_max, self.ngram_min)

    @property
    def draft_on(self) -> str:
        """The draft's device."""
        return self.draft_device or self.device

    @property
    def main_threads(self) -> int:
        """torch threads of the main process (the target's): ``target_threads`` in lr-async, else ``threads``."""
        return getattr(self, self.spec.threads_field)

    def trace_config(self) -> dict:
        d = config_dict(self)
        d.update(base_mode=self.base, ngram_k=self.ngram_k, k2=(self.ngram_k + 1) if self.ngram_k else None)
        d["help"] = help_texts(self)
        return d
