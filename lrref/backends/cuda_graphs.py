"""The static-cache path of the transformers backend: preallocated KV, bucketed passes, CUDA graphs on CUDA.

:class:`StaticKV` is a backend's static cache (its sizes:
:class:`lrref.backends.static_cache.StaticCacheConfig`).  Its :class:`Arena`\\ s
hold every layer's keys and values, ``[max_rows, H, max_slots, D]``, allocated
once; an engine leases one while it has rows (a second engine with rows at the
same time gets a second arena).  :class:`StaticEngine` is
:class:`lrref.backends.hf_engine.HFEngine` with the same row and slot layout (a slot
mask with holes, explicit position ids), its KV in the arena instead of
transformers' dynamic cache:

- rows are arena rows ``0..B-1`` in engine order; a leaving row's successors
  move down;
- slot columns are the mask's; a pass writes its chunk at columns
  ``S..S+Wb-1`` (``S``: the mask's width) and the mask grows by the real width;
  when the slots run out, each row's valid slots are packed to the left
  (position ids count valid slots, so nothing changes for the model);
- a pass runs at its :class:`~lrref.backends.static_cache.Bucket` through a 4D
  attention mask ``[Rb, 1, Wb, Cb]``: a query sees its row's valid slots and
  the real chunk tokens at or before it, and always itself, so that a padding
  row attends to something (its outputs are never read);
- a finished row's KV is copied into the prefix cache (the arena is reused).

With ``cuda_graphs`` a bucket's forward is run once eagerly on a side stream
(a warm-up: it writes what the graph will write), captured into a
``torch.cuda.CUDAGraph`` (one memory pool per arena) and replayed from then on:
inputs are copied into the bucket's static tensors first.  Elsewhere the same
code runs eagerly.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers.cache_utils import Cache

from lrsim.errors import InputError

from .hf_engine import HFEngine, _Entry
from .static_cache import Bucket, StaticCacheConfig, pow2

MASKS = {"sdpa": "bool", "eager": "additive"}  #: attention implementations that take a 4D mask, and its kind


@dataclass
class GraphStats:
    """What a backend's static cache did: passes by bucket, graphs captured and replayed, compactions."""

    buckets: Counter = field(default_factory=Counter)  # Bucket.label() -> passes
    captured: int = 0
    replayed: int = 0
    compactions: int = 0  # times the slots ran out and holes were packed away
    arenas: int = 0


@dataclass
class _Feed:
    """A bucket's inputs: token ids and position ids ``[Rb, Wb]``, the slot columns written ``[Wb]``, the 4D mask."""

    ids: torch.Tensor
    pos: torch.Tensor
    cols: torch.Tensor
    mask: torch.Tensor
    cache: Cache


class _Writer(Cache):
    """The cache transformers sees for one bucket: writes each layer's new keys and values at ``cols`` of arena
    rows ``0..rows-1`` and returns the first ``context`` slots of those rows."""

    def __init__(self, arena: Arena, rows: int, cols: torch.Tensor, context: int):
        super().__init__(layers=[])
        self.arena, self.rows, self.cols, self.context = arena, rows, cols, context

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        K, V = self.arena.k[layer_idx][:self.rows], self.arena.v[layer_idx][:self.rows]  # [Rb, H, S_max, D]
        K.index_copy_(2, self.cols, key_states)  # [Rb, H, Wb, D] into slots cols
        V.index_copy_(2, self.cols, value_states)
        return K[:, :, :self.context], V[:, :, :self.context]


def attention_mask(slots: torch.Tensor, cmask: torch.Tensor, b: Bucket, kind: str, dtype: torch.dtype
                   ) -> torch.Tensor:
    """The 4D mask ``[Rb, 1, Wb, Cb]`` of a pass: row i's query j sees the row's valid cache slots (``slots [B, S]``),
    the real chunk tokens ``k <= j`` (``cmask [B, W]``, at columns ``S + k``) and itself."""
    (B, S), W, dev = slots.shape, cmask.shape[1], slots.device
    m = torch.zeros((b.rows, b.positions, b.context), dtype=torch.bool, device=dev)
    m[:B, :, :S] = slots[:, None, :]
    cm = torch.zeros((b.rows, b.positions), dtype=torch.bool, device=dev)
    cm[:B, :W] = cmask
    j = torch.arange(b.positions, device=dev)
    m[:, :, S:S + b.positions] = (j[None, :] <= j[:, None])[None] & cm[:, None, :]  # causal within the chunk
    m[:, j, S + j] = True  # itself: no query sees nothing (padding rows)
    if kind == "additive":  # eager attention adds the mask to the scores
        return torch.zeros(m.shape, dtype=dtype, device=dev).masked_fill_(~m, torch.finfo(dtype).min)[:, None]
    return m[:, None]


