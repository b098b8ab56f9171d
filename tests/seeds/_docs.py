"""The demos of docs/seeds.md, one row each, and the checks that walk them.

Each test module registers one check per row with ``@demo("000-table")``; ``test_index``
holds the list and the checks to each other. A check gets its row (the posenc call or command
as documented) and a temporary folder; ``invoke`` runs a ``posenc ...`` command as written
(``shlex``: quoted as for a POSIX shell).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from posenc.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "seeds.md"
ROW = re.compile(r"^\| `(?P<id>(?P<seed>\d{3})-[\w-]+)` \| (?P<title>.+?) \| `(?P<call>.+)` \|$")


@dataclass(frozen=True)
class Demo:
    """One row of docs/seeds.md."""

    id: str
    seed: str
    title: str
    call: str


def demos(seed: str | None = None) -> list[Demo]:
    """The rows of docs/seeds.md (of one seed), in the page's order."""
    rows = [
        Demo(m["id"], m["seed"], m["title"], m["call"])
        for m in map(ROW.match, DOC.read_text().splitlines())
        if m
    ]
    return [r for r in rows if seed is None or r.seed == seed]


Check = Callable[[Demo, Path], None]
#: id -> the check of that row, filled by the test modules' ``@demo``.
CHECKS: dict[str, Check] = {}


def demo(demo_id: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        old = CHECKS.get(demo_id)
        where = (fn.__code__.co_filename, fn.__code__.co_firstlineno)
        # a module imported twice (pytest's import and test_index's) registers the same code
        if old is not None and (old.__code__.co_filename, old.__code__.co_firstlineno) != where:
            raise ValueError(f"two checks for {demo_id}")
        CHECKS[demo_id] = fn
        return fn

    return register


def run(row: Demo, tmp_path: Path) -> None:
    """The registered check of ``row`` (a row without one fails here and in test_index)."""
    assert row.id in CHECKS, f"docs/seeds.md row {row.id} has no check in tests/seeds"
    CHECKS[row.id](row, tmp_path)


def invoke(row: Demo, *extra: str) -> Result:
    """``row``'s ``posenc ...`` command run in process, with ``extra`` arguments appended;
    asserts it exits 0."""
    args = shlex.split(row.call)
    assert args[0] == "posenc", f"{row.id}: not a posenc command: {row.call}"
    result = CliRunner().invoke(app, [*args[1:], *extra], env={"COLUMNS": "200"})
    assert result.exit_code == 0, f"{row.call}\n{result.output}"
    return result


def sets(row: Demo) -> list[str]:
    """The ``--set`` values of ``row``'s command."""
    args = shlex.split(row.call)
    return [args[i + 1] for i, a in enumerate(args) if a == "--set"]
