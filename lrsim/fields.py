"""Dataclass fields that carry their help text (configuration dataclasses in lrsim and lrref use them).

>>> from dataclasses import dataclass
>>> @dataclass
... class C:
...     k1: int = option("target steps per cycle", 4)
>>> help_texts(C)
{'k1': 'target steps per cycle'}
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any


def option(help: str, default: Any = None) -> Any:
    """A dataclass field with a default and a help text (``metadata["help"]``)."""
    return field(default=default, metadata={"help": help})


def help_texts(cls_or_obj: Any) -> dict[str, str]:
    """Field name -> help text of a dataclass (class or instance)."""
    return {f.name: f.metadata.get("help", "") for f in fields(cls_or_obj)}