class Arena:
    """Every layer's keys and values ``[max_rows, H, max_slots, D]``, with its buckets' static inputs and graphs."""

    def __init__(self, owner: StaticKV):
        self.owner, cfg = owner, owner.cfg
        mc, dev = owner.model.config, owner.device
        heads = getattr(mc, "num_key_value_heads", None) or mc.num_attention_heads
        dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
        shape = (cfg.max_rows, heads, cfg.max_slots, dim)
        self.k = [torch.zeros(shape, dtype=owner.dtype, device=dev) for _ in range(mc.num_hidden_layers)]
        self.v = [torch.zeros(shape, dtype=owner.dtype, device=dev) for _ in range(mc.num_hidden_layers)]
        self.feeds: dict[Bucket, _Feed] = {}
        self.graphs: dict[Bucket, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle() if cfg.cuda_graphs else None
        self.holder: weakref.ref | None = None

    def free(self) -> bool:
        return self.holder is None or self.holder() is None

    # -- rows and slots --------------------------------------------------------------------------------
    def put(self, row: int, e: _Entry, c: int) -> None:
        """Row ``row``'s slots ``0..c-1`` := the first ``c`` tokens' KV of a prefix-cache entry."""
        idx = e.slots[:c]
        for li in range(len(self.k)):
            self.k[li][row, :, :c] = e.kv[li][0][e.row].index_select(1, idx)
            self.v[li][row, :, :c] = e.kv[li][1][e.row].index_select(1, idx)

    def take(self, row: int, slots: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of row ``row``'s KV at ``slots``, each ``[1, H, len(slots), D]`` (for the prefix cache)."""
        return [(k[row:row + 1].index_select(2, slots), v[row:row + 1].index_select(2, slots))
                for k, v in zip(self.k, self.v)]

    def keep_rows(self, keep: Sequence[int]) -> None:
        """Rows ``keep`` (increasing) move to ``0..len(keep)-1``."""
        moved = [(j, i) for j, i in enumerate(keep) if i != j]
        if not moved:
            return
        dst = torch.tensor([j for j, _ in moved], device=self.k[0].device)
        src = torch.tensor([i for _, i in moved], device=self.k[0].device)
        for t in self.k + self.v:
            t[dst] = t[src]  # the right side is gathered first: sources are never overwritten before they are read

    def pack(self, row: int, slots: torch.Tensor) -> None:
        """Row ``row``'s ``slots`` (increasing) move to ``0..len(slots)-1``."""
        n = len(slots)
        for t in self.k + self.v:
            t[row, :, :n] = t[row].index_select(1, slots)

    # -- passes ---------------------------------------------------------------------------------------
    def forward(self, b: Bucket, inp: torch.Tensor, cmask: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor
                ) -> torch.Tensor:
        """One pass at bucket ``b`` (inputs ``[B, W]``, the rows' slot mask ``[B, S]``); the last hidden states
        ``[Rb, Wb, hidden]`` (a graph's output tensor: read it before the next pass)."""
        o = self.owner
        feed = self.feeds.get(b) if b.graph else None
        if feed is None:
            feed = self._feed(b)
            if b.graph:
                self.feeds[b] = feed
        B, W = inp.shape
        S = slots.shape[1]
        feed.ids.fill_(o.pad_id)
        feed.ids[:B, :W] = inp
        j = torch.arange(b.positions, device=inp.device)
        feed.pos.copy_(j.expand(b.rows, -1))  # padding rows: 0..Wb-1
        feed.pos[:B] += pos[:, :1]  # row i: valid_before[i] + j, its padding positions too
        feed.cols.copy_(S + j)
        feed.mask.copy_(attention_mask(slots, cmask, b, o.mask_kind, o.dtype))
        o.stats.buckets[b.label()] += 1
        if b.graph and self.pool is not None:
            return self._replay(b, feed)
        return self._call(feed)

    def _feed(self, b: Bucket) -> _Feed:
        dev = self.k[0].device
        cols = torch.zeros(b.positions, dtype=torch.long, device=dev)
        mdtype = torch.bool if self.owner.mask_kind == "bool" else self.owner.dtype
        return _Feed(ids=torch.zeros((b.rows, b.positions), dtype=torch.long, device=dev),
                     pos=torch.zeros((b.rows, b.positions), dtype=torch.long, device=dev), cols=cols,
                     mask=torch.zeros((b.rows, 1, b.positions, b.context), dtype=mdtype, device=dev),
                     cache=_Writer(self, b.rows, cols, b.context))

    def _call(self, f: _Feed) -> torch.Tensor:
        out = self.owner.base(input_ids=f.ids, attention_mask=f.mask, position_ids=f.pos, past_key_values=f.cache,
                              use_cache=True)
        return out.last_hidden_state

    def _replay(self, b: Bucket, feed: _Feed) -> torch.Tensor:
        """Replay the bucket's graph; on first use warm up (side stream) and capture it."""
        g = self.graphs.get(b)
        if g is None:
            cur = torch.cuda.current_stream(feed.ids.device)
            side = torch.cuda.Stream(feed.ids.device)
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                self._call(feed)  # the warm-up writes the same keys and values the replay writes
            cur.wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = self._call(feed)
            g = self.graphs[b] = (graph, out)
            self.owner.stats.captured += 1
        g[0].replay()
        self.owner.stats.replayed += 1
        return g[1]


class StaticKV:
    """A backend's static cache: its arenas, leased to engines that hold rows, and what they did (:attr:`stats`).

    :raises InputError: ``cuda_graphs`` off a CUDA device; a model whose attention takes no 4D mask.
    """

    def __init__(self, be, cfg: StaticCacheConfig):
        if cfg.cuda_graphs and be.device.type != "cuda":
            raise InputError(f"CUDA graphs need a CUDA device, this model is on {be.device}; a static cache without "
                             "graphs runs anywhere (StaticCacheConfig(cuda_graphs=False))")
        impl = getattr(be.model.config, "_attn_implementation", None) or "eager"
        if impl not in MASKS:
            raise InputError(f"the static cache needs sdpa or eager attention, this model uses {impl}")
        if getattr(be._base, "has_sliding_layers", False):
            raise InputError("the static cache does not model sliding-window layers: use the dynamic cache")
        self.be, self.cfg, self.mask_kind = be, cfg, MASKS[impl]
        self.model, self.base, self.device = be.model, be._base, be.device
        self.dtype = next(be.model.parameters()).dtype
        self.arenas: list[Arena] = []
        self.stats = GraphStats()

    @property
    def pad_id(self) -> int:
        return self.be.pad_id

    def engine(self, sampling, ngram, clock) -> StaticEngine:
        return StaticEngine(self.be, sampling, ngram, clock, self)

    @torch.inference_mode()
    def lease(self, engine: StaticEngine) -> Arena:
        """A free arena (a new one when every arena is held by an engine with rows) for ``engine``."""
        a = next((a for a in self.arenas if a.free()), None)
        if a is None:
            a = Arena(self)
            self.arenas.append(a)
            self.stats.arenas += 1
        a.holder = weakref.ref(engine)
        return a


class StaticEngine(HFEngine):
    """:class:`lrref.backends.hf_engine.HFEngine` with its KV in a leased :class:`Arena` and passes at bucketed
    shapes."""

    def __init__(self, be, sampling, ngram, clock, static: StaticKV):
        super().__init__(be, sampling, ngram, clock)
        self.static, self.arena = static, None

    @torch.inference_mode()
    def _materialize(self, parts: list[tuple[_Entry | None, int]]) -> tuple[None, torch.Tensor]:
        """The new rows' prefix-cache KV copied into the arena rows after the running ones; their slot mask."""
        cfg, B0 = self.static.cfg, self.mask.shape[0]
        C = max(c for _, c in parts)
        cfg.check_rows(B0 + len(parts))
        cfg.check_slots(C, 0)
        if self.arena is None:
            self.arena = self.static.lease(self)
        mask = torch.zeros((len(parts), C), dtype=torch.bool, device=self.dev)
        for i, (e, c) in enumerate(parts):
            if c:
                self.arena.put(B0 + i, e, c)
                mask[i, :c] = True
        return None, mask

    @torch.inference_mode()
    def _run(self, inp: torch.Tensor, cmask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        B, W = inp.shape
        cfg = self.static.cfg
        if self.mask.shape[1] + pow2(W) > cfg.max_slots and not self.mask.all():
            self._compact()
        b = cfg.bucket(B, W, self.mask.shape[1])
        self.bucket_label = b.label()  # the pass record's bucket
        return self.arena.forward(b, inp, cmask, pos, self.mask)

    @torch.inference_mode()
    def _compact(self) -> None:
        """Pack every row's valid slots to the left and cut the mask to the longest row (positions unchanged)."""
        n = self.mask.sum(1)  # [B] valid slots per row
        for i in range(self.mask.shape[0]):
            self.arena.pack(i, self.mask[i].nonzero().squeeze(1))
        self.mask = torch.arange(int(n.max()), device=self.dev)[None, :] < n[:, None]
        self.static.stats.compactions += 1

    @torch.inference_mode()
    def _entry(self, i: int) -> _Entry:
        """Copies of row ``i``'s valid KV (the arena rows are reused), as a one-row prefix-cache entry."""
        slots = self.mask[i].nonzero().squeeze(1)
        return _Entry(np.asarray(self.rows[i].cached_ids, dtype=np.int64), self.arena.take(i, slots), 0,
                      torch.arange(len(slots), device=self.dev))

    @torch.inference_mode()
    def _select(self, keep: list[int]) -> None:
        if self.arena is not None and len(keep) != len(self.rows):
            self.arena.keep_rows(keep)
        super()._select(keep)
        if not self.rows and self.arena is not None:
            self.arena.holder, self.arena = None, None
