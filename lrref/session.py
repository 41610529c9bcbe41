"""Decode from Python: a :class:`SessionConfig` in; a :class:`Session` holding the loaded models out.

A session loads the target (and, for Lookahead Reasoning modes, the draft and the verifier) once and decodes
with them as often as asked; ``lrref generate`` and ``lrref bench`` are this class behind argparse::

    from lrref import Session

    with Session(backend="hf", random_weights="tiny", max_tokens=32) as s:   # no download: random weights
        r = s.generate("a question", trace=False)
        print(r.tokens, r.accepted_steps, r.mode)                           # 32 0 lr-sync

:class:`SessionConfig` checks its fields when it is built; :class:`Session` checks what needs the machine
(the backend ``auto`` picks, the llama.cpp binding, CUDA devices, the prepared models and their vocabularies)
before any weights load.  Bad input raises :class:`lrsim.errors.InputError` (a ``ValueError``; some as its
:class:`~lrsim.errors.UsageError`) with the one-line message ``lrref`` prints.  Nothing here changes the
arguments it is given or ``os.environ``: prefix caching reaches the llama.cpp backends and lr-async's draft
process as an argument.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from lrsim.errors import InputError, UsageError
from lrsim.fields import option

from .config import AUTO, BACKENDS, DRAFT_MODES, DecodeConfig, mode_list, parse_mode

#: SessionConfig fields that are decoding defaults: :meth:`Session.generate` and :meth:`Session.bench` take them
#: as keywords for one call (the rest say which models load, and how)
DECODE_OPTIONS = ("gamma", "auto_max_gamma", "auto_modes", "width", "ngram", "ngram_max", "ngram_min",
                  "max_step_tokens", "max_tokens", "temperature", "top_p", "top_k", "draft_temperature", "seed",
                  "system", "threads", "target_threads", "draft_threads", "log_text", "concurrency")
_DECODE_FIELDS = {f.name: f for f in fields(DecodeConfig)}
NO_PREFIX_CACHING = "--no-prefix-caching applies to the llama.cpp backend (--backend llamacpp) only"


def _like(name: str) -> Any:
    """A field with :class:`lrref.config.DecodeConfig`'s default and help for ``name``."""
    f = _DECODE_FIELDS[name]
    return option(f.metadata["help"], f.default)


