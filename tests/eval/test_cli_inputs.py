"""``posenc eval``: every input and output checked before any window is scored; each bad one is
one ``error:`` line with exit 2, never a traceback."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posenc.cli import app
from posenc.eval import perplexity
from tests.eval.conftest import TEXT

perplexity_module = importlib.import_module("posenc.eval.perplexity")


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["eval", *args])


def _one_line(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and len(lines) == 1, result.output
    return errors[0]


@pytest.fixture
def text(tmp_path: Path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    return path


def test_binary_and_empty_text_are_refused(lab_checkpoint: Path, tmp_path: Path) -> None:
    binary, empty = tmp_path / "b.bin", tmp_path / "e.txt"
    binary.write_bytes(bytes(range(256)) * 4)
    empty.write_text("")
    line = _one_line(_run("ppl", str(lab_checkpoint), "--text", str(binary), "--lengths", "8"))
    assert "--text" in line and "not UTF-8 text" in line, line
    line = _one_line(_run("ppl", str(lab_checkpoint), "--text", str(empty), "--lengths", "8"))
    assert "empty" in line, line


def test_empty_tokens_say_so_in_the_library(lab_checkpoint: Path) -> None:
    from posenc.eval import load_model

    lm = load_model(lab_checkpoint)
    with pytest.raises(ValueError, match="got none"):
        perplexity(lm, [], lengths=[8])


@pytest.mark.parametrize("device", ["cuda", "tpu"])
def test_an_unusable_device_is_refused(lab_checkpoint: Path, text: Path, device: str) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    for args in (
        ["ppl", str(lab_checkpoint), "--text", str(text), "--lengths", "8"],
        ["passkey", str(lab_checkpoint), "--lengths", "64"],
    ):
        line = _one_line(_run(*args, "--device", device))
        assert "device" in line and device in line, line


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--seed", "-1"], "--seed"),
        (["--seed", str(2**40)], "--seed"),
        (["--digits", "0"], "--digits"),
        (["--digits", "100"], "digits must be in 1..18"),
    ],
)
def test_bad_passkey_seeds_and_digits(llama_dir: Path, args: list[str], want: str) -> None:
    line = _one_line(_run("passkey", str(llama_dir), "--lengths", "300", *args))
    assert want in line, line


def test_a_truncated_lab_checkpoint_is_one_line(lab_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "lab"
    shutil.copytree(lab_checkpoint.parent.parent, out)
    cut = out / "checkpoints" / lab_checkpoint.name
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    line = _one_line(_run("passkey", str(cut), "--lengths", "64"))
    assert "cannot be read" in line and str(cut) in line, line


def test_stride_zero_is_refused(lab_checkpoint: Path, text: Path) -> None:
    from posenc.eval import load_model

    line = _one_line(
        _run("ppl", str(lab_checkpoint), "--text", str(text), "--lengths", "8", "--stride", "0")
    )
    assert "--stride" in line, line
    lm = load_model(lab_checkpoint)
    with pytest.raises(ValueError, match="stride"):
        perplexity(lm, lm.tokenizer.encode(TEXT), lengths=[8], stride=0)


@pytest.mark.parametrize("case", ["file", "unwritable", "empty"])
def test_outputs_are_checked_before_any_window_is_scored(
    lab_checkpoint: Path, text: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    scored: list[int] = []
    real = perplexity_module._nll

    def nll(*args: object) -> object:
        scored.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(perplexity_module, "_nll", nll)
    (tmp_path / "a-file").write_text("x")
    out = {"file": str(tmp_path / "a-file"), "unwritable": "/proc/posenc-x", "empty": ""}[case]
    line = _one_line(
        _run("ppl", str(lab_checkpoint), "--text", str(text), "--lengths", "8", "--out", out)
    )
    assert "--out" in line, line
    assert scored == []
