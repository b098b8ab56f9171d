"""``posenc report --out DIR`` through the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import posenc.report

from posenc.cli import app

runner = CliRunner()


def test_report_writes_index_html(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "nope", "rope", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert 'id="enc-nope"' in page and 'id="enc-rope"' in page and 'id="comparison"' in page
    assert "data:image/png;base64," in page
    assert "<title>posenc encodings report</title>" in page
    assert "<h1>posenc encodings report</h1>" in page
    # reST literals of docstrings (rope's ``layout``) become <code>, none stays raw
    assert "``" not in page and "<code>layout</code>" in page


def test_help_names_the_encodings_report_apart_from_the_labs() -> None:
    result = runner.invoke(app, ["report", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "posenc encodings report" in text and "Not the lab's report" in text


def test_report_rejects_bad_input(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "bogus", "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "unknown positional encoding" in result.output
    result = runner.invoke(
        app, ["report", "--format", "gif", "--out", str(tmp_path)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2 and "png or svg" in result.output


def test_failed_report_leaves_no_folder_behind(tmp_path: Path) -> None:
    """An unknown encoding used to leave the (empty) --out folder and its parents."""
    out = tmp_path / "new" / "deeper"
    result = runner.invoke(app, ["report", "bogus", "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "unknown positional encoding" in result.output
    assert not (tmp_path / "new").exists()


def test_failed_write_removes_only_the_folders_it_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(out_dir: Path, *_: object, **__: object) -> Path:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "index.html").write_text("half a page")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(posenc.report, "write_report", disk_full)
    out = tmp_path / "new" / "deeper"
    result = runner.invoke(app, ["report", "nope", "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: cannot write the report to {out}: [Errno 28] No space left on device"
    ]
    assert not (tmp_path / "new").exists()

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["report", "nope", "--out", str(kept / "sub")])
    assert result.exit_code == 1 and sorted(p.name for p in kept.iterdir()) == ["notes.txt"]
    monkeypatch.undo()
    result = runner.invoke(app, ["report", "bogus", "--out", str(kept)])
    assert result.exit_code == 2 and (kept / "notes.txt").read_text() == "mine"


def test_out_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    out = tmp_path / "index.html"
    out.write_text("not a folder")
    result = runner.invoke(app, ["report", "nope", "--out", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "is not a directory" in result.output
    assert out.read_text() == "not a folder"


def test_write_report_keeps_an_older_page_when_writing_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "index.html").write_text("older page")

    def fail(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)  # the rename of posenc._files' atomic write
    with pytest.raises(OSError, match="No space"):
        posenc.report.write_report(tmp_path, ["nope"], fmt="svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html"]
    assert (tmp_path / "index.html").read_text() == "older page"
