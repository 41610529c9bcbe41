"""Old module names kept importable for one release after the packages by concept (issue 43)."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make module ``old`` the module ``new`` (the same object: attributes and monkeypatches are shared), with a
    DeprecationWarning naming the new home."""
    warnings.warn(f"{old} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
