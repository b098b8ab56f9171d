"""README's Python example runs as written, and its commands are the ones CI runs."""

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
