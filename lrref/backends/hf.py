"""Hugging Face transformers backend: loads a model and runs steps on its batched engine
(:mod:`lrref.backends.hf_engine`: cache layout, prefix cache).

Static cache.  With ``static_cache`` (or ``cuda_graphs``) an engine keeps the
same layout in KV tensors allocated once and runs each pass at a bucketed
shape, captured as a CUDA graph on CUDA (:mod:`lrref.backends.cuda_graphs`).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from collections.abc import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from ..host.cpu import resolve_dtype, set_torch_threads  # noqa: E402
from ..quiet import quiet_transformers  # noqa: E402
from .base import BackendStats, Clock, Sampling, StepOut, StepRequest, chat_messages, run_steps  # noqa: E402
from .ngram import NgramConfig  # noqa: E402
from .passes import PassLog  # noqa: E402
from .static_cache import StaticCacheConfig  # noqa: E402
from .steps import SEPARATOR  # noqa: E402

from .hf_engine import KV, HFEngine, PrefixPool  # noqa: E402


class HFBackend:
    """One causal LM loaded with transformers, generating steps for batches of prefixes.

    Implements :class:`lrref.backends.base.Backend` (and :class:`lrref.backends.base.ScoringBackend`:
    ``next_token_logits``).

    :param path: Hugging Face model directory.
    :param dtype: "auto" (default: bfloat16 on CUDA and where the CPU computes it natively, else float32;
        :mod:`lrref.host.cpu`), "bfloat16" or "float32" (batch-shape-stable numerics).
    :param threads: torch intra-op threads (None = leave as is).
    :param prefix_cache: reuse KV of earlier rows for shared prefixes.
    :param pool_size: rows kept in the prefix cache.
    :param device: torch device of the weights and the KV cache ("cpu", "cuda", "cuda:N"); sampling runs on the CPU.
    :param static_cache: engine passes on a preallocated KV cache at bucketed shapes
        (:class:`~lrref.backends.static_cache.StaticCacheConfig`, or True for its defaults; None: transformers'
        dynamic cache); see :meth:`set_static_cache`.
    :param cuda_graphs: the static cache (``static_cache``'s sizes, or the defaults) with each bucket's forward
        captured as a CUDA graph (a CUDA ``device`` only).
    """

    separator: str | None = SEPARATOR  #: what ends a step besides EOS and the cap (None: only those)
    pass_log: PassLog | None = None  #: where every model forward is reported (:mod:`lrref.backends.passes`)

    def __init__(self, path: str | os.PathLike, dtype: str = "auto", threads: int | None = None,
                 prefix_cache: bool = True, pool_size: int = 8, name: str | None = None, device: str = "cpu",
                 static_cache: StaticCacheConfig | bool | None = None, cuda_graphs: bool = False):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.path = str(path)
        self.name = name or os.path.basename(os.path.normpath(self.path))
        self.device, self.dtype = torch.device(device), resolve_dtype(dtype, device)
        with quiet_transformers():
            self.tok = AutoTokenizer.from_pretrained(self.path)
            model = AutoModelForCausalLM.from_pretrained(self.path, dtype=getattr(torch, self.dtype))
        self._setup(model.to(self.device).eval(), prefix_cache, pool_size)
        self.eos_ids = self._eos_ids()
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos_ids[0]
        self.set_static_cache(static_cache, cuda_graphs)

    def _setup(self, model, prefix_cache: bool, pool_size: int) -> None:
        """The loaded model, the prefix cache and the counters."""
        self.model = model
        self.prefix_cache = prefix_cache
        self.pool = PrefixPool(pool_size if prefix_cache else 0)
        self.stats = BackendStats()
        self._base = self.model.base_model
        self._head = self.model.get_output_embeddings()
        self.static = None  # the static cache (lrref.backends.cuda_graphs.StaticKV), None: the dynamic cache

    def set_static_cache(self, cfg: StaticCacheConfig | bool | None, cuda_graphs: bool = False) -> None:
        """From the next engine on, run passes on a static KV cache (``cfg``; True: the default sizes) at bucketed
        shapes; ``cuda_graphs``: capture each bucket as a CUDA graph.  None (or False) and no ``cuda_graphs``:
        transformers' dynamic cache.  Greedy tokens are the dynamic cache's; ``static.stats`` counts buckets and
        graphs.

        :raises lrsim.errors.InputError: CUDA graphs off a CUDA device, an attention without 4D masks.
        """
        if not cfg and not cuda_graphs:
            self.static = None
            return
        from .cuda_graphs import StaticKV

        cfg = cfg if isinstance(cfg, StaticCacheConfig) else StaticCacheConfig()
        self.static = StaticKV(self, replace(cfg, cuda_graphs=cfg.cuda_graphs or cuda_graphs))

    def synchronize(self) -> None:
        """Wait for the device's queued work (a no-op on the CPU), before a clock is read."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _eos_ids(self) -> tuple[int, ...]:
        ids = set()
        g = getattr(self.model, "generation_config", None)
        e = getattr(g, "eos_token_id", None)
        ids.update(e if isinstance(e, list) else [e] if e is not None else [])
        if self.tok.eos_token_id is not None:
            ids.add(self.tok.eos_token_id)
        return tuple(sorted(ids))

    # -- text --------------------------------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def encode_chat(self, question: str, system: str | None = None) -> list[int]:
        msgs = chat_messages(question, system)
        text = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return self.tok(text, add_special_tokens=False).input_ids

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def vocab(self) -> dict[str, int]:
        return self.tok.get_vocab()

    # -- model calls -------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward_hidden(self, inp: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, kv: KV | None
                       ) -> tuple[torch.Tensor, KV]:
        """Decoder forward over a chunk: the last hidden states and the grown cache."""
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=kv, config=self.model.config) if kv is not None else \
            DynamicCache(config=self.model.config)
        out = self._base(input_ids=inp, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True)
        return out.last_hidden_state, [(layer.keys, layer.values) for layer in cache.layers]

    @torch.inference_mode()
    def lm_head(self, h: torch.Tensor) -> torch.Tensor:
        return self._head(h)

    @torch.inference_mode()
    def next_token_logits(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Logits of the token after each prompt (one batched prefill, no cache), float32 ``[B, V]``."""
        L = max(len(p) for p in prompts)
        inp = torch.full((len(prompts), L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(prompts), L), dtype=torch.long)
        pos = torch.zeros((len(prompts), L), dtype=torch.long)
        for i, p in enumerate(prompts):
            inp[i, :len(p)] = torch.tensor(list(p))
            attn[i, :len(p)] = 1
            pos[i] = torch.arange(L)
        t0 = time.perf_counter()
        h = self._base(input_ids=inp.to(self.device), attention_mask=attn.to(self.device),
                       position_ids=pos.to(self.device), use_cache=False).last_hidden_state
        last = h[torch.arange(len(prompts), device=self.device),
                 torch.tensor([len(p) - 1 for p in prompts], device=self.device)]
        out = self._head(last).float().cpu()
        seconds = time.perf_counter() - t0
        self.stats.forward_s += seconds
        if self.pass_log is not None:
            self.pass_log(t0, seconds, [len(p) for p in prompts], [0] * len(prompts), len(prompts),
                          torch.get_num_threads(), engine="verifier")
        return out

    # -- the interface ---------------------------------------------------------------------------
    def set_threads(self, n: int) -> None:
        """torch's intra-op threads (process-wide: an lr-sync draft in this process shares them)."""
        set_torch_threads(n)

    def engine(self, sampling: Sampling, ngram: NgramConfig, clock: Clock | None = None) -> HFEngine:
        """A running batch (continuous batching, the prefix cache shared with :meth:`generate_steps`)."""
        if self.static is not None:
            return self.static.engine(sampling, ngram, clock or time.perf_counter)
        return HFEngine(self, sampling, ngram, clock or time.perf_counter)

    def generate_steps(self, reqs: Sequence[StepRequest], sampling: Sampling, ngram: NgramConfig = NgramConfig(),
                       clock: Clock | None = None) -> list[StepOut]:
        """One step for each request, batched; each row stops at its own boundary or cap."""
        return run_steps(self.engine(sampling, ngram, clock), reqs)
