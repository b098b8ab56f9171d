"""``posenc list`` shows the context-extension methods."""

from __future__ import annotations

from typer.testing import CliRunner

from posenc.cli import app
from posenc.extension import SCALINGS

runner = CliRunner()


def test_list_scaling_shows_every_method_with_its_paper() -> None:
    result = runner.invoke(app, ["list", "--scaling"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name, cls in SCALINGS.items():
        assert name in result.output and cls.paper in result.output
    assert "low_freq_factor" in result.output and "posenc encodings" not in result.output


def test_plain_list_shows_encodings_then_methods() -> None:
    result = runner.invoke(app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert result.output.index("posenc encodings") < result.output.index("RoPE context extension")
    assert "arXiv:2309.00071" in result.output
