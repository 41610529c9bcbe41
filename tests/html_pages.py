"""The pages the ``--html`` tests look at: one per command, written once per test session."""

from __future__ import annotations

from pathlib import Path

from lrsim.cli import main

H100 = ["--hardware", "h100-ctx0-kernel", "--target-arch", "qwen2.5-32b", "--draft-arch", "qwen2.5-1.5b"]

#: page name -> (lrsim arguments before --html, figures the page must hold)
PAGES = {
    "report": (["report", "--resolution", "4"], 5),  # map, pure lines, verdicts, acceptance, pass costs
    "plan": (["plan", "--budget", "24", "--mode", "sync"], 2),
    "plan-hardware": (["plan", *H100, "--alpha1", "0.6", "--alpha2", "0.4", "--budget", "4", "--bootstrap", "0"], 3),
    "replay": (["replay", "--mode", "async", "--k1", "3", "--steps", "2000", "--bootstrap", "0"], 3),
    "serve": (["serve", "--rate", "0.5,4", "--modes", "ar,lr-async", "--requests", "40", "--replications", "2",
               "--workers", "1", "--no-progress", *H100], 2),
}


def write_pages(folder: Path) -> dict[str, Path]:
    """Run every command with ``--html`` into ``folder``; returns name -> page."""
    out = {}
    for name, (args, _) in PAGES.items():
        path = folder / f"{name}.html"
        assert main([*args, "--html", str(path)]) == 0, name
        out[name] = path
    return out
