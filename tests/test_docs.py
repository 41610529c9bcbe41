"""The front door: a short README whose links and commands hold, and a docs site that builds strictly."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_is_short():
    assert len(README.splitlines()) <= 200


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links, "the README links into the docs"
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert missing == []


def test_readme_names_every_lrsim_command():
    from lrsim.cli import COMMANDS

    table = README[README.index("## Commands"):README.index("## Headline results")]
    assert [c for c in COMMANDS if f"lrsim {c}" not in table] == []


def test_ci_command_builds_the_docs_strictly():
    block = README[README.index("<!-- test-command -->"):]
    cmd = block[block.index("```bash") + 7:block.index("```", block.index("```bash") + 7)]
    assert "mkdocs build --strict" in cmd and "pytest" in cmd and ".[test,ref,docs]" in cmd


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    nav = re.findall(r":\s+(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="no mkdocs (pip install -e '.[docs]')")
def test_docs_build_strict(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "api" / "index.html").read_text().count("lrsim.api.") >= 9
    assert (tmp_path / "site" / "figures" / "paper_check.png").is_file()
