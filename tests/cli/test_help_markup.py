"""Help texts and ``posenc list`` read as plain terminal text: no reST markup, no ANSI on a pipe.

The apps render help as Markdown (``rich_markup_mode="markdown"``), so `x` in a docstring shows
as code and soft line breaks join; reST's double backticks and roles would show raw.
"""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from posenc.cli import app

REST = re.compile(r"``|:(?:class|func|meth|mod|attr|data):`")


def _paths(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        found += _paths(sub, (*path, name))
    return found


COMMANDS = _paths(typer.main.get_command(app))


def test_every_command_is_walked() -> None:
    assert {("list",), ("plot",), ("lab", "extend"), ("lab", "table"), ("eval", "ppl")} <= set(
        COMMANDS
    )


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "posenc")
def test_help_has_no_rest_markup_and_no_ansi(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert not REST.search(result.output), result.output
    assert "`" not in result.output  # Markdown code spans render without their backticks
    assert "\x1b[" not in result.output  # not a terminal: no colour codes


def test_command_summaries_join_soft_line_breaks() -> None:
    """``posenc --help`` lists ``list``'s two-line docstring as one wrapped sentence (rich
    mode kept the docstring's line break, leaving "then the RoPE" alone on a line)."""
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"})
    text = " ".join(line.strip("│ ") for line in result.output.splitlines())
    assert 'then the RoPE context-extension methods, each usable as build("rope"' in text


def test_plot_kinds_are_a_list_in_the_help() -> None:
    result = CliRunner().invoke(app, ["plot", "--help"], env={"COLUMNS": "100"})
    assert "• heatmap: Heatmap of the position features" in result.output
    assert "• bias: One heatmap per head of bias[h, i, j]" in result.output  # brackets kept


def test_list_has_no_rest_markup() -> None:
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert not REST.search(result.output) and "`" not in result.output
    assert "\x1b[" not in result.output