@dataclass(frozen=True)
class SessionConfig:
    """Which models to load, how, and the decoding defaults (``lrref generate`` / ``bench`` flags by field name).

    Built from keywords; checked at once (:meth:`__post_init__`).  ``modes`` decides which models load: a draft
    and a verifier only for LR modes, the draft in this process only for lr-sync (lr-async starts its own draft
    process per decoder).

    :raises lrsim.errors.InputError: a value out of range or settings that do not go together (one line).
    """

    backend: str = option("auto (llama.cpp when it can run the models, else hf), hf, vllm or llamacpp", "auto")
    target: str | None = option("target model: registry name, HF model dir or .gguf file (default: the registry's)",
                                None)
    draft: str | None = option("draft model, as target (default: the registry's)", None)
    judge: str | None = option("judge model dir (judge verifier; default: the target)", None)
    embedding: str | None = option("embedding model (embedding and math verifiers; default all-mpnet-base-v2)", None)
    cache_dir: str | None = option("model cache (default $LRREF_CACHE or ~/.cache/lrref)", None)
    verifier: str | None = option("judge, embedding, score, random, exact or math (default: exact, token-identical "
                                  "steps only; random with random weights, the only one allowed there)", None)
    threshold: float | None = option("verifier threshold (default: the verifier's)", None)
    exact_strict: bool = option("exact verifier: only token-identical steps pass (the lossless setting)", False)
    random_weights: str | None = option("TARGET[,DRAFT] architectures built with random weights (hf backend)", None)
    prompt_tokens: int | None = option("random weights: prompt length in random token ids (default 128)", None)
    device: str = option("torch device of the target (hf backend): cpu, cuda or cuda:N", "cpu")
    static_cache: Any = option("hf backend: a static KV cache for the target and the in-process draft, CUDA graphs "
                               "on CUDA (lrref.backends.static_cache.StaticCacheConfig; lrref --cuda-graphs); None: "
                               "the dynamic cache", None)
    draft_device: str | None = option("torch device of the draft (default: the target's)", None)
    dtype: str = _like("dtype")
    prefix_caching: bool = option("llama.cpp: reuse KV across requests (False: every request prefills its whole "
                                  "prompt, vLLM's enable_prefix_caching=False)", True)
    require_idle: bool = option("refuse to load models on a busy machine (lrref.host.load.require_idle)", False)
    modes: tuple[str, ...] = option("the modes this session decodes (the first is generate's default)", ("lr-sync",))
    gamma: int = _like("gamma")
    auto_max_gamma: int = _like("auto_max_gamma")
    auto_modes: tuple[str, ...] = _like("auto_modes")
    width: int = _like("width")
    ngram: int = _like("ngram")
    ngram_max: int = _like("ngram_max")
    ngram_min: int = _like("ngram_min")
    max_step_tokens: int = _like("max_step_tokens")
    max_tokens: int = _like("max_tokens")
    temperature: float = _like("temperature")
    top_p: float = _like("top_p")
    top_k: int = _like("top_k")
    draft_temperature: float | None = _like("draft_temperature")
    seed: int = _like("seed")
    system: str = _like("system")
    threads: int = _like("threads")
    target_threads: int = _like("target_threads")
    draft_threads: int = _like("draft_threads")
    log_text: bool = _like("log_text")
    concurrency: int = _like("concurrency")

    def __post_init__(self) -> None:
        """Check the fields in the order ``lrref`` does: modes and decoding values, the backend's flags, random
        weights, the verifier.

        :raises lrsim.errors.InputError: the first problem, one line.
        """
        given = self.modes
        object.__setattr__(self, "modes", mode_list(given))
        if not self.modes or len(set(self.modes)) != len(self.modes) or not all(m.strip() for m in self.modes):
            raise InputError(f"modes must list distinct modes, got {given!r}")
        if self.backend not in BACKENDS:
            raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        for name in ("threads", "target_threads", "draft_threads"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)}")
        cfgs = [self.decode_config(m) for m in self.modes]
        _check_backend_flags(self, cfgs)
        if self.prompt_tokens is not None and not self.random_weights:
            raise UsageError("--prompt-tokens is for --random-weights")
        if self.threshold is not None and self.verifier is None and not self.random_weights:
            raise UsageError("--threshold needs --verifier: the default verifier (exact, token-identical steps only) "
                             "takes none")
        if self.random_weights and self.verifier not in (None, "random"):
            raise UsageError(f"--random-weights needs --verifier random (acceptance of random weights means "
                             f"nothing), got --verifier {self.verifier}")
        _ = self.random, self.verifier_config

    @cached_property
    def random(self):
        """``random_weights`` parsed (:class:`lrref.backends.random_weights.RandomWeights`), None without it."""
        if not self.random_weights:
            return None
        from .backends import random_weights

        return random_weights.parse(self.random_weights, self.prompt_tokens or 128, self.max_tokens, self.cache_dir)

    @property
    def verifier_config(self):
        """The verifier as configured (:class:`lrref.verify.verifiers.VerifierConfig`), its default resolved."""
        from .verify.verifiers import DEFAULT_STRICT, DEFAULT_VERIFIER, VerifierConfig

        name = self.verifier or ("random" if self.random_weights else DEFAULT_VERIFIER)
        model = self.judge if name == "judge" else self.embedding if name in ("embedding", "math") else None
        strict = self.exact_strict or (self.verifier is None and name == "exact" and DEFAULT_STRICT)  # the default
        return VerifierConfig(name, self.threshold, model, normalize=not strict, seed=self.seed)

    @property
    def lr(self) -> bool:
        """Some mode needs a draft and a verifier (an LR mode, or auto, which may choose one)."""
        return any(parse_mode(m)[0] in DRAFT_MODES for m in self.modes)

    def decode_config(self, mode: str | None = None, **options: Any) -> DecodeConfig:
        """How to decode in ``mode`` (default: the first of :attr:`modes`): this config's decoding defaults, with
        ``options`` (names in :data:`DECODE_OPTIONS`) replacing some.

        :raises lrsim.errors.InputError: an unknown option or mode, a value out of range.
        """
        bad = sorted(set(options) - set(DECODE_OPTIONS))
        if bad:
            raise InputError(f"not a decoding option: {', '.join(bad)} (they are: {', '.join(DECODE_OPTIONS)})")
        values = {name: getattr(self, name) for name in DECODE_OPTIONS} | options
        return DecodeConfig(mode=mode or self.modes[0], **values, dtype=self.dtype, device=self.device,
                            draft_device=self.draft_device, verify_identical=bool(self.random_weights))


