"""The UI in a real browser: ``retryscope ui`` served on a free local port, opened in
Debian's headless Chromium through playwright (never a browser download). Every page is
screenshotted (into ``$RETRYSCOPE_SCREENSHOTS`` too when set) and checked for cut labels;
an on-call engineer's path — the Overview's amplification figure, the requests behind it,
one request's waterfall of its attempts and span tree (two clicks from the Overview,
checked drawn) — takes three clicks; two requests side by side share one time axis."""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

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
SCREENSHOTS_ENV = "RETRYSCOPE_SCREENSHOTS"
PAGES = (
    # (screenshot, path, what the page shows once it ran: test id → how many)
    ("overview", "", {"stVegaLiteChart": 3, "stDataFrame": 4}),
    ("requests", "requests", {"stDataFrame": 1}),
    ("compare", "compare?has=fallback&dim=fallback_trigger&value=unavailable", {"stDataFrame": 2}),
    (
        "breakdown",
        "breakdown?figure=fallback_rate&by=route_hop",
        {"stVegaLiteChart": 1, "stDataFrame": 1},
    ),
    ("amplification", "amplification", {"stVegaLiteChart": 3, "stDataFrame": 3}),
    ("fallbacks", "fallbacks", {"stDataFrame": 2}),
    ("deadlines", "deadlines", {"stVegaLiteChart": 1, "stDataFrame": 2}),
    ("findings", "findings", {"stVegaLiteChart": 1, "stDataFrame": 1}),
    ("request-nested", "request?id=nested", {"stVegaLiteChart": 1, "stDataFrame": 2}),
    ("request-deadline", "request?id=deadline", {"stVegaLiteChart": 1, "stDataFrame": 2}),
    ("whatif", "whatif", {"stVegaLiteChart": 1, "stDataFrame": 1}),
)
TIMEOUT_MS = 90_000
"""Page runs share two cores with whatever else runs: waits are generous."""
CUT = """els => els.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""
"""The texts of the elements whose content does not fit (CSS cuts it with an ellipsis)."""

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


@pytest.fixture(scope="module")
def served(ui_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    env = dict(os.environ, RETRYSCOPE_TRACE_URL="http://localhost:16686/trace/{trace_id}")
    log = tmp_path_factory.mktemp("ui-log") / "ui.log"
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("retryscope")),
            "ui",
            str(ui_data),
            "--port",
            str(port),
        ],
        env=env,
        stdout=log.open("wb"),
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 1300})
    try:
        yield context.new_page()
    finally:
        context.close()


def _settled(page: Any, shows: dict[str, int] | None = None) -> None:
    """Wait until the page ran: its header is drawn, it ``shows`` (test id → at least
    that many elements), no spinner is left and every chart has drawn its marks."""
    main = page.get_by_test_id("stMain")
    main.get_by_test_id("stHeading").first.wait_for(timeout=TIMEOUT_MS)
    for test_id, count in (shows or {}).items():
        main.get_by_test_id(test_id).nth(count - 1).wait_for(state="attached", timeout=TIMEOUT_MS)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=stSpinner],[data-testid=stSkeleton]')"
        " && [...document.querySelectorAll('[data-testid=stVegaLiteChart]')]"
        ".every(c => c.querySelector('svg,canvas'))",
        timeout=TIMEOUT_MS,
    )
    page.wait_for_timeout(700)  # let Vega finish drawing


def _shoot(page: Any, name: str, tmp_path: Path) -> Path:
    """A screenshot of the whole page (the main area scrolls on its own: the viewport is
    made as tall as it); also kept in ``$RETRYSCOPE_SCREENSHOTS`` when that is set."""
    height = page.evaluate("() => document.querySelector('[data-testid=stMain]').scrollHeight + 40")
    page.set_viewport_size({"width": 1500, "height": max(900, min(int(height), 6000))})
    page.wait_for_timeout(500)
    shot = tmp_path / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    keep = os.environ.get(SCREENSHOTS_ENV)
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    page.set_viewport_size({"width": 1500, "height": 1300})
    return shot


def _cut_labels(page: Any) -> list[str]:
    """Metric labels and values, tab labels and buttons whose text does not fit."""
    cut: list[str] = page.locator(
        "[data-testid=stMetricLabel] .stMarkdownEllipsis, "
        "[data-testid=stMetricValue] .stMarkdownEllipsis, "
        "[data-testid=stMetricDelta] .stMarkdownEllipsis, "
        "[data-testid=stPageLink] p, button p"
    ).evaluate_all(CUT)
    return cut


@pytest.mark.parametrize(("name", "path", "shows"), PAGES, ids=[n for n, _, _ in PAGES])
def test_every_page_renders_legibly(
    served: str, page: Any, name: str, path: str, shows: dict[str, int], tmp_path: Path
) -> None:
    page.goto(f"{served}/{path}", wait_until="domcontentloaded")
    _settled(page, shows)
    assert not page.get_by_test_id("stException").count(), page.get_by_test_id(
        "stException"
    ).all_inner_texts()
    assert _cut_labels(page) == []
    for chart in page.get_by_test_id("stVegaLiteChart").all():
        box = chart.bounding_box()
        assert box is not None
        assert box["width"] > 300
    shot = _shoot(page, name, tmp_path)
    assert shot.stat().st_size > 20_000


def test_from_the_amplification_figure_to_a_span_in_three_clicks(
    served: str, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    clicks = 0
    page.goto(served, wait_until="domcontentloaded")
    _settled(page, {"stMetric": 7})
    card = (
        page.get_by_test_id("stVerticalBlock")
        .filter(
            has=page.get_by_test_id("stMetricLabel").filter(
                has_text=re.compile("^Retry amplification$")
            )
        )
        .last
    )
    expect(card.get_by_test_id("stMetricValue")).to_have_text("2.33×")
    card.get_by_role("link", name="Show requests").click()
    clicks += 1
    page.wait_for_url(
        re.compile(r"/requests\?has=retried&sort=excess_attempts$"), timeout=TIMEOUT_MS
    )
    _settled(page, {"stDataFrame": 1})
    expect(page.get_by_test_id("stHeading").filter(has_text="5 of 9 requests")).to_have_count(1)
    grid = page.get_by_test_id("stDataFrame").first
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 17)  # the first row's selector
    clicks += 1
    page.wait_for_url(re.compile(r"/request\?.*id=nested"), timeout=TIMEOUT_MS)
    _settled(page, {"stVegaLiteChart": 1})
    assert "retried" not in page.url
    tree = page.get_by_test_id("stVegaLiteChart").first
    # the waterfall, two clicks from the Overview: drawn, its durations after the bars,
    # every span on the critical path here (retries one after another)
    tree.scroll_into_view_if_needed()
    expect(tree).to_be_visible()
    _drawn(tree)
    drawn = tree.locator("svg text").all_text_contents()
    assert "290 ms" in drawn
    assert drawn.count("10 ms") == 9
    assert all("Critical path: " in label for label in _bar_labels(tree))
    expect(page.get_by_text(re.compile(r"^Critical path: 290 ms"))).to_have_count(1)
    assert _shoot(page, "request-waterfall", tmp_path).stat().st_size > 20_000
    bars = tree.locator("[aria-roledescription='bar']")
    expect(bars).to_have_count(13)  # the request span, 3 harness attempts, 9 sends
    labels = bars.evaluate_all("els => els.map(e => e.getAttribute('aria-label'))")
    last = next(i for i, label in enumerate(labels) if "transport" in label and "success" in label)
    bars.nth(last).click()
    clicks += 1
    page.wait_for_url(re.compile(r"span=[0-9a-f]{16}"), timeout=TIMEOUT_MS)
    _settled(page, {"stVegaLiteChart": 1})
    panel = page.get_by_test_id("stTable").first
    expect(panel).to_contain_text("transport #9")
    expect(panel).to_contain_text("success")
    assert clicks <= 3
    # nothing an investigator reads is cut: the metrics, the tree's rows (each attempt's
    # layer and route in its tooltip)
    assert _cut_labels(page) == []
    shown = _bar_labels(tree)
    for layer in ("harness", "transport"):
        assert any(f"Layer / attempt: {layer} #" in t and "Route: primary" in t for t in shown)
    rows = tree.locator("svg text").all_text_contents()
    assert "│ ▾ harness #3 · attempt primary" in rows
    assert "│ │ · transport #9 · attempt primary" in rows


def test_a_fall_shows_a_down_arrow(served: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(
        f"{served}/?since=2026-09-21T14:18:20Z&until=2026-09-21T14:23:20Z",
        wait_until="domcontentloaded",
    )
    _settled(page, {"stMetric": 7, "stMetricDelta": 7})
    card = page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").filter(
            has_text=re.compile("^Retry amplification$")
        )
    )
    expect(card.get_by_test_id("stMetricDelta")).to_have_text("-2.40×")
    expect(card.get_by_test_id("stMetricDeltaIcon-Down")).to_have_count(1)
    assert card.get_by_test_id("stMetricDeltaIcon-Up").count() == 0


def test_drill_down_waterfall_and_trace_link(served: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{served}/request?id=nested", wait_until="domcontentloaded")
    _settled(page, {"stVegaLiteChart": 1})
    svg = page.get_by_test_id("stVegaLiteChart").first.locator("svg").first
    texts = svg.locator("text")
    expect(texts.filter(has_text=re.compile(r"transport #\d · attempt primary$"))).to_have_count(9)
    expect(texts.filter(has_text=re.compile(r"harness #\d · attempt primary$"))).to_have_count(3)
    ordinals = [
        m.group(1)
        for t in texts.all_text_contents()
        if (m := re.search(r" (#\d+) · attempt ", t)) is not None
    ]
    # every attempt has its ordinal, in its row's name beside the plot
    assert sorted(ordinals) == sorted(["#1", "#2", "#3"] * 2 + ["#4", "#5", "#6", "#7", "#8", "#9"])
    marks = [m for m in _bar_labels(svg) if "Role: attempt" in m]
    assert len(marks) == 12
    last = [m for m in marks if "Layer / attempt: harness #3" in m]
    assert len(last) == 1
    assert "Route: primary" in last[0]
    assert re.search(r"Outcome: [^;]*success", last[0])
    assert "Start: 260 ms" in last[0]
    assert "null" not in " ".join(_bar_labels(svg))
    metrics = page.get_by_test_id("stMetric")
    expect(metrics.filter(has_text="Receiver attempts")).to_contain_text("9")
    expect(metrics.filter(has_text="Retry product")).to_contain_text("9×")
    expect(metrics.filter(has_text="Duration")).to_contain_text("290 ms")
    expect(page.get_by_role("link", name="Open trace")).to_have_attribute(
        "href", re.compile(r"^http://localhost:16686/trace/[0-9a-f]{32}$")
    )


def _drawn(chart: Any) -> Image.Image:
    """A screenshot of one chart, checked not blank: most of it white, but a good share
    drawn in several colours (bars of outcome colours, labels, axes)."""
    shot = Image.open(io.BytesIO(chart.screenshot())).convert("RGB")
    pixels = list(shot.getdata())
    inked = [p for p in pixels if p != (255, 255, 255)]
    assert len(inked) > 0.03 * len(pixels)
    assert len(set(inked)) > 20
    return shot


def _bar_labels(chart: Any) -> list[str]:
    bars = chart.locator("[aria-roledescription='bar']")
    labels: list[str] = bars.evaluate_all("els => els.map(e => e.getAttribute('aria-label'))")
    return labels


def test_two_requests_side_by_side(served: str, page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page.goto(f"{served}/request?id=nested&vs=deadline", wait_until="domcontentloaded")
    _settled(page, {"stVegaLiteChart": 2, "stDataFrame": 1})
    assert not page.get_by_test_id("stException").count()
    expect(page.get_by_test_id("stHeading").filter(has_text="Side by side")).to_have_count(1)
    first, second = page.get_by_test_id("stVegaLiteChart").all()
    assert len(_bar_labels(first)) == 13
    assert len(_bar_labels(second)) == 6
    for chart in (first, second):
        chart.scroll_into_view_if_needed()
        _drawn(chart)
    # one time axis: the same tick sits at the same place in both
    ticks = []
    for chart in (first, second):
        zero = chart.locator("svg text", has_text=re.compile(r"^1,000$")).first
        box = zero.bounding_box()
        assert box is not None
        ticks.append(box["x"])
    assert abs(ticks[0] - ticks[1]) < 1.5
    grid = page.get_by_test_id("stDataFrame").first
    expect(grid).to_be_visible()
    assert "vs=deadline" in page.url
    assert "id=nested" in page.url
    assert _cut_labels(page) == []
    shot = _shoot(page, "request-side-by-side", tmp_path)
    assert shot.stat().st_size > 20_000


def test_navigation_keeps_the_filters_in_the_tab(served: str, page: Any) -> None:
    from playwright.sync_api import expect

    page.goto(f"{served}/?tenant=globex", wait_until="domcontentloaded")
    _settled(page, {"stMetric": 7})
    pages_before = len(page.context.pages)
    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Fallbacks").click()
    page.wait_for_url(re.compile(r"/fallbacks\?tenant=globex$"), timeout=TIMEOUT_MS)
    _settled(page, {"stMetric": 6})
    assert len(page.context.pages) == pages_before  # the same tab
    expect(page.get_by_test_id("stMetric").filter(has_text="Incompatible")).to_contain_text("1")
    expect(page.get_by_test_id("stMetric").filter(has_text="Degraded")).to_contain_text("0")


def test_hostile_url_values_render_as_text(served: str, page: Any) -> None:
    """A backtick link in a filter, a huge time and a 60 k tenant: named in the sidebar as
    text, no live link, no traceback, the sidebar of ordinary width and height."""
    from urllib.parse import quote

    evil = "x` [Re-authenticate here](https://evil.example/login) `"
    query = f"tenant={quote(evil)}&route={'t' * 60_000}&since=%401e300&until=%40inf"
    page.goto(f"{served}/requests?{query}&rule={quote(evil)}", wait_until="domcontentloaded")
    _settled(page, {"stDataFrame": 1})
    assert page.locator("a[href*='evil.example']").count() == 0
    assert not page.get_by_test_id("stException").count()
    sidebar = page.get_by_test_id("stSidebar")
    expect_text = sidebar.inner_text()
    assert "Re-authenticate here](https://evil.example/login)" in expect_text  # as text
    assert "(60,006 characters)" in expect_text
    assert "invalid time '@1e300'" in expect_text
    box = sidebar.bounding_box()
    assert box is not None
    assert box["height"] < 5_000


def test_from_a_kpi_to_why_and_one_request_in_three_clicks(
    served: str, page: Any, tmp_path: Path
) -> None:
    """Overview → the Fallback rate's comparison (what sets those requests apart) → the
    requests of its top value → one request's drill-down."""
    from playwright.sync_api import expect

    page.goto(served, wait_until="domcontentloaded")
    _settled(page, {"stMetric": 7})
    card = (
        page.get_by_test_id("stVerticalBlock")
        .filter(
            has=page.get_by_test_id("stMetricLabel").filter(has_text=re.compile("^Fallback rate$"))
        )
        .last
    )
    card.get_by_role("link", name="Compare").click()
    page.wait_for_url(re.compile(r"/compare\?has=fallback$"), timeout=TIMEOUT_MS)
    _settled(page, {"stDataFrame": 1})
    expect(page.get_by_text("3 of 9 requests in scope, against the other 6")).to_have_count(1)
    grid = page.get_by_test_id("stDataFrame").first
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 17)  # the top value's row
    page.wait_for_url(re.compile(r"dim=fallback_trigger&value=unavailable"), timeout=TIMEOUT_MS)
    _settled(page, {"stDataFrame": 2})
    heading = "Slice requests with what a fallback followed = unavailable: 3"
    expect(page.get_by_test_id("stHeading").filter(has_text=heading)).to_have_count(1)
    _shoot(page, "compare-walk", tmp_path)
    listed = page.get_by_test_id("stDataFrame").nth(1)
    box = listed.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 17)  # its first request
    page.wait_for_url(re.compile(r"/request\?.*id=mismatch"), timeout=TIMEOUT_MS)
    _settled(page, {"stVegaLiteChart": 1})
    assert not page.get_by_test_id("stException").count()
    # its waterfall marks the fallback that unavailable answer triggered
    waterfall = page.get_by_test_id("stVegaLiteChart").first
    expect(waterfall.locator("svg text", has_text=re.compile("^fallback$"))).to_have_count(1)
    _shoot(page, "request-fallback", tmp_path)


