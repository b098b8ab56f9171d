"""Every error of the ``posenc`` command in one style: ``error: <message>`` on stderr, no box.

Exit 2 for usage errors (bad arguments, options, config values), 1 for failures at run time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from posenc.cli import app
from posenc.cli._errors import PosencGroup

BOX = ("╭", "╰", "│", "─")


def _one_error(result, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    """The single ``error:`` line of ``result``, after checking its style and exit code."""
    assert result.exit_code == code, result.output
    assert result.stdout == "", result.stdout
    err = result.stderr
    assert err.startswith("error: ") and err.endswith("\n"), err
    assert not any(c in err for c in BOX), err
    assert "Usage:" not in err and "Invalid value" not in err and "Traceback" not in err
    assert "Value error, " not in err and "Input should be" not in err
    assert "errors.pydantic.dev" not in err
    return err


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (
            ["plot", "nosuch"],
            "error: unknown plot kind 'nosuch'; choose one of ['alibi-slopes', ",
        ),
        (["nosuchcmd"], "error: no such command 'nosuchcmd' (see 'posenc --help')\n"),
        (["list", "--bogus"], "error: no such option: --bogus (see 'posenc list --help')\n"),
        (["lab", "sweep"], "error: missing argument 'config' (see 'posenc lab sweep --help')\n"),
        (["demo", "--seed", "x"], "error: --seed must be an integer, got 'x'\n"),
        (["bench", "--device", "tpu"], "error: --device must be cpu or cuda, got 'tpu'\n"),
        (["lab", "export", "--out", "/nonexistent"], "error: --out: no result store at "),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], want: str) -> None:
    err = _one_error(CliRunner().invoke(app, args))
    assert err.startswith(want) and err.count("\n") == 1, err


def test_a_missing_config_file_is_one_line_exit_2() -> None:
    err = _one_error(CliRunner().invoke(app, ["lab", "sweep", "/nonexistent.toml"]))
    assert err == "error: config file '/nonexistent.toml' does not exist\n"


def test_a_bad_lab_config_names_the_key_without_pydantic_words(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('encodings = ["rope"]\ntasks = ["copy"]\n[train]\nsteps = -3\n')
    err = _one_error(CliRunner().invoke(app, ["lab", "sweep", str(bad)]))
    assert err == "error: lab config: train.steps must be > 0, got -3\n"
    # several problems: one line each under the first, still no pydantic wording
    sets = ["--set", "model.d_model=abc", "--set", "model.colour=1"]
    err = _one_error(CliRunner().invoke(app, ["lab", "sweep", str(bad), *sets]))
    assert err.splitlines() == [
        "error: lab config has 3 problems:",
        "  model.d_model must be an integer, got 'abc'",
        "  model.colour: unknown key",
        "  train.steps must be > 0, got -3",
    ]


def _app(fn) -> typer.Typer:  # type: ignore[no-untyped-def]
    """A posenc-style app with one command ``run`` (and a second so ``run`` is a subcommand)."""
    tiny = typer.Typer(cls=PosencGroup)
    tiny.command("run")(fn)
    tiny.command("other")(lambda: None)
    return tiny


def test_a_posenc_value_error_escaping_a_command_is_one_line_exit_2() -> None:
    from posenc import registry

    def run() -> None:
        registry.info("ropee")

    err = _one_error(CliRunner().invoke(_app(run), ["run"]))
    assert err.startswith("error: unknown positional encoding 'ropee'; choose one of ["), err


def test_a_failure_at_run_time_is_one_line_exit_1(tmp_path: Path) -> None:
    def run() -> None:
        (tmp_path / "no" / "such" / "dir" / "f").read_text()

    err = _one_error(CliRunner().invoke(_app(run), ["run"]), code=1)
    assert err.startswith("error: [Errno 2] No such file or directory: "), err


def test_a_bug_outside_posenc_keeps_its_traceback() -> None:
    def run() -> None:
        int("not a number")  # raised here, in the test module: not posenc's validation

    result = CliRunner().invoke(_app(run), ["run"])
    assert isinstance(result.exception, ValueError) and result.exit_code == 1


def test_help_is_unchanged() -> None:
    result = CliRunner().invoke(app, ["plot", "--help"])
    assert result.exit_code == 0 and "Usage: posenc plot" in result.output
    result = CliRunner().invoke(app, [])
    assert result.exit_code in (0, 2) and "Usage: posenc" in result.output