def _check_backend_flags(c: SessionConfig, cfgs: Sequence[DecodeConfig]) -> None:
    """Flags the named backend cannot honour (``auto`` picks hf whenever one of them needs torch)."""
    if c.backend == "vllm" and any(d.base == AUTO for d in cfgs):
        raise UsageError("--mode auto switches n-gram on and off between cycles, and --backend vllm builds it into "
                         "the engine: use --backend hf or llamacpp")
    if c.backend == "vllm" and len({d.ngram_cfg for d in cfgs}) > 1:
        raise UsageError("--backend vllm builds n-gram into the engine: run modes with and without n-gram ('+sd') "
                         "separately")
    draft_device = c.draft_device and c.backend != "vllm"  # vllm: lr-async's draft engine, cpu or cuda:N
    if c.backend not in ("auto", "hf") and (c.device != "cpu" or draft_device or c.random_weights):
        raise UsageError(f"--device, --draft-device and --random-weights are for --backend hf, not {c.backend} "
                         "(--draft-device also for lr-async's draft engine on vllm)")
    if c.backend not in ("auto", "llamacpp") and not c.prefix_caching:
        raise UsageError(NO_PREFIX_CACHING)



@dataclass(frozen=True)
class GenerateResult:
    """One decoded prompt: what ``lrref generate --json`` prints (:meth:`to_dict`), the decoder's result and the
    machine's load over the run."""

    text: str
    steps: tuple[dict, ...]  #: committed steps: ``text``, ``source`` (draft or target), ``tokens``
    accepted_steps: int
    tokens: int
    finish: str  #: ``eos`` or ``max_tokens``
    trace: str | None  #: the trace's path (None: none written)
    wall_s: float
    tokens_per_s: float
    mode: str
    result: Any = field(default=None, repr=False, compare=False)  #: :class:`lrref.decode.request.Result`
    load: Any = field(default=None, repr=False, compare=False)  #: :class:`lrref.host.load.Load` or None

    def to_dict(self) -> dict:
        """The JSON object of ``lrref generate --json``."""
        return {k: list(v) if k == "steps" else v for k, v in ((f, getattr(self, f)) for f in _GENERATE_KEYS)}


_GENERATE_KEYS = ("text", "steps", "accepted_steps", "tokens", "finish", "trace", "wall_s", "tokens_per_s", "mode")


@dataclass(frozen=True)
class BenchResult:
    """Modes side by side on problems: ``rows`` (:func:`lrref.bench.summarize`), ``meta`` (what ``results.json``
    records about the run), the files written, and the machine's load over the benchmark."""

    rows: list[dict]
    meta: dict
    results: Path  #: results.json
    csv: Path  #: results.csv
    stats: list = field(default_factory=list, repr=False, compare=False)  #: :class:`lrref.bench.ModeStats`
    load: Any = field(default=None, repr=False, compare=False)  #: :class:`lrref.host.load.Load` or None

    def to_dict(self) -> dict:
        """The JSON object of ``lrref bench --json``."""
        return {"meta": self.meta, "modes": self.rows, "results": str(self.results)}


