"""The documentation site: every nav entry and picture resolves (fast), and the built site
opens in headless Chromium from the file system (slow: the build draws the gallery): no
console errors, no missing image, no link to a missing page, search works, nothing loaded
from the network."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml

from tests.report.test_browser import CHROMIUM, FLAGS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _nav_files(entries: list) -> list[str]:
    found = []
    for entry in entries:
        value = entry if isinstance(entry, str) else next(iter(entry.values()))
        found += _nav_files(value) if isinstance(value, list) else [value]
    return found


def _gallery() -> dict[str, list[str]]:
    sys.path.insert(0, str(DOCS))
    try:
        from hooks import GALLERY
    finally:
        sys.path.remove(str(DOCS))
    return GALLERY


def test_nav_names_pages_that_exist_and_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    nav = _nav_files(config["nav"])
    assert all((DOCS / page).is_file() for page in nav), nav
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    pages = {p for p in pages if not p.startswith("templates/")}
    assert pages - {"add-an-encoding.md"} <= set(nav)  # that one the hook adds when it exists
    assert config["theme"]["font"] is False and "offline" in config["plugins"]


def test_every_gallery_picture_a_page_shows_is_drawn_by_a_gallery_command() -> None:
    """A page's gallery/<set>/<kind>[-<encoding>].png names a set of docs/hooks.py whose
    `posenc plot` command draws that kind (for those encodings)."""
    gallery = _gallery()
    shown = set()
    for page in DOCS.rglob("*.md"):
        shown |= set(re.findall(r"gallery/([\w-]+)/([\w:-]+)\.png", page.read_text()))
    assert len(shown) >= 20
    for name, stem in shown:
        args = [a for a in gallery[name] if "=" not in a and a != "--set"]
        kind, subjects = args[0], args[1:]
        assert stem == kind or stem.removeprefix(kind + "-") in subjects, (name, stem)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Debian chromium not at {CHROMIUM}")
@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None, reason="the extra posenc[docs] is not installed"
)
def test_built_site_opens_offline_in_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT, env=env, check=True, timeout=900,
    )  # fmt: skip
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    assert len(pages) >= 30
    problems: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("request", lambda r: urlparse(r.url).scheme in ("file", "data", "blob")
                or problems.append(f"network: {r.url}"))  # fmt: skip
        for path in pages:
            page.goto(path.as_uri(), wait_until="load")
            where = path.relative_to(site).as_posix()
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.src, e.complete && e.naturalWidth > 0])"
            )
            problems += [f"{where}: image {src} missing" for src, ok in images if not ok]
            for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
                url = urlparse(href)
                if url.scheme == "file" and not Path(unquote(url.path)).exists():
                    problems.append(f"{where}: link to missing {href}")
        page.goto((site / "index.html").as_uri(), wait_until="load")
        page.click("input.md-search__input")  # shown once the search worker is up
        page.wait_for_function(  # the worker has read the inlined index
            "!document.querySelector('.md-search-result__meta').textContent.includes('Init')",
            timeout=20_000,
        )
        page.keyboard.type("rotary")
        page.wait_for_selector(".md-search-result__item", timeout=20_000)
        hits = page.locator(".md-search-result__item").count()
        browser.close()
    assert problems == [], "\n".join(problems)
    assert hits > 0  # search answers from the file system
