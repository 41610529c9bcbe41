"""``--html`` pages in a real headless browser (Debian's Chromium through selenium and its chromedriver).

Every page loads with the network blocked and no console error, every figure renders (an SVG with drawn
traces), and a full-page screenshot lands in ``runs/html-report/`` (CI keeps it as an artifact).  Without
Chromium the tests skip in one line, unless LRSIM_REQUIRE_BROWSER is set (``.ci/run`` installs Chromium and
sets it): then they fail.
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from pathlib import Path

import pytest

from html_pages import PAGES

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "runs" / "html-report"
BROWSERS = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1300,900", "--host-resolver-rules=MAP * ~NOTFOUND")
#: per figure: is there an SVG of a real size, and did plotly draw something in it (lines, bars, heatmap, table)?
RENDERED = """return Array.from(document.querySelectorAll('.js-plotly-plot')).map(e => {
  const svg = e.querySelector('svg.main-svg'); const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  return [e.id, r.width, r.height, e.querySelectorAll('g.trace, g.table, g.hm image').length]; });"""


def _unavailable(reason: str):
    if os.environ.get("LRSIM_REQUIRE_BROWSER"):
        pytest.fail(f"{reason} and LRSIM_REQUIRE_BROWSER is set")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("no selenium (pip install -e '.[test]')")
    binary = next((p for p in (shutil.which(b) or b for b in BROWSERS) if Path(p).is_file()), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        _unavailable("no Chromium/chromedriver (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for f in FLAGS + (f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",):
        opts.add_argument(f)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)
    yield d
    d.quit()


def _rendered(browser, expected: int, timeout: float = 20.0) -> list:
    end = time.monotonic() + timeout
    while True:
        figs = browser.execute_script(RENDERED)
        if len(figs) == expected and all(w > 0 and h > 0 and n > 0 for _, w, h, n in figs):
            return figs
        if time.monotonic() > end:
            return figs
        time.sleep(0.2)


def _screenshot(browser, path: Path) -> None:
    height = browser.execute_script("return document.documentElement.scrollHeight")
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": 1300, "height": height, "scale": 1}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))


@pytest.mark.parametrize("name", list(PAGES))
def test_page_renders_in_chromium(browser, html_pages, name):
    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(html_pages[name].as_uri())
    figs = _rendered(browser, PAGES[name][1])
    assert len(figs) == PAGES[name][1], figs
    empty = [f for f in figs if not (f[1] > 100 and f[2] > 100 and f[3] > 0)]
    assert empty == [], f"figures not rendered: {empty}"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    shot = SHOTS / f"{name}.png"
    _screenshot(browser, shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_the_checks_catch_a_broken_page(browser, html_pages, tmp_path):
    """Without its inline plotly.js a page draws nothing and logs an error: both checks must see it."""
    text = html_pages["plan"].read_text()
    start = text.index('<script type="text/javascript">')
    broken = tmp_path / "broken.html"
    broken.write_text(text[:start] + text[text.index("</script>", start) + len("</script>"):])
    browser.get_log("browser")
    browser.get(broken.as_uri())
    figs = _rendered(browser, PAGES["plan"][1], timeout=1.0)
    assert all(n == 0 for *_, n in figs)
    assert any(e["level"] == "SEVERE" and "Plotly" in e["message"] for e in browser.get_log("browser"))
