"""README's Python example runs as written, its commands are the ones CI runs, and it fits on a
screen or two, linking into the docs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_readme_python_examples_run() -> None:
    blocks = _blocks("python")
    assert blocks
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, "README.md", "exec"), namespace)


def test_quickstart_has_two_commands_and_ci_runs_the_test_one_verbatim() -> None:
    commands = [b.strip() for b in _blocks("bash")[:2]]
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci
    assert "constraints.txt" in commands[0] and "constraints.txt" in commands[1]


def test_readme_fits_on_a_screen_or_two_and_links_into_the_docs() -> None:
    """README is the front page (at most 12,000 bytes); everything else lives in docs/, and
    every link it makes into docs/ names a page that exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12_000
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert len(links) >= 10
    for link in links:
        assert (ROOT / link).is_file(), link


def test_readme_lab_tables_moved_to_the_results_page() -> None:
    """The lab's result blocks live on docs/results.md, generated and checked there
    (tests/docs/test_generated.py); README keeps none by hand."""
    from posenc.lab.table import BEGIN

    text = (ROOT / "README.md").read_text()
    assert BEGIN not in text and "| task | length | winners |" not in text
    assert (
        "posenc lab table --out benchmarks/results/lab-quick.sqlite"
        in (ROOT / "docs" / "results.md").read_text()
    )
