"""The hf backend's batched step engine: a running batch of rows of one model with a KV cache and prefix reuse
(:class:`HFEngine`), its sampling and speculative checks, and the prefix pool.

Own decode loop (not ``generate``) so that every sequence stops at its own
step boundary and prompt-lookup speculation works for a batch.

Cache layout.  The KV cache of a batch has ``S`` slots per row; a boolean
``mask[B, S]`` says which slots hold a real token of that row.  Rows with
shorter prefixes, padding inside a chunk and rejected speculative tokens are
*holes* (mask 0): attention never sees them, and every token carries its real
position id (number of valid slots before it).  This one layout covers
right-padded prefill, per-row speculation of different lengths, rows joining
a running batch (async mode) and prefixes restored from the prefix cache.

Prefix cache.  When a row finishes, its KV (a reference to the layer tensors
plus its valid-slot indices) is kept in a small LRU pool keyed by the token
ids it covers.  A new row takes the entry with the longest common prefix and
only prefills the rest: the target calls of an LR cycle share the committed
prefix, and each cycle extends the previous one.

The engine reads its model through the backend it is given (:class:`lrref.backends.hf.HFBackend`: device, forward,
tokens); the static cache's engine (:mod:`lrref.backends.cuda_graphs`) subclasses it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .base import Clock, Sampling, StepOut, StepRequest
from .engine_row import StepRow
from .ngram import NgramConfig
from .steps import StepSplitter

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each [B, H, S, D]


# --- sampling -----------------------------------------------------------------------------------------


def probs_from_logits(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """softmax(logits / T) restricted to the top-k tokens and the top-p nucleus, renormalised."""
    x = logits.float() / s.temperature
    if s.top_k and s.top_k < x.shape[-1]:
        kth = torch.topk(x, s.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    p = torch.softmax(x, dim=-1)
    if s.top_p < 1.0:
        sp, idx = torch.sort(p, dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the token crossing it included)
        drop = (sp.cumsum(-1) - sp) >= s.top_p
        sp = sp.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter(-1, idx, sp)
        p = p / p.sum(-1, keepdim=True)
    return p


def accept_greedy(logits: torch.Tensor, proposal: Sequence[int]) -> list[int]:
    """Greedy speculative check: keep proposals while each equals the argmax; then the argmax at the first miss.

    ``logits[j]`` is the distribution after the j-th fed token; returns the new tokens (accepted + 1).
    """
    best = logits.argmax(-1).tolist()
    out = []
    for j, d in enumerate(proposal):
        if best[j] != d:
            break
        out.append(d)
    out.append(best[len(out)])
    return out


def accept_sampled(probs: torch.Tensor, proposal: Sequence[int], gen: torch.Generator) -> list[int]:
    """Speculative sampling with a point-mass draft q = delta(d) (Leviathan et al.).

    Accept d with probability min(1, p(d)/q(d)) = p(d).  On rejection sample from
    the residual max(0, p - q) / Z, i.e. p with d removed and renormalised.  If all
    proposals pass, sample the bonus token from p at the next position.  The
    output is distributed exactly as sampling token by token from p.
    """
    out = []
    for j, d in enumerate(proposal):
        p = probs[j]
        if torch.rand((), generator=gen).item() < p[d].item():
            out.append(d)
            continue
        r = p.clone()
        r[d] = 0.0
        z = r.sum()
        if z <= 0:  # p was a point mass on d (acceptance then has probability 1; float guard)
            out.append(d)
            continue
        out.append(int(torch.multinomial(r / z, 1, generator=gen).item()))
        return out
    out.append(int(torch.multinomial(probs[len(proposal)], 1, generator=gen).item()))
    return out


# --- prefix cache ---------------------------------------------------------------------------------


@dataclass
class _Entry:
    ids: np.ndarray  # token ids whose KV the entry holds, in order
    kv: KV  # layer tensors of the batch the row lived in (not copied)
    row: int
    slots: torch.Tensor  # indices of the row's valid slots, len == len(ids)


class PrefixPool:
    """LRU pool of finished rows' KV, looked up by longest common token prefix."""

    def __init__(self, size: int = 8):
        self.size = size
        self._d: OrderedDict[int, _Entry] = OrderedDict()
        self._n = 0

    def add(self, e: _Entry) -> None:
        if self.size <= 0 or len(e.ids) == 0:
            return
        self._n += 1
        self._d[self._n] = e
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def clear(self) -> None:
        self._d.clear()

    def lookup(self, ids: np.ndarray, limit: int) -> tuple[_Entry | None, int]:
        """Entry with the longest common prefix with ``ids`` (at most ``limit`` tokens) and that length."""
        best, best_n = None, 0
        for key, e in reversed(self._d.items()):
            n = min(len(e.ids), limit)
            if n <= best_n:
                continue
            eq = e.ids[:n] == ids[:n]
            c = n if eq.all() else int(np.argmin(eq))
            if c > best_n:
                best, best_n, best_key = e, c, key
        if best is not None:
            self._d.move_to_end(best_key)
        return best, best_n