class Session:
    """Loaded models, shared by every decode: config in; backends, verifier, trace writers and decoders out.

    ``Session(config)``, or ``Session(**fields)`` for ``Session(SessionConfig(**fields))`` (with a config too,
    the fields replace its own).  Use it as a context manager, or call :meth:`close`.

    :param outputs: files the caller will write (a trace, results): each is checked writable before any model is
        looked up.
    :param log: called with each line the run has to say before decoding (the backend ``auto`` chose, the dtype
        ``auto`` resolved to); ``lrref`` prints them on stderr.  The lines are also in :attr:`notes`.
    :raises lrsim.errors.InputError: bad settings, an unwritable output, a draft whose vocabulary is not the
        target's.
    :raises lrsim.errors.DomainError: a model that is not prepared (:class:`lrref.models.ModelError`), a missing
        llama.cpp binding, a busy machine (``require_idle``).

    Attributes: :attr:`config`; :attr:`backend` (``auto`` resolved); :attr:`paths` (the models by role, as the
    trace header's ``models``); :attr:`dtype` and :attr:`draft_dtype` (resolved, ``gguf:<quantisation>`` on
    llama.cpp); :attr:`target`, :attr:`draft` (lr-sync's, in this process) and :attr:`verifier` (None without an
    LR mode).
    """

    def __init__(self, config: SessionConfig | None = None, *, outputs: Iterable[str | os.PathLike] = (),
                 log: Callable[[str], None] | None = None, **settings: Any):
        if config is None:
            config = SessionConfig(**settings)
        elif settings:
            config = replace(config, **settings)
        self.config = config
        self.target = self.draft = self.verifier = None
        self.notes: list[str] = []
        self._prepare(outputs)
        for line in self.notes if log is not None else ():
            log(line)
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    # --- before any weights load ----------------------------------------------------------------------------

    def _prepare(self, outputs: Iterable[str | os.PathLike]) -> None:
        """Everything that can fail before the weights load, in ``lrref``'s order: backend, devices, outputs,
        models and vocabularies, the machine's load; then the lines to say."""
        from .backends import auto as backend_auto

        c = self.config
        self.backend, auto = backend_auto.resolve(c, c.lr)
        if not c.prefix_caching and self.backend != "llamacpp":
            raise UsageError(NO_PREFIX_CACHING)
        if self.backend == "llamacpp":  # one line naming the extra, before any model loads
            from .backends.llamacpp_ffi import require_binding

            require_binding()
        _check_devices(c)
        for path in outputs:
            _writable(Path(path))
        self.paths = _random_paths(c) if c.random else _resolve_models(c, self.backend)
        if c.require_idle:  # the last check before any model loads
            from .host.load import require_idle

            require_idle()
        if auto:
            self.notes.append(auto)
        if self.backend == "llamacpp":
            if c.dtype != "auto":
                self.notes.append(f"--backend llamacpp: --dtype {c.dtype} ignored (GGUF quantised weights)")
        elif c.dtype == "auto":
            from .host.cpu import describe_auto

            self.notes.append(describe_auto(c.device))

    # --- loading --------------------------------------------------------------------------------------------

    def _load(self) -> None:
        from .host.cpu import resolve_dtype
        from .verify import verifiers

        c = self.config
        self._modes = [c.decode_config(m) for m in c.modes]
        if self.backend == "llamacpp":
            self._llamacpp_backends()
            self.dtype = self.draft_dtype = f"gguf:{self.target.quant}"
        else:
            self.dtype = resolve_dtype(c.dtype, c.device)
            self.draft_dtype = resolve_dtype(c.dtype, c.draft_device or c.device)
            self._torch_backends()
        if "draft" in self.paths:
            vc = c.verifier_config
            if "embedding" in self.paths:
                vc = verifiers.VerifierConfig(vc.name, c.threshold, self.paths["embedding"])
            self.verifier = verifiers.build(vc, self.target, c.cache_dir)

    @property
    def _depth(self) -> int:
        """The deepest look-ahead a mode may run: ``gamma``, or auto's ``auto_max_gamma`` (prefixes pooled)."""
        c = self.config
        return max([c.gamma] + [c.auto_max_gamma for m in self._modes if m.base == "auto"])

    def _llamacpp_backends(self) -> None:
        """Target and lr-sync draft on their GGUF files, each sequence's KV sized for a prompt plus ``max_tokens``."""
        from .backends.llamacpp import LlamaCppBackend

        c = self.config
        ctx = max(2048, c.max_tokens + 1024)
        n = c.concurrency  # requests in flight: each needs its own sequence slots
        slots = max(8, 2 * (self._depth + 1)) * n
        self.target = LlamaCppBackend(self.paths["target"], threads=c.threads, slots=slots, ctx_per_seq=ctx,
                                      prefix_caching=c.prefix_caching)
        if any(m.draft_in_process for m in self._modes):
            self.draft = LlamaCppBackend(self.paths["draft"], threads=c.threads, slots=4 * n, ctx_per_seq=ctx,
                                         prefix_caching=c.prefix_caching)

    def _torch_backends(self) -> None:
        """Target (hf or vllm) and the lr-sync draft (hf)."""
        if self.backend == "vllm":
            from .backends.vllm import VLLMBackend

            self.target = VLLMBackend(self.paths["target"], dtype=self.dtype, ngram=self._modes[0].ngram_cfg)
        else:
            self.target = self._hf_model("target")
        if any(m.draft_in_process for m in self._modes):
            self.draft = self._hf_model("draft")

    def _hf_model(self, role: str):
        """The ``role`` ('target', or lr-sync's in-process 'draft') as an hf backend on its device; random weights
        with ``random_weights``."""
        from .host.cpu import resolve_dtype

        c = self.config
        n = c.concurrency  # requests in flight: each keeps its prefixes in the pools
        device = c.device if role == "target" else c.draft_device or c.device
        pool = max(8, 2 * (self._depth + 1)) * n if role == "target" else 8 * n
        kw = dict(dtype=resolve_dtype(c.dtype, device), threads=c.threads, pool_size=pool, device=device)
        if c.random is not None:
            from .backends.hf_random import RandomBackend

            be = RandomBackend(**c.random.model(role), **kw)
        else:
            from .backends.hf import HFBackend

            be = HFBackend(self.paths[role], **kw)
        if c.static_cache is not None:  # CUDA graphs where the model is on CUDA; a draft on a CPU: the cache alone
            be.set_static_cache(c.static_cache, cuda_graphs=be.device.type == "cuda")
        return be

    # --- decoding -------------------------------------------------------------------------------------------

    def decode_config(self, mode: str | None = None, **options: Any) -> DecodeConfig:
        """:meth:`SessionConfig.decode_config` of this session's config."""
        return self.config.decode_config(mode, **options)

    def backend_info(self, cfg: DecodeConfig) -> dict | None:
        """The trace header's ``config.backend_info`` for one mode (llama.cpp: binding, threads, quantisation; hf
        on a static cache: its sizes and whether CUDA graphs replay the passes)."""
        if self.backend == "hf" and self.config.static_cache is not None:
            from dataclasses import asdict

            st = self.target.static
            return {"static_cache": asdict(st.cfg) if st is not None else None,
                    "cuda_graphs": bool(st is not None and st.cfg.cuda_graphs)}
        if self.backend != "llamacpp":
            return None
        from .backends.llamacpp import header_info

        draft_threads = cfg.draft_threads if cfg.spec.draft_runs == "own" else cfg.threads
        return header_info(self.target, self.paths["draft"] if cfg.is_lr else None, cfg.main_threads, draft_threads)

    def _check(self, cfg: DecodeConfig) -> None:
        """Refuse a decode the loaded models cannot run."""
        if self.target is None:
            raise InputError("the session is closed")
        if cfg.is_lr and "draft" not in self.paths or cfg.draft_in_process and self.draft is None:
            raise InputError(f"mode {cfg.mode} needs models this session did not load: list it in "
                             f"SessionConfig(modes=...), which has {', '.join(self.config.modes)}")
        if self.backend == "vllm" and cfg.ngram_cfg != self._modes[0].ngram_cfg:
            raise UsageError("--backend vllm builds n-gram into the engine: run modes with and without n-gram "
                             "('+sd') separately")
        if (self.backend == "vllm" and cfg.draft_process and getattr(self.target, "cuda", False)
                and cfg.draft_device in (None, "cpu", "cuda", "cuda:0")):  # the target's engine holds cuda:0
            raise UsageError("lr-async on --backend vllm runs the draft's engine on a GPU of its own: give it one with "
                             "--draft-device cuda:N, N >= 1 (the target's engine is on GPU 0)")
        if self.config.random is not None and cfg.max_tokens != self.config.max_tokens:
            replace(self.config, max_tokens=cfg.max_tokens)  # checks prompts + output against the positions

    def decoder(self, cfg: DecodeConfig, trace: str | os.PathLike | None = None):
        """A :class:`lrref.decode.decoder.Decoder` of ``cfg`` on this session's models, writing a trace to
        ``trace`` (None: none).  Close both when done: ``dec.close()`` (lr-async's draft process), then
        ``dec.trace.close()`` (the header gets the machine's load over the trace's window).

        :raises lrsim.errors.InputError: a mode whose models this session did not load.
        """
        from lrsim.trace import TraceWriter

        from .config import config_dict
        from .decode.decoder import Decoder, make_header
        from .host.load import Monitor

        self._check(cfg)
        c, vc, rw = self.config, self.config.verifier_config, self.config.random
        tw = None
        if trace is not None:
            vinfo = None
            if self.verifier is not None:
                vinfo = config_dict(vc) | {"name": self.verifier.name, "threshold_used": vc.t}
            mon = Monitor()  # the trace's window: at close, its header gets what else ran (hardware.load)
            tw = TraceWriter(Path(trace), make_header(cfg, dict(self.paths), self.backend, vinfo,
                                                      notes=rw.note(vc.t) if rw else None,
                                                      backend_info=self.backend_info(cfg),
                                                      random_weights=rw.header(vc.t) if rw else None),
                             at_close=lambda h: h.hardware.update(load=mon.record()))
        try:
            return Decoder(cfg, self.target, self.draft, self.verifier, tw, draft_path=self.paths.get("draft"),
                           draft_dtype=self.draft_dtype,
                           draft_kind=self.backend if self.backend in ("llamacpp", "vllm") else "hf",
                           draft_random=rw.model("draft") if rw else None, prefix_caching=c.prefix_caching)
        except BaseException:
            if tw is not None:
                tw.close()
            raise

    def generate(self, prompt: str, mode: str | None = None, *, trace: str | os.PathLike | Literal[False] | None = None,
                 **options: Any) -> GenerateResult:
        """Decode one question (chat-templated with ``system``) in ``mode`` (default: the config's first).

        :param trace: the trace's path; None: ``runs/generate-<time>-<mode>.jsonl`` as ``lrref generate``;
            False: no trace.
        :param options: decoding options for this call (:data:`DECODE_OPTIONS`), e.g. ``max_tokens=64``.
        :raises lrsim.errors.InputError: an empty prompt, a bad option, a mode this session cannot run.
        """
        from .host.load import Monitor

        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("empty prompt")
        cfg = self.decode_config(mode, **options)
        if trace is None:
            trace = f"runs/generate-{_stamp()}-{cfg.mode.replace('+', '_')}.jsonl"
        path = None if trace is False else Path(trace)
        if path is not None:
            _writable(path)
        dec = self.decoder(cfg, path)
        mon = Monitor()
        try:
            r = dec.run(0, self.target.encode_chat(prompt, cfg.system))
        finally:
            dec.close()
            if dec.trace is not None:
                dec.trace.close()
        steps = tuple({"text": st.text, "source": st.source, "tokens": len(st.ids)} for st in r.steps)
        return GenerateResult(r.text, steps, r.accepted_steps, len(r.ids), r.finish,
                              None if path is None else str(path), round(r.wall_s, 3),
                              round(len(r.ids) / max(r.wall_s, 1e-9), 3), cfg.mode, result=r, load=mon.now())

    def bench(self, problems: Sequence[Mapping | str], modes: Sequence[str] | None = None,
              out: str | os.PathLike | None = None, *, meta: Mapping | None = None,
              log: Callable[[str], None] | None = None, loadavg_start: Sequence[float] | None = None,
              warmup: int = 0, **options: Any) -> BenchResult:
        """``lrref bench``: every problem in every mode (``concurrency`` 1: problem by problem; N: N at once per
        mode), one trace per mode, ``results.json`` and ``results.csv`` in ``out`` (rewritten after each problem).

        :param problems: ``{"question", "gold"}`` dicts (:func:`lrref.bench.load_dataset`), or questions alone
            (answers then go unchecked).
        :param modes: default: the config's.
        :param out: directory; None: ``runs/bench-<time>``.
        :param meta: entries that lead ``results.json``'s ``meta`` (``lrref bench``: its command and dataset).
        :param log: called with one line per finished request.
        :param loadavg_start: the load average recorded as the start (default: now).
        :param warmup: requests each mode decodes first, neither timed nor recorded (on a GPU the first request
            pays kernel and allocator warm-up); their questions are the first problems' with a prefix, so no timed
            request finds its prompt in KV.
        :param options: decoding options for this call (:data:`DECODE_OPTIONS`).
        :raises lrsim.errors.InputError: no problems, a bad mode or option, an unwritable ``out``.
        """
        from . import bench

        modes = tuple(modes or self.config.modes)
        if len(set(modes)) != len(modes):
            raise InputError(f"modes must list distinct modes, got {modes!r}")
        cfgs = {m: self.decode_config(m, **options) for m in modes}
        for cfg in cfgs.values():
            self._check(cfg)
        rows = [{"question": p, "gold": None} if isinstance(p, str) else dict(p) for p in problems]
        if not rows:
            raise InputError("no problems")
        if warmup < 0:
            raise InputError(f"warmup must be >= 0, got {warmup}")
        warm = [f"(warm-up {j + 1}) {rows[j % len(rows)]['question']}" for j in range(warmup)]
        out = Path(out or f"runs/bench-{_stamp()}")
        _writable(out / "results.json")
        first = cfgs[modes[0]]
        head = _BenchMeta(self, dict(meta or {}), len(rows), cfgs, loadavg_start, warmup)
        trace = lambda m: out / f"trace-{m.replace('+', '_')}.jsonl"  # noqa: E731
        stats = bench.run_bench(rows, modes, lambda m: self.decoder(cfgs[m], trace(m)),
                                lambda q: self.target.encode_chat(q, first.system), self.target.decode,
                                log=log or (lambda _: None),
                                progress=lambda st: bench.write_results(out, head(min(x.requests for x in st)),
                                                                        bench.summarize(st)),
                                concurrency=first.concurrency, warmup=warm)
        summary = bench.summarize(stats)
        final = head(len(rows))
        j, c = bench.write_results(out, final, summary)
        return BenchResult(summary, final, j, c, stats, head.monitor.now())

    # --- closing --------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the models that hold native memory (llama.cpp); the session decodes no more."""
        for be in (self.draft, self.target):
            if be is not None and hasattr(be, "close"):
                be.close()
        self.target = self.draft = self.verifier = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session(backend={self.backend!r}, models={self.paths!r}, modes={self.config.modes!r})"


