"""``posenc eval ppl|passkey``: the library's numbers as JSON and a PNG; errors in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc.cli import app
from posenc.eval import load_model, perplexity
from tests.eval.conftest import TEXT


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["eval", *args])


def test_ppl_writes_the_library_result(llama_dir: Path, tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    scaling = '{"rope_type": "linear", "factor": 2.0}'
    args = ["--text", str(text), "--lengths", "64,128", "--stride", "32", "--out", str(tmp_path)]
    result = _run("ppl", str(llama_dir), *args, "--scaling", scaling)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "ppl.json").read_text())
    assert (tmp_path / "ppl.png").stat().st_size > 0
    lm = load_model(llama_dir, scaling=json.loads(scaling))
    want = perplexity(lm, lm.tokenizer.encode(TEXT), lengths=[64, 128], stride=32)
    assert data == json.loads(json.dumps(want.to_dict()))
    assert "length     64: ppl" in result.stdout


def test_passkey_writes_its_grid(llama_dir: Path, lab_checkpoint: Path, tmp_path: Path) -> None:
    for model, form in ((llama_dir, "text"), (lab_checkpoint, "text")):
        args = ["--lengths", "300,400", "--depths", "0,1", "--trials", "1", "--out", str(tmp_path)]
        result = _run("passkey", str(model), *args)
        assert result.exit_code == 0, result.output
        data = json.loads((tmp_path / "passkey.json").read_text())
        assert data["form"] == form and data["lengths"] == [300, 400]
        assert len(data["accuracy"]) == 2 and len(data["trials"]) == 4
        assert (tmp_path / "passkey.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (
            ["ppl", "MODEL", "--text", "TEXT", "--lengths", "a,b"],
            "error: --lengths: expected comma",
        ),
        (["ppl", "MODEL", "--text", "nosuch.txt"], "error: --text: no file at nosuch.txt"),
        (["passkey", "MODEL", "--scaling", "{x"], "error: --scaling: not JSON"),
        (
            ["passkey", "MODEL", "--depths", "0,2", "--lengths", "300"],
            "error: --depths: depths must lie in [0, 1]",
        ),
        (["passkey", "/nonexistent"], "error: MODEL must be a transformers model directory"),
    ],
)
def test_errors_are_one_line(llama_dir: Path, tmp_path: Path, args: list[str], want: str) -> None:
    (tmp_path / "t.txt").write_text(TEXT)
    args = [
        str(llama_dir) if a == "MODEL" else str(tmp_path / "t.txt") if a == "TEXT" else a
        for a in args
    ]
    result = _run(*args, "--out", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(want) and result.stderr.count("\n") == 1, result.stderr