def chunk_inputs(chunks: Sequence[Sequence[int]], valid_before: Sequence[int], pad_id: int
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pass's inputs on the CPU: token ids ``[B, W]`` (``pad_id`` after a row's chunk), which of them are real
    (bool ``[B, W]``) and their position ids (``valid_before[i] + j``, padding included)."""
    B, W = len(chunks), max(len(c) for c in chunks)
    inp = torch.full((B, W), pad_id, dtype=torch.long)
    cmask = torch.zeros((B, W), dtype=torch.bool)
    pos = torch.zeros((B, W), dtype=torch.long)
    for i, c in enumerate(chunks):
        inp[i, :len(c)] = torch.tensor(c)
        cmask[i, :len(c)] = True
        pos[i] = valid_before[i] + torch.arange(W)
    return inp, cmask, pos


# --- the batch engine -----------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Row(StepRow):
    prefix_len: int
    cached_ids: list[int]  # tokens whose KV sits in this row's valid slots, in order
    gen: torch.Generator | None


class HFEngine:
    """A running batch of rows of one model; rows can join and leave between forward passes (:class:`Engine`)."""

    bucket_label: str | None = None  #: the padded shape of the last pass (the static-cache engine's); None: its own

    def __init__(self, be, sampling: Sampling, ngram: NgramConfig, clock: Clock):  # be: an HFBackend
        self.be, self.sampling, self.ngram, self.clock = be, sampling, ngram, clock
        self.dev = be.device
        self.rows: list[_Row] = []
        self.kv: KV | None = None
        self.mask = torch.zeros((0, 0), dtype=torch.bool, device=self.dev)
        self._next = 0

    @property
    def active(self) -> int:
        return len(self.rows)

    # -- building rows -------------------------------------------------------------------------
    def add(self, reqs: Sequence[StepRequest]) -> list[int]:
        """Start one step for each request; returns handles (finished rows are reported by :meth:`step`)."""
        if not reqs:
            return []
        be = self.be
        rows, parts = [], []
        for r in reqs:
            if len(r.ids) == 0:
                raise ValueError("empty prefix")
            ids = np.asarray(r.ids, dtype=np.int64)
            e, c = be.pool.lookup(ids, len(ids) - 1) if be.prefix_cache else (None, 0)
            g = None
            if not self.sampling.greedy:
                g = torch.Generator().manual_seed(int(r.seed) & 0x7FFF_FFFF_FFFF_FFFF)
            row = _Row(handle=self._next, prefix_len=len(ids), ids=list(r.ids), cached_ids=list(r.ids[:c]),
                       pending=list(r.ids[c:]), splitter=StepSplitter(be.decode, be.eos_ids, r.cap, be.separator),
                       gen=g, start=self.clock(), cached_tokens=c, request=r.request)
            self._next += 1
            be.stats.reused_tokens += c
            rows.append(row)
            parts.append((e, c))
        kv, mask = self._materialize(parts)
        self._merge(kv, mask)
        self.rows.extend(rows)
        return [r.handle for r in rows]

    def _materialize(self, parts: list[tuple[_Entry | None, int]]) -> tuple[KV | None, torch.Tensor]:
        """Batch KV of the new rows from their pool entries (holes where a row reuses less)."""
        C = max(c for _, c in parts)
        B = len(parts)
        mask = torch.zeros((B, C), dtype=torch.bool, device=self.dev)
        if C == 0:
            return None, mask
        ref = next(e for e, c in parts if c > 0).kv
        kv = []
        for li, (k0, v0) in enumerate(ref):
            H, D = k0.shape[1], k0.shape[3]
            K = k0.new_zeros((B, H, C, D))
            V = v0.new_zeros((B, v0.shape[1], C, v0.shape[3]))
            for i, (e, c) in enumerate(parts):
                if c:
                    idx = e.slots[:c]
                    K[i, :, :c] = e.kv[li][0][e.row].index_select(1, idx)
                    V[i, :, :c] = e.kv[li][1][e.row].index_select(1, idx)
            kv.append((K, V))
        for i, (_, c) in enumerate(parts):
            mask[i, :c] = True
        return kv, mask

    def _merge(self, kv: KV | None, mask: torch.Tensor) -> None:
        """Append rows (their KV and slot mask) to the running batch, padding slots with holes."""
        S0, S1 = self.mask.shape[1], mask.shape[1]
        S = max(S0, S1)

        def pad(t: torch.Tensor, n: int) -> torch.Tensor:
            return t if n == 0 else torch.cat([t, t.new_zeros(t.shape[:2] + (n,) + t.shape[3:])], dim=2)

        if self.kv is None and kv is None:
            pass
        elif self.kv is None:
            B0 = self.mask.shape[0]
            self.kv = [(torch.cat([k.new_zeros((B0,) + k.shape[1:2] + (S,) + k.shape[3:]), pad(k, S - S1)]),
                        torch.cat([v.new_zeros((B0,) + v.shape[1:2] + (S,) + v.shape[3:]), pad(v, S - S1)]))
                       for k, v in kv]
        elif kv is None:
            B1 = mask.shape[0]
            self.kv = [(torch.cat([pad(k, S - S0), k.new_zeros((B1,) + k.shape[1:2] + (S,) + k.shape[3:])]),
                        torch.cat([pad(v, S - S0), v.new_zeros((B1,) + v.shape[1:2] + (S,) + v.shape[3:])]))
                       for k, v in self.kv]
        else:
            self.kv = [(torch.cat([pad(k0, S - S0), pad(k1, S - S1)]), torch.cat([pad(v0, S - S0), pad(v1, S - S1)]))
                       for (k0, v0), (k1, v1) in zip(self.kv, kv)]
        pm = lambda m, n: torch.cat([m, m.new_zeros((m.shape[0], n))], 1)  # noqa: E731
        self.mask = torch.cat([pm(self.mask, S - S0), pm(mask, S - S1)], 0)

    # -- one forward pass --------------------------------------------------------------------------
    def step(self) -> list[tuple[int, StepOut]]:
        """One forward pass over all rows; returns the rows that finished their step."""
        if not self.rows:
            return []
        B = len(self.rows)
        props = [r.proposal(self.ngram) for r in self.rows]
        t0 = self.be.stats.forward_s
        logits, W = self._forward([r.pending + p for r, p in zip(self.rows, props)], props)
        dt = self.be.stats.forward_s - t0
        new_valid = torch.zeros((B, W), dtype=torch.bool, device=self.dev)
        finished: list[tuple[int, StepOut]] = []
        keep: list[int] = []
        o = 0
        for i, r in enumerate(self.rows):
            k = len(props[i])
            new_valid[i, :self._advance(r, logits[o:o + k + 1], props[i], B)] = True
            r.busy += dt
            o += k + 1
            if r.splitter.finish is not None:
                finished.append((r.handle, r.out(self.be.decode, self.clock())))
            else:
                keep.append(i)
        self.mask = torch.cat([self.mask, new_valid], 1)
        for i in [i for i in range(B) if i not in keep]:
            self.be.pool.add(self._entry(i))
        self._select(keep)
        return finished

    def _entry(self, i: int) -> _Entry:
        """Row ``i``'s KV for the prefix cache (a reference to the batch's layer tensors, not a copy)."""
        return _Entry(np.asarray(self.rows[i].cached_ids, dtype=np.int64), self.kv, i,
                      self.mask[i].nonzero().squeeze(1))

    def _forward(self, chunks: list[list[int]], props: list[list[int]]) -> tuple[torch.Tensor, int]:
        """Feed every row's chunk (pending tokens + proposals) in one pass; grow the cache.

        Returns float32 logits where a next token is needed (after the last pending token and after each
        proposal, row by row) and the chunk width.
        """
        be = self.be
        B, W = len(chunks), max(len(c) for c in chunks)
        valid_before = self.mask.sum(1).tolist() if self.mask.numel() else [0] * B
        inp, cmask, pos = chunk_inputs(chunks, valid_before, be.pad_id)
        inp, cmask, pos = inp.to(self.dev), cmask.to(self.dev), pos.to(self.dev)
        t0 = time.perf_counter()
        hidden = self._run(inp, cmask, pos)  # [>= B, >= W, hidden]: rows and positions past B, W are padding
        sel = [(i, len(r.pending) - 1 + j) for i, r in enumerate(self.rows) for j in range(len(props[i]) + 1)]
        hs = hidden[torch.tensor([a for a, _ in sel], device=self.dev), torch.tensor([b for _, b in sel],
                                                                                      device=self.dev)]
        logits = be.lm_head(hs).float().cpu()  # sampling and acceptance on the CPU, whatever the device
        be.synchronize()
        seconds = time.perf_counter() - t0
        be.stats.count_pass(B, seconds)
        if be.pass_log is not None:
            be.pass_log(t0, seconds, [len(c) for c in chunks], valid_before, len(sel), torch.get_num_threads(),
                        [r.request for r in self.rows], bucket=self.bucket_label)
        return logits, W

    def _run(self, inp: torch.Tensor, cmask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The model over the chunk ``inp [B, W]`` after the cache (transformers' dynamic cache, grown by W slots);
        the last hidden states ``[B, W, hidden]``."""
        attn = torch.cat([self.mask, cmask], 1).long()  # [B, S + W]: 1 = a real token of the row
        hidden, self.kv = self.be.forward_hidden(inp, attn, pos, self.kv)
        return hidden

    def _advance(self, r: _Row, lg: torch.Tensor, prop: list[int], batch: int) -> int:
        """Accept the row's proposals and next token, feed its step splitter; returns its new valid slots."""
        if self.sampling.greedy:
            new = accept_greedy(lg, prop)
        else:
            new = accept_sampled(probs_from_logits(lg, self.sampling), prop, r.gen)
        n_acc = len(new) - 1
        self.be.stats.prefill_tokens += max(0, len(r.pending) - 1)
        n_valid = len(r.pending) + n_acc
        r.cached_ids += r.pending + prop[:n_acc]
        r.take(new, len(prop), batch)
        return n_valid

    def _select(self, keep: list[int]) -> None:
        """Keep only rows ``keep``; drop trailing slots that are holes in every remaining row."""
        if len(keep) == len(self.rows):
            idx = None
        else:
            idx = torch.tensor(keep, dtype=torch.long, device=self.dev)
            self.rows = [self.rows[i] for i in keep]
            self.mask = self.mask[idx]
        if not self.rows:
            self.kv, self.mask = None, torch.zeros((0, 0), dtype=torch.bool, device=self.dev)
            return
        any_valid = self.mask.any(0).nonzero()
        S = int(any_valid.max()) + 1 if any_valid.numel() else 0
        crop = S < self.mask.shape[1]
        if crop:
            self.mask = self.mask[:, :S]
        if self.kv is not None and (idx is not None or crop):
            self.kv = [((k if idx is None else k.index_select(0, idx))[:, :, :S],
                        (v if idx is None else v.index_select(0, idx))[:, :, :S]) for k, v in self.kv]

    def cancel(self, handles: Sequence[int]) -> list[tuple[int, StepOut]]:
        """Stop rows now (their partial step is returned with finish 'cancelled')."""
        hs = set(handles)
        out = [(r.handle, r.out(self.be.decode, self.clock(), "cancelled")) for r in self.rows if r.handle in hs]
        self._select([i for i, r in enumerate(self.rows) if r.handle not in hs])
        return out


# --- the backend ------------------------------------------------------------------------------------
