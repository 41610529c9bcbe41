"""What the Python API (``lrsim.api``) returns: typed results that print as the command line does.

Every result has ``str(result)`` (the command's text report), a one-line
``repr``, ``.to_dict()`` (what the command's ``--json`` prints) and, where it
holds rows, a ``Table``: a small pandas-free table that prints aligned,
iterates as dicts and turns into a list of dicts, a dict of columns or CSV.

Only the standard library is imported here, so ``import lrsim`` stays light.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

__all__ = ["Table", "PlanResult", "SimulationResult", "PredictionResult", "ServeResult", "TheoremsResult"]


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:.4g}"
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v)


def _short(v: Any) -> str:
    """A value for a one-line repr: strings quoted, floats to 4 significant digits."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_short(x) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_short(x)}" for k, x in v.items()) + "}"
    return repr(v)


@dataclass(frozen=True)
class Table:
    """Rows under named columns: prints aligned, iterates as dicts, no pandas needed.

    ``Table.from_dicts(rows)`` builds one; ``.to_dicts()``, ``.to_dict()``
    (``{"columns": ..., "rows": ...}``), ``.column(name)`` and ``.to_csv()``
    take it apart.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    title: str = ""

    @classmethod
    def from_dicts(cls, dicts: Sequence[dict], columns: Sequence[str] | None = None, title: str = "") -> "Table":
        """A table of ``dicts`` (columns: ``columns``, else every key in order of first appearance)."""
        cols = tuple(columns) if columns is not None else tuple(dict.fromkeys(k for d in dicts for k in d))
        return cls(cols, tuple(tuple(d.get(c) for c in cols) for d in dicts), title)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.to_dicts())

    def __getitem__(self, i: int) -> dict:
        return dict(zip(self.columns, self.rows[i]))

    def column(self, name: str) -> list:
        """One column's values, in row order."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r} (columns: {', '.join(self.columns)})")
        j = self.columns.index(name)
        return [r[j] for r in self.rows]

    def to_dicts(self) -> list[dict]:
        """One dict per row."""
        return [dict(zip(self.columns, r)) for r in self.rows]

    def to_dict(self) -> dict:
        """``{"title", "columns", "rows"}``, JSON-ready for JSON-ready cells."""
        return {"title": self.title, "columns": list(self.columns), "rows": [list(r) for r in self.rows]}

    def to_csv(self) -> str:
        """The table as CSV text (header line first)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        w.writerows(self.rows)
        return buf.getvalue()

    def __str__(self) -> str:
        cells = [list(self.columns)] + [[_cell(v) for v in r] for r in self.rows]
        widths = [max(len(row[j]) for row in cells) for j in range(len(self.columns))]
        lines = [self.title] if self.title else []
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Table({len(self.rows)} rows: {', '.join(self.columns)})"

    def _repr_html_(self) -> str:
        import html

        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in r) + "</tr>" for r in self.rows)
        cap = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@dataclass(repr=False)
class _Result:
    """Shared behaviour: ``str`` is the command's text report, ``to_dict`` its JSON."""

    text: str
    raw: Any  #: the underlying lrsim object (e.g. ``lrsim.planner.Plan``)

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> dict:
        """What the matching command prints with ``--json``."""
        return self.raw.to_dict()

    def _fields(self) -> dict:
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={_short(v)}" for k, v in self._fields().items()) + ")"


@dataclass(repr=False)
class PlanResult(_Result):
    """The best (mode, k1, k2) under a budget: closed form (``lrsim.plan``) or simulated (traces, hardware)."""

    source: str = "closed form"  #: 'closed form', or the simulated workload: traces / numbers on a profile
    mode: str = "async"
    k1: int = 1
    k2: int = 1
    speedup: float = 1.0
    speedup_ci95: tuple[float, float] | None = None
    budget: int = 1
    pure_token: float = 1.0  #: best speedup with k1 = 1 (token-level SD alone)
    pure_step: float = 1.0  #: best speedup with k2 = 1 (LR alone)
    table: Table = field(default_factory=lambda: Table((), ()))  #: ranked configurations
    notes: list[str] = field(default_factory=list)

    def _fields(self) -> dict:
        return {"source": self.source, "mode": self.mode, "k1": self.k1, "k2": self.k2, "speedup": self.speedup,
                "budget": self.budget, "pure_token": self.pure_token, "pure_step": self.pure_step}


@dataclass(repr=False)
class SimulationResult(_Result):
    """One event simulation (``lrsim.simulate``); ``raw`` is the ``lrsim.sim.SimResult``."""

    mode: str = "async"
    k1: int = 1
    k2: int = 1
    speedup: float = 1.0
    speedup_ci95: tuple[float | None, float | None] = (None, None)
    theory_speedup: float | None = None  #: the closed form at the simulated acceptance and c1
    acceptance_rate: float | None = None

    def _fields(self) -> dict:
        return {"mode": self.mode, "k1": self.k1, "k2": self.k2, "speedup": self.speedup,
                "speedup_ci95": self.speedup_ci95, "theory_speedup": self.theory_speedup}


@dataclass(repr=False)
class PredictionResult(_Result):
    """One configuration's predicted speedup (``lrsim.predict``); ``raw`` is a ``lrsim.prediction.Prediction``."""

    mode: str = "async"
    k1: int = 1
    k2: int = 1
    speedup: float = 1.0
    speedup_ci95: tuple[float, float] | None = None
    closed_form: float | None = None  #: the paper's h(k1, k2) with the same alpha1, c1, alpha2
    alpha1: float | None = None
    alpha2: float | None = None
    c1: float | None = None
    notes: list[str] = field(default_factory=list)

    def _fields(self) -> dict:
        return {"mode": self.mode, "k1": self.k1, "k2": self.k2, "speedup": self.speedup,
                "speedup_ci95": self.speedup_ci95, "closed_form": self.closed_form}


@dataclass(repr=False)
class ServeResult(_Result):
    """A serving simulation (``lrsim.simulate_serving``): one row per mode and load, and the crossovers."""

    table: Table = field(default_factory=lambda: Table((), ()))  #: every metric with its 95% interval
    crossovers: list[dict] = field(default_factory=list)  #: per speculative mode and metric: crossover_rate
    title: str = ""

    def to_dict(self) -> dict:
        return {"rows": self.table.to_dicts(), "crossovers": self.crossovers}

    def crossover(self, mode: str, metric: str = "tpot_mean") -> float | None:
        """The rate above which ``mode``'s ``metric`` is no longer below ar's (None: not within the rates)."""
        for c in self.crossovers:
            if c["mode"] == mode and c["metric"] == metric:
                return c["crossover_rate"]
        return None

    def _fields(self) -> dict:
        modes = list(dict.fromkeys(self.table.column("mode"))) if "mode" in self.table.columns else []
        return {"rows": len(self.table), "modes": modes,
                "crossovers": {c["mode"]: c["crossover_rate"] for c in self.crossovers if c["metric"] == "tpot_mean"}}


@dataclass(repr=False)
class TheoremsResult(_Result):
    """Theorems 1-4 and the SD ceiling checked (``lrsim.check_theorems``); ``raw``: the list of checks."""

    table: Table = field(default_factory=lambda: Table((), ()))  #: name, verdict, points checked

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {"theorems": [asdict(r) for r in self.raw]}

    @property
    def verdicts(self) -> dict[str, str]:
        """Check name -> 'holds' or 'fails'."""
        return dict(zip(self.table.column("check"), self.table.column("verdict")))

    def _fields(self) -> dict:
        return {"verdicts": self.verdicts}
