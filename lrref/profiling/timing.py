"""Timing forward passes of a model built from its config with random weights (torch).

One shape ``(L, b, q)``: a ``DynamicCache`` holding ``L`` tokens in each of
``b`` rows, then a forward pass of ``b x q`` new tokens over it, logits at the
``q`` new positions of each row (what a decode step, ``q = 1``, or the
verification of ``q - 1`` speculated tokens needs).  After every pass the
cache is cropped back to ``L`` (``DynamicCache.crop(-q)``) and its length is
asserted, so every timed pass sees the same context.  The cache is filled by
prefilling one row of ``L`` random tokens in chunks and repeating it to ``b``
rows: what the attention reads costs the same whatever the tokens were.
Warm-up passes first, then the median of the timed ones; on a GPU the device
is synchronised before and after each timed pass.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from ..host import cpu  # noqa: E402


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu.cpu_model() if device.type == "cpu" else str(device)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type != "cpu" and hasattr(torch, "accelerator"):
        torch.accelerator.synchronize()


# --- the model (built by lrref.backends.hf_random.build_model) ---------------------------------------


def parameters(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


@dataclass
class Shape:
    """One timed point: ``context`` tokens cached per row, ``batch`` rows, ``positions`` new tokens per row."""

    context: int
    batch: int
    positions: int


@torch.inference_mode()
def prefill_row(model, length: int, chunk: int, gen: torch.Generator, device: torch.device):
    """A ``DynamicCache`` of one row holding ``length`` random tokens, fed ``chunk`` tokens at a time."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    vocab = model.config.vocab_size
    for start in range(0, length, chunk):
        n = min(chunk, length - start)
        ids = torch.randint(0, vocab, (1, n), generator=gen).to(device)
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)  # no full-vocab logits
    assert cache.get_seq_length() == length, (cache.get_seq_length(), length)
    return cache


def rows(model, cache, length: int, batch: int):
    """A ``batch``-row copy of a one-row cache, cropped to ``length`` tokens (a fresh cache for ``length = 0``)."""
    import copy

    from transformers import DynamicCache

    if length == 0:
        return DynamicCache(config=model.config)
    c = copy.deepcopy(cache)
    if c.get_seq_length() > length:
        c.crop(length - c.get_seq_length())  # a negative count removes that many tokens
    if batch > 1:
        c.batch_repeat_interleave(batch)
    assert c.get_seq_length() == length, (c.get_seq_length(), length)
    return c


@torch.inference_mode()
def time_passes(model, cache, shape: Shape, warmup: int, repeats: int, gen: torch.Generator,
                device: torch.device) -> list[float]:
    """Seconds of each timed pass of ``shape`` over ``cache`` (cropped back to the context after every pass)."""
    ids = torch.randint(0, model.config.vocab_size, (shape.batch, shape.positions), generator=gen).to(device)
    out = []
    for i in range(warmup + repeats):
        synchronize(device)
        t0 = time.perf_counter()
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=shape.positions)
        synchronize(device)
        dt = time.perf_counter() - t0
        cache.crop(-shape.positions)
        assert cache.get_seq_length() == shape.context, (cache.get_seq_length(), shape.context)
        if i >= warmup:
            out.append(dt)
    return out


def _out_of_memory(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or (isinstance(e, RuntimeError) and "alloc" in str(e).lower())


def _oom_safe(fn: Callable[[], object]) -> tuple[object, bool]:
    """``(fn(), False)``, or ``(None, True)`` if the device ran out of memory (other errors propagate)."""
    try:
        return fn(), False
    except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
        if not _out_of_memory(e):
            raise
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return None, True


def measure_grid(model, contexts: list[int], batches: list[int], positions: list[int], warmup: int, repeats: int,
                 chunk: int, seed: int, device: torch.device,
                 tick: Callable[[], None] = lambda: None) -> Iterator[tuple[Shape, float | None, str | None]]:
    """``(shape, median seconds, None)`` for every shape, or ``(shape, None, why)`` where memory ran out.

    One prefill of the longest context; each shorter context is a crop of it.
    """
    gen = torch.Generator().manual_seed(seed)
    base = prefill_row(model, max(contexts), chunk, gen, device)
    first = Shape(contexts[0], batches[0], positions[0])  # warm the process up once (allocator, kernels, caches)
    time_passes(model, rows(model, base, first.context, first.batch), first, warmup + 3, 0, gen, device)
    oom = f"out of memory on {device_name(device)}"
    for L in contexts:
        for b in batches:
            cache, failed = _oom_safe(lambda: rows(model, base, L, b))
            for q in positions:
                shape = Shape(L, b, q)
                times, failed = (None, True) if failed else _oom_safe(
                    lambda: time_passes(model, cache, shape, warmup, repeats, gen, device))
                yield (shape, None, f"context {L} batch {b}: {oom}") if failed else \
                    (shape, statistics.median(times), None)
                tick()
            cache = None  # free this batch's copy before the next is made
