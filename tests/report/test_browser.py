"""The report opens in headless Chromium with no console errors and no network requests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from posenc.report import write_report

from .test_html import EVIL, evil_encoding

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"Debian chromium not installed at {CHROMIUM} "
                              "(apt-get install -y chromium)"),
]


def test_report_renders_offline_in_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    page_path = write_report(tmp_path, ["nope", "sinusoidal", "rope", "alibi", "rope:yarn",
                                        evil_encoding()])
    url = page_path.resolve().as_uri()
    console, requests, failures = [], [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: console.append((m.type, m.text)))
        page.on("pageerror", lambda e: failures.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(url, wait_until="load")
        sections = page.eval_on_selector_all("main > section", "els => els.map(e => e.id)")
        tables = page.locator("table").count()
        images = page.eval_on_selector_all(
            "img", "els => els.map(e => [e.complete, e.naturalWidth])"
        )
        titles = page.eval_on_selector_all("h2", "els => els.map(e => e.textContent)")
        scripts = page.locator("script").count()
        OUTPUT.mkdir(exist_ok=True)
        page.screenshot(path=str(OUTPUT / "report.png"), full_page=False)
        browser.close()
    assert [m for m in console if m[0] in ("error", "warning")] == [] and failures == []
    assert requests == [url]  # the page itself; every figure is inline
    assert sections == ["checks", "enc-nope", "enc-sinusoidal", "enc-rope", "enc-alibi",
                        "enc-script-alert-1-script", "context-extension", "comparison"]
    # glossary; parameters + checks for sinusoidal, rope, alibi; checks only for nope (no
    # parameters) and the unregistered one; extension matrix + details; comparison matrix
    assert tables == 1 + 3 * 2 + 2 + 2 + 1
    assert len(images) >= 10 and all(done and width > 0 for done, width in images)
    assert EVIL in titles and scripts == 0  # the name is shown as text, never run
    assert (OUTPUT / "report.png").stat().st_size > 10_000