class _BenchMeta:
    """``results.json``'s ``meta`` of one benchmark, ``done`` problems in (the benchmark's window starts here)."""

    def __init__(self, s: Session, lead: dict, n: int, cfgs: dict, loadavg_start: Sequence[float] | None,
                 warmup: int = 0):
        from .host.load import Monitor

        self.s, self.lead, self.n, self.cfgs, self.warmup = s, lead, n, cfgs, warmup
        self.load0 = os.getloadavg() if loadavg_start is None else loadavg_start
        self.t0 = time.time()
        self.monitor = Monitor()

    def __call__(self, done: int) -> dict:
        from .host.cpu import hardware_facts

        s, c = self.s, self.s.config
        first = next(iter(self.cfgs.values()))
        return self.lead | {
            "n": self.n, "done": done, "models": s.paths, "backend": s.backend, "dtype": s.dtype,
            "verifier": c.verifier_config.name, "concurrency": first.concurrency, "warmup": self.warmup,
            "device": c.device,
            "draft_device": c.draft_device or c.device, "threshold": c.verifier_config.t,
            "config": {m: cfg.trace_config() for m, cfg in self.cfgs.items()},
            "wall_s": round(time.time() - self.t0, 1), "loadavg_start": self.load0, "loadavg_now": os.getloadavg(),
            "load": self.monitor.record(), "cpus": os.cpu_count(), "hardware": hardware_facts(s.dtype, first.threads)}


