"""Every Python example on the documentation pages runs as written (as README's does)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "templates" not in p.parts)


def _blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_pages_with_examples_are_found() -> None:
    having = {p.relative_to(DOCS).as_posix() for p in PAGES if _blocks(p)}
    assert {"getting-started.md", "encodings/rotary.md", "encodings/bias.md", "jax.md"} <= having


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _blocks(p)], ids=lambda p: p.relative_to(DOCS).as_posix()
)
def test_python_examples_run(page: Path) -> None:
    for block in _blocks(page):
        namespace: dict[str, object] = {}
        exec(compile(block, str(page), "exec"), namespace)
