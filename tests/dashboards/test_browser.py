"""The UI in a real browser: ``retryscope ui`` served on a free local port, opened in
Debian's headless Chromium through playwright (never a browser download)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (make browser-deps)"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"retryscope ui exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} not healthy after {timeout} s")


@pytest.fixture
def served(ui_data: Path, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = dict(os.environ, RETRYSCOPE_TRACE_URL="http://localhost:16686/trace/{trace_id}")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("retryscope")),
            "ui",
            str(ui_data),
            "--port",
            str(port),
        ],
        env=env,
        stdout=(tmp_path / "ui.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    with socket.socket() as s:  # the Streamlit child went down with `retryscope ui`
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_drill_down_renders_the_timeline_in_chromium(served: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1300})
            page.goto(f"{served}/request?id=nested", wait_until="domcontentloaded")
            chart = page.get_by_test_id("stVegaLiteChart").first
            expect(chart).to_be_visible(timeout=60_000)
            svg = chart.locator("svg").first  # small charts render as SVG: marks in the DOM
            svg.wait_for(state="visible", timeout=30_000)
            texts = svg.locator("text")
            expect(texts.filter(has_text="transport · primary")).to_have_count(1)
            expect(texts.filter(has_text="harness · primary")).to_have_count(1)
            labels = [t for t in texts.all_text_contents() if t.startswith("#")]
            assert sorted(labels) == sorted(
                ["#1", "#2", "#3"] * 2 + ["#4", "#5", "#6", "#7", "#8", "#9"]
            )
            marks = svg.locator("[aria-roledescription='bar']").evaluate_all(
                "els => els.map(e => e.getAttribute('aria-label'))"
            )
            assert len(marks) == 12
            last = [m for m in marks if "layer: harness" in m and "attempt_ordinal: 3" in m]
            assert len(last) == 1
            assert "outcome: success" in last[0]
            assert "start_ms: 260" in last[0]
            metrics = page.get_by_test_id("stMetric")
            expect(metrics.filter(has_text="Receiver attempts")).to_contain_text("9")
            expect(metrics.filter(has_text="Retry product")).to_contain_text("9×")
            expect(metrics.filter(has_text="Duration")).to_contain_text("290.0 ms")
            expect(page.get_by_role("link", name="Open trace")).to_have_attribute(
                "href", __import__("re").compile(r"^http://localhost:16686/trace/[0-9a-f]{32}$")
            )
            table = page.get_by_test_id("stTable").first
            expect(table).to_contain_text("transport")
            expect(table).to_contain_text("success")
            box = chart.bounding_box()
            assert box is not None
            assert box["width"] > 400
            assert box["height"] > 100
            page.wait_for_timeout(500)  # let Vega finish drawing before the screenshot
            shot = tmp_path / "drill-down.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            page.goto(served, wait_until="domcontentloaded")  # Overview is the default page
            kpis = page.get_by_test_id("stMetric")
            expect(kpis.nth(1)).to_contain_text("Amplification", timeout=60_000)
            expect(kpis.nth(1)).to_contain_text("2.33×")
            page.get_by_test_id("stVegaLiteChart").nth(2).locator("svg").wait_for(timeout=30_000)
            page.wait_for_timeout(500)
            page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)
            page.goto(f"{served}/whatif", wait_until="domcontentloaded")
            attempts = page.get_by_role("spinbutton", name="Max attempts")
            attempts.wait_for(timeout=60_000)
            attempts.fill("1")
            attempts.press("Enter")
            figures = page.get_by_test_id("stMetric")
            expect(figures.first).to_contain_text("Attempts (est.)", timeout=60_000)
            expect(figures.first).to_contain_text("9", timeout=60_000)
            expect(figures.first).to_contain_text("-6 vs 15 recorded")
            bars = page.get_by_test_id("stVegaLiteChart").first.locator(
                "[aria-roledescription='bar']"
            )
            expect(bars).to_have_count(12)  # 4 metrics × recorded, replayed low and high
            labels = bars.evaluate_all("els => els.map(e => e.getAttribute('aria-label'))")
            attempts_bars = {
                label.split("series: ")[1].split(";")[0]: label.split("value: ")[1].split(";")[0]
                for label in labels
                if "metric: attempts" in label
            }
            assert attempts_bars == {
                "recorded": "15",
                "replayed (low)": "9",
                "replayed (high)": "9",
            }
            page.wait_for_timeout(500)
            page.screenshot(path=str(tmp_path / "whatif.png"), full_page=True)
        finally:
            browser.close()
