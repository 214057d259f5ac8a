"""The HTML report in a real browser: headless Chromium loads it cleanly.

Why a browser and not only an HTML parser: what matters is what a person
sees. Chromium must load ``index.html`` with no console message at all (the
report has no scripts, so any message is a fault: a blocked resource, a
script that got through), every image must resolve, and a kernel named
``<script>alert(1)</script>`` must appear on the page as text.

The traces are real Kineto JSON (tests/report_warehouse.py's ``hostile``
run) loaded by the real ingest, dbt build and report. Chromium is Debian's ``chromium`` (``.ci/run``
installs it); without it the test skips and says so.
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from report_warehouse import HOSTILE_KERNEL, ReportWarehouse
from tracehouse.cli import main

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def report_dir(report_wh: ReportWarehouse, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the ``hostile`` run (real Kineto JSON with a ``<script>`` kernel)."""
    out = tmp_path_factory.mktemp("browser") / "report"
    assert main(["report", "--warehouse", str(report_wh.root), "--run", report_wh.need("hostile"),
                 "--out", str(out)]) == 0
    return out


class _PageReader(HTMLParser):
    """Collects what the page shows as text, its script elements and its image sources."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.scripts = 0
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts += 1
        for key, value in attrs:
            if value and ((tag == "img" and key == "src") or (tag == "a" and key == "href")):
                self.sources.append(value)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_report_loads_in_chromium_without_console_messages(report_dir: Path) -> None:
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium; "
                    "apt-get install chromium)")
    index = report_dir / "index.html"
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--dump-dom", index.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console

    page = _PageReader()
    page.feed(proc.stdout)  # the DOM after Chromium parsed and ran the page
    assert page.scripts == 0
    assert HOSTILE_KERNEL in "".join(page.text)
    local = [src for src in page.sources if "://" not in src and not src.startswith("#")]
    assert any(src.endswith(".png") for src in local)
    missing = [src for src in local if not (report_dir / src).is_file()]
    assert missing == []


def test_report_screenshot_is_not_blank(report_dir: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no chromium on PATH (.ci/run installs Debian's chromium)")
    import matplotlib.image as mpimg
    import numpy as np

    shot = tmp_path / "shot.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={shot}", "--window-size=1200,2400",
         (report_dir / "index.html").resolve().as_uri()],
        capture_output=True, timeout=120, check=True)
    pixels = mpimg.imread(shot)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50  # text and charts, not an empty white page
