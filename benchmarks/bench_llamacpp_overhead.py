"""lrref's ar decoding against a bare llama.cpp greedy loop on the same binding and model (issue 32's target:
lrref ar >= 0.95x of raw llama.cpp).

Both decode the same chat-templated question greedily for ``--tokens`` tokens with the default target GGUF
(Qwen2.5-Coder 1.5B, ``lrref models prepare``) on ``--threads`` threads, alternating ``--repeat`` times, so
both see the same load:

- *raw*: one llama.cpp context of one sequence (``lrref.backends.llamacpp_ffi``), the prompt in one batch, then
  one token per ``llama_decode``, argmax of the logits in numpy, stop at end-of-generation;
- *lrref*: ``lrref.Session`` in ``ar`` (steps, trace rows and stop checks; no trace file, no prefix caching).

Tokens per second of the decode loop (prompt prefill included in both), best and median; the ratio is lrref's
best over raw's best.  The load average before and after and the CPU are printed: run it alone.

Run: python benchmarks/bench_llamacpp_overhead.py [--tokens 128] [--repeat 3] [--threads 2] [--json]
"""

import argparse
import ctypes
import os
import statistics
import time

import numpy as np
from report import machine, report

QUESTION = "Tom reads 18 pages a day. How many pages does he read in 2 weeks?"
TARGET = 0.95


class Raw:
    """A bare greedy loop on llama.cpp: one context, one sequence, no lrref machinery."""

    def __init__(self, path: str, threads: int):
        from lrref.backends import llamacpp_ffi as ffi

        self.ffi, self.lib = ffi, ffi.load()
        self.model = self.lib.llama_model_load_from_file(path.encode(), self.lib.llama_model_default_params())
        self.vocab = self.lib.llama_model_get_vocab(self.model)
        self.n_vocab = self.lib.llama_vocab_n_tokens(self.vocab)
        cp = ffi.context_params(2048, 512, 1, threads, kv_unified=False, flash_attn=-1)
        self.ctx = self.lib.llama_init_from_model(self.model, cp)
        self.mem = self.lib.llama_get_memory(self.ctx)
        c_i32p = ctypes.POINTER(ctypes.c_int32)
        self.tok, self.pos = np.zeros(512, np.int32), np.zeros(512, np.int32)
        self.nseq, self.out, self.seq = np.ones(512, np.int32), np.zeros(512, np.int8), np.zeros(512, np.int32)
        base = self.seq.ctypes.data
        self.seqp = (c_i32p * 512)(*[ctypes.cast(base + 4 * i, c_i32p) for i in range(512)])
        self.batch = ffi.Batch(0, self.tok.ctypes.data_as(c_i32p), None, self.pos.ctypes.data_as(c_i32p),
                               self.nseq.ctypes.data_as(c_i32p), self.seqp,
                               self.out.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)))

    def _decode(self, ids: list[int], start: int) -> np.ndarray:
        n = len(ids)
        self.tok[:n], self.pos[:n] = ids, np.arange(start, start + n)
        self.out[:n] = 0
        self.out[n - 1] = 1
        self.batch.n_tokens = n
        if self.lib.llama_decode(self.ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        return np.ctypeslib.as_array(self.lib.llama_get_logits(self.ctx), shape=(self.n_vocab,))

    def generate(self, prompt: list[int], tokens: int) -> list[int]:
        self.lib.llama_memory_clear(self.mem, True)
        logits, pos, out = self._decode(prompt, 0), len(prompt), []
        while len(out) < tokens:
            t = int(np.argmax(logits))
            if self.lib.llama_vocab_is_eog(self.vocab, t):
                break
            out.append(t)
            logits = self._decode([t], pos)
            pos += 1
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from lrref import models
    from lrref.session import Session, SessionConfig

    load0 = os.getloadavg()
    session = Session(SessionConfig(backend="llamacpp", modes=("ar",), threads=args.threads, prefix_caching=False,
                                    max_tokens=args.tokens))
    raw = Raw(str(models.resolve_gguf(models.DEFAULT_TARGET)), args.threads)
    prompt = session.target.encode_chat(QUESTION, session.decode_config("ar").system)
    raw.generate(prompt, 8)  # warm both
    session.generate(QUESTION, trace=False, max_tokens=8)
    rates = {"raw": [], "lrref": []}
    agree = True
    for _ in range(args.repeat):
        t = time.perf_counter()
        ids = raw.generate(prompt, args.tokens)
        rates["raw"].append(len(ids) / (time.perf_counter() - t))
        t = time.perf_counter()
        r = session.generate(QUESTION, trace=False)
        rates["lrref"].append(r.tokens / (time.perf_counter() - t))
        agree = agree and r.result.ids == ids
    best = {k: max(v) for k, v in rates.items()}
    rows = [{"what": "lrref ar / raw llama.cpp (tok/s ratio)", "measured": best["lrref"] / best["raw"],
             "target": TARGET, "ratio": best["lrref"] / best["raw"] / TARGET,
             "note": f"raw best {best['raw']:.2f} (median {statistics.median(rates['raw']):.2f}) tok/s, lrref best "
                     f"{best['lrref']:.2f} (median {statistics.median(rates['lrref']):.2f}); the same tokens: {agree}"}]
    report(machine(load0, threads=args.threads), rows, args.json)


if __name__ == "__main__":
    main()
