"""``posenc plot KIND [NAME...] --out DIR`` through the CLI."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from posenc.cli import app

runner = CliRunner()
ENV = {"COLUMNS": "200"}


def test_plot_writes_one_png_per_encoding(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plot", "heatmap", "sinusoidal", "rope", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("heatmap-sinusoidal.png", "heatmap-rope.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_plot_defaults_to_every_applicable_encoding_and_svg(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plot", "bias", "--out", str(tmp_path), "--format", "svg"])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["bias-alibi.svg", "bias-fire.svg", "bias-kerple.svg", "bias-t5.svg"]
    assert b"<svg" in (tmp_path / "bias-alibi.svg").read_bytes()[:500]


def test_overlay_and_global_kinds_write_one_file(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plot", "wavelengths", "rope", "xpos", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["plot", "extension", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extension.png", "wavelengths.png"]


def test_bad_kind_format_or_encoding_is_a_usage_error(tmp_path: Path) -> None:
    out = ["--out", str(tmp_path)]
    result = runner.invoke(app, ["plot", "spiral", *out], env=ENV)
    assert result.exit_code == 2 and "unknown plot kind" in result.output
    result = runner.invoke(app, ["plot", "heatmap", "rope", "--format", "gif", *out], env=ENV)
    assert result.exit_code == 2 and "png or svg" in result.output
    result = runner.invoke(app, ["plot", "bias", "rope", *out], env=ENV)
    assert result.exit_code == 2 and "does not apply" in result.output
    assert not list(tmp_path.iterdir())
