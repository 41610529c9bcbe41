"""A static KV cache for the transformers backend: its sizes, its shape buckets and ``--cuda-graphs`` (torch-free).

With a static cache every layer's keys and values live in tensors allocated
once, ``[max_rows, heads, max_slots, head_dim]``, and an engine pass runs at
a *bucketed* shape: rows rounded up to a power of two (at most ``max_rows``),
positions per row rounded up to a power of two when the chunk has at most
``graph_positions`` of them (a decode is rows x 1, a verification batch rows x
k), and the keys attended to cut at a power-of-two context (at most
``max_slots``).  Padding rows and positions are masked out, so results are the
eager path's.  Chunks wider than ``graph_positions`` (prompt prefills) run
eagerly at their own width, as vLLM runs its prefills.  With ``cuda_graphs``
each bucket's forward is captured as a CUDA graph on first use and replayed
afterwards (as gpt-fast and vLLM do); on a CPU the same code runs eagerly.
The torch side is :mod:`lrref.backends.cuda_graphs`.

No torch here: the CLI checks the sizes before any model loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from lrsim.errors import InputError
from lrsim.fields import option

MIN_CONTEXT = 64  #: the smallest context bucket (slots attended to)
ROWS_FLAG, SLOTS_FLAG = "--graph-max-rows", "--graph-max-slots"  #: the options that raise the sizes
PROMPT_ALLOWANCE = 1024  #: prompt tokens the default slot count leaves room for (a chat prompt and its question)


def pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class Bucket:
    """The shape one pass runs at: ``rows`` x ``positions`` fed, ``context`` slots attended to; ``graph``: a
    bucketed (capturable) shape, not an eager pass at its own width."""

    rows: int
    positions: int
    context: int
    graph: bool

    def label(self) -> str:
        return f"{self.rows}x{self.positions}@{self.context}"


@dataclass(frozen=True)
class StaticCacheConfig:
    """A static KV cache of ``max_rows`` x ``max_slots`` per layer; passes at bucketed shapes, CUDA graphs on CUDA.

    :raises InputError: a size below 1, or ``graph_positions`` above ``max_slots``.
    """

    max_rows: int = option("rows the cache holds: the most sequences in one forward pass (" + ROWS_FLAG + ")", 16)
    max_slots: int = option("KV slots per row: prefix, generated tokens and holes; holes are compacted away when "
                            "the slots run out (" + SLOTS_FLAG + ")", 4096)
    graph_positions: int = option("chunks of up to this many positions per row run at power-of-two buckets "
                                  "(captured with cuda_graphs); wider ones (prompt prefills) eagerly at their width",
                                  64)
    cuda_graphs: bool = option("capture a CUDA graph per bucket on first use and replay it (CUDA devices only)",
                               False)

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_slots", "graph_positions"):
            if getattr(self, name) < 1:
                raise InputError(f"static cache {name} must be >= 1, got {getattr(self, name)}")
        if self.graph_positions > self.max_slots:
            raise InputError(f"static cache graph_positions {self.graph_positions} is more than its max_slots "
                             f"{self.max_slots}")

    def check_rows(self, rows: int) -> None:
        """:raises InputError: ``rows`` sequences do not fit the cache."""
        if rows > self.max_rows:
            raise InputError(f"static cache: a batch of {rows} rows is more than its {self.max_rows} rows; raise "
                             f"{ROWS_FLAG} (StaticCacheConfig.max_rows)")

    def check_slots(self, used: int, width: int) -> None:
        """:raises InputError: ``used`` slots plus a chunk of ``width`` do not fit a row."""
        if used + width > self.max_slots:
            raise InputError(f"static cache: a pass needs {used} + {width} = {used + width} KV slots per row, more "
                             f"than its {self.max_slots}; raise {SLOTS_FLAG} (StaticCacheConfig.max_slots)")

    def bucket(self, rows: int, width: int, used: int) -> Bucket:
        """The shape of a pass feeding ``width`` positions to each of ``rows`` rows whose cache holds ``used``
        slots (after any compaction).

        :raises InputError: the rows or slots do not fit.
        """
        self.check_rows(rows)
        pb = pow2(width)
        if width <= self.graph_positions and used + pb <= self.max_slots:
            return Bucket(min(pow2(rows), self.max_rows), pb, self._context(used + pb), True)
        self.check_slots(used, width)  # too wide for a bucket (a prefill), or its padding would not fit: eager
        return Bucket(rows, width, self._context(used + width), False)

    def _context(self, n: int) -> int:
        return min(self.max_slots, max(MIN_CONTEXT, pow2(n)))


def default_sizes(max_tokens: int, max_step_tokens: int, depth: int, width: int = 1, concurrency: int = 1,
                  prompt_tokens: int | None = None) -> tuple[int, int]:
    """``(max_rows, max_slots)`` that fit a run: a verification batch of ``depth + 1`` rows (``width ** depth``
    draft paths) per request in flight; a prompt (``prompt_tokens``, else :data:`PROMPT_ALLOWANCE`), the output and
    a cycle of steps per row, rounded up to powers of two."""
    rows = pow2(concurrency * max(depth + 1, width ** depth))
    slots = pow2((prompt_tokens or PROMPT_ALLOWANCE) + max_tokens + (depth + 2) * max_step_tokens)
    return rows, slots
