"""``posenc report --out DIR`` through the CLI."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from posenc.cli import app

runner = CliRunner()


def test_report_writes_index_html(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "nope", "rope", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert 'id="enc-nope"' in page and 'id="enc-rope"' in page and 'id="comparison"' in page
    assert "data:image/png;base64," in page
    # reST literals of docstrings (rope's ``layout``) become <code>, none stays raw
    assert "``" not in page and "<code>layout</code>" in page


def test_report_rejects_bad_input(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "bogus", "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "unknown positional encoding" in result.output
    result = runner.invoke(
        app, ["report", "--format", "gif", "--out", str(tmp_path)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2 and "png or svg" in result.output