# --- checks that need the machine ---------------------------------------------------------------------------


def _check_devices(c: SessionConfig) -> None:
    """A CUDA device that torch cannot see is refused now (one line), before any model loads."""
    wanted = [d for d in (c.device, c.draft_device) if d and d.startswith("cuda")]
    if not wanted:
        return
    import torch

    for d in wanted:
        if not torch.cuda.is_available():
            raise UsageError(f"--device {d}: torch sees no CUDA device here (torch {torch.__version__})")
        if torch.device(d).index is not None and torch.device(d).index >= torch.cuda.device_count():
            raise UsageError(f"--device {d}: torch sees {torch.cuda.device_count()} CUDA device(s)")


def _writable(path: Path) -> None:
    """An output that cannot be written fails now, before any model loads."""
    from lrsim.atomic import check_writable

    try:
        check_writable(path)
    except ValueError as e:
        raise InputError(str(e)) from None


def _resolve_models(c: SessionConfig, backend: str) -> dict:
    """Model paths by role (GGUF files on llama.cpp), none loaded; the draft's vocabulary checked against the
    target's."""
    from . import models
    from .backends.vocab import check_vocab
    from .verify.verifiers import uses_embedding

    lm = models.resolve_gguf if backend == "llamacpp" else models.resolve
    out = {"target": lm(c.target or models.DEFAULT_TARGET, c.cache_dir)}
    if c.lr:
        vc = c.verifier_config
        out["draft"] = lm(c.draft or models.DEFAULT_DRAFT, c.cache_dir)
        if uses_embedding(vc.name, vc.t):
            out["embedding"] = models.resolve(c.embedding or models.DEFAULT_EMBEDDING, c.cache_dir)
        if vc.name == "judge" and c.judge:
            out["judge"] = models.resolve(c.judge, c.cache_dir)
    paths = {k: str(v) for k, v in out.items()}
    if "draft" in paths:
        check_vocab(paths["target"], paths["draft"])
    return paths


def _random_paths(c: SessionConfig) -> dict:
    """The models' names by role with random weights (``random:ARCH``)."""
    out = {"target": f"random:{c.random.target.name}"}
    if c.lr:
        out["draft"] = f"random:{c.random.draft.name}"
    return out


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


__all__ = ["BACKENDS", "DECODE_OPTIONS", "BenchResult", "GenerateResult", "Session", "SessionConfig"]
