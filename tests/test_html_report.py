"""``--html FILE`` (report, plan, replay, serve): one self-contained page per command, written atomically.

What a browser makes of the pages: tests/test_html_browser.py.
"""

import re

import pytest

from html_pages import PAGES
from lrsim.cli import main


@pytest.fixture
def pages(html_pages):
    return html_pages


@pytest.mark.parametrize("name", list(PAGES))
def test_page_is_self_contained_with_every_figure(pages, name):
    text = pages[name].read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert len(re.findall(r'<div id="figure-\d+"', text)) == PAGES[name][1]
    assert "plotly.js v" in text[:200_000] or "Plotly" in text[:200_000]  # the library itself, inline
    assert not re.search(r"<script[^>]+src=", text), "a script loads from elsewhere"
    assert "<h2>Text report</h2>" in text  # (plotly.js names its CDN for geo maps; none are drawn)


def test_report_page_shows_the_verdicts_and_the_optimum(pages):
    text = pages["report"].read_text()
    assert "optimum k1 = 4, k2 = 4" in text and "Theorem 3" in text and "fails" in text
    assert "Calibrated step acceptance by lookahead position" in text and "Pass costs of" in text


def test_serve_page_marks_crossovers_and_plan_page_the_pure_lines(pages):
    assert "latency against load" in pages["serve"].read_text()
    plan = pages["plan"].read_text()
    assert "pure token SD (k1 = 1)" in plan and "pure LR (k2 = 1)" in plan


def test_unwritable_html_is_one_line_and_writes_nothing(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args in (["plan"], ["replay", "--steps", "100", "--bootstrap", "0"], ["report", "--resolution", "3"],
                 ["serve", "--rate", "1", "--requests", "5", "--replications", "1"]):
        assert main([*args, "--html", str(blocker / "out.html")]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("lrsim: error: cannot write") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_bad_input_leaves_an_existing_page_alone(tmp_path, capsys):
    page = tmp_path / "page.html"
    page.write_text("old")
    assert main(["plan", "--alpha1", "1.5", "--html", str(page)]) == 2
    assert main(["plan", "--rate", "1", "--html", str(page)]) == 2
    assert "--html does not go with --rate" in capsys.readouterr().err
    assert page.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["page.html"]
