"""The posenc command: list, demo, and a --help that does not import torch."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

import posenc
from posenc.cli import app

runner = CliRunner()


def test_list_shows_every_encoding_with_family_and_paper() -> None:
    result = runner.invoke(app, ["list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in posenc.names():
        entry = posenc.info(name)
        assert name in result.output and entry.family in result.output
    assert "Vaswani et al." in result.output and "head_dim" in result.output


def test_list_filters_by_family_and_refuses_an_unknown_one() -> None:
    result = runner.invoke(app, ["list", "--family", "bias"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "alibi" in result.output and "sinusoidal" not in result.output
    result = runner.invoke(app, ["list", "--family", "bogus"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "unknown family 'bogus'" in result.output


def test_demo_shows_equivariance_and_rope_identity() -> None:
    result = runner.invoke(app, ["demo"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "no (a set, not a sequence)" in result.output  # nope row
    dots = [line.split("dot=")[1] for line in result.output.splitlines() if "dot=" in line]
    assert len(dots) == 3 and len(set(dots)) == 1  # same <R_m q, R_n k> for every shift


def test_help_does_not_import_torch() -> None:
    """``posenc --help`` stays light: importing the CLI and printing help never loads torch.
    (How fast that is belongs in a benchmark, not in a timed unit test.)"""
    code = (
        "import sys; from posenc.cli import app; "
        "import typer.testing as tt; r = tt.CliRunner().invoke(app, ['--help']); "
        "print('torch' in sys.modules, r.exit_code)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    torch_loaded, exit_code = out.stdout.split()
    assert torch_loaded == "False" and exit_code == "0"


def test_python_dash_m_posenc_is_the_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "posenc", "lab", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "Usage: posenc lab" in out.stdout and "compare" in out.stdout