def test_from_a_breakdown_point_to_its_requests_and_one_request(
    served: str, page: Any, tmp_path: Path
) -> None:
    """Breakdown → a point of one value's line (its bucket's requests behind the figure,
    in the explorer) → one request's drill-down."""
    from playwright.sync_api import expect

    page.goto(f"{served}/breakdown?figure=fallback_rate&by=tenant", wait_until="domcontentloaded")
    _settled(page, {"stVegaLiteChart": 1, "stDataFrame": 1})
    _shoot(page, "breakdown-walk", tmp_path)
    points = page.get_by_test_id("stVegaLiteChart").first.locator("[aria-roledescription='point']")
    labels = points.evaluate_all("els => els.map(e => e.getAttribute('aria-label') || '')")
    # the acme bucket where one of its requests fell back
    fell_back = re.compile(r"fallback rate: (?!0;)[^;]+; name: acme;")
    hit = next(i for i, label in enumerate(labels) if fell_back.search(label))
    points.nth(hit).click()
    page.wait_for_url(
        re.compile(r"/requests\?.*has=fallback.*where=tenant%3Aacme"), timeout=TIMEOUT_MS
    )
    assert "since=" in page.url
    assert "until=" in page.url
    _settled(page, {"stDataFrame": 1})
    heading = page.get_by_test_id("stHeading").filter(has_text=re.compile(r"^1 of \d+ requests"))
    expect(heading).to_have_count(1)
    grid = page.get_by_test_id("stDataFrame").first
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 17)  # its request
    page.wait_for_url(re.compile(r"/request\?.*id=(widening|degraded)"), timeout=TIMEOUT_MS)
    _settled(page, {"stVegaLiteChart": 1})
    assert not page.get_by_test_id("stException").count()
