"""The evaluations' progress on stderr: lines when stderr is not a terminal, nothing when off."""

from __future__ import annotations

import pytest

from posenc.eval.progress import progress_bar


def test_progress_is_a_line_per_step_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with progress_bar(2, "perplexity") as step:
        step("length 512")
        step("length 1024")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "perplexity: length 512 (1/2)",
        "perplexity: length 1024 (2/2)",
    ]


def test_progress_off_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with progress_bar(1, "passkey", False) as step:
        step("x")
    assert capsys.readouterr() == ("", "")
