"""``posenc lab`` end to end on a tiny sweep: results, report, export, resume, bad configs."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc.cli import app

TINY = """
name = "tiny"
encodings = ["nope", "learned"]
tasks = ["copy_rep", "ascending"]
seeds = [0]
[model]
d_model = 16
n_layers = 1
n_heads = 2
[train]
steps = 10
batch_size = 8
warmup = 2
eval_samples = 8
"""


def test_sweep_report_export_and_resume(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY)
    out = tmp_path / "out"
    runner = CliRunner()
    args = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(out), "--workers", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "(4 runs, 0 reused)" in result.output and "report:" in result.output
    assert "4 runs of 4 did not learn its task" in result.output  # 10 steps: none passes
    # the answer before the paths: per task the ranking beyond training, the findings
    answer, paths = result.output.split("results: ")
    assert "The answer beyond the training length" in answer and "report:" in paths
    assert "Published findings" in answer and "    did not learn" in answer
    assert "\x1b[" not in result.output  # not a terminal: plain text
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 2  # 2 task curves (10 steps learn nothing:
    # no run passes the gate, so no attention maps)
    assert 'id="answer"' in html and "did not learn" in html and "Published findings" in html
    assert "No run of nope, learned passed the gate" in html
    assert "http://" not in html and "https://" not in html  # self-contained, no network

    again = runner.invoke(app, args)
    assert "(0 runs, 4 reused)" in again.output

    result = runner.invoke(
        app, ["lab", "export", "--out", str(out), "--csv", str(tmp_path / "r.csv")]
    )
    assert result.exit_code == 0, result.output
    with (tmp_path / "r.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 4 * 3  # encodings x tasks x lengths x metrics
    assert {r["encoding"] for r in rows} == {"nope", "learned"}


def test_preset_with_overrides(tmp_path: Path) -> None:
    sets = [
        "encodings=[rope]",
        "tasks=[copy_rep]",
        "seeds=[0]",
        "train.steps=5",
        "train.eval_samples=4",
        "model.d_model=16",
        "model.n_heads=2",
        "model.n_layers=1",
    ]
    args = ["lab", "--out", str(tmp_path), "--workers", "1"]
    for s in sets:
        args += ["--set", s]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").is_file() and (tmp_path / "results.sqlite").is_file()


def test_bad_config_exits_with_the_key_named(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(TINY.replace("n_layers = 1", "n_layers = 0"))
    result = CliRunner().invoke(
        app, ["lab", "sweep", str(tmp_path / "bad.toml"), "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "n_layers must be > 0" in result.output
    result = CliRunner().invoke(app, ["lab", "--set", "model.n_layerz=2", "--out", str(tmp_path)])
    assert (
        result.exit_code == 2
        and "error: lab config: model.n_layerz: unknown key\n" == result.stderr
    )
    result = CliRunner().invoke(app, ["lab", "export", "--out", str(tmp_path / "none")])
    assert result.exit_code != 0 and "no result store" in result.output


def test_failed_runs_exit_1_after_the_report(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU (device='cuda' must fail)")
    (tmp_path / "tiny.toml").write_text(TINY)
    args = [
        "lab",
        "sweep",
        str(tmp_path / "tiny.toml"),
        "--out",
        str(tmp_path),
        "--workers",
        "1",
        "--device",
        "cuda",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    assert "4 runs failed" in result.output and (tmp_path / "report.html").is_file()


@pytest.mark.slow  # trains with the gate under JAX: over a minute on 2 cores
def test_jax_backend_trains_decoder_tasks_and_refuses_classification(tmp_path: Path) -> None:
    pytest.importorskip("flax", reason="the jax backend needs the posenc[jax] extra")
    decoder_only = TINY.replace('tasks = ["copy_rep", "ascending"]', 'tasks = ["copy_rep"]')
    decoder_only = decoder_only.replace('["nope", "learned"]', '["learned"]')
    (tmp_path / "tiny.toml").write_text(decoder_only)
    out = tmp_path / "out"
    runner = CliRunner()
    base = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(out), "--workers", "1"]
    result = runner.invoke(app, [*base, "--backend", "jax"])
    assert result.exit_code == 0, result.output
    assert "(1 run, 0 reused)" in result.output
    torch_run = runner.invoke(app, base)  # same grid on torch: stored under another key
    assert "(1 run, 0 reused)" in torch_run.output, torch_run.output

    (tmp_path / "cls.toml").write_text(decoder_only.replace('"copy_rep"', '"ascending_encoder"'))
    cls = runner.invoke(
        app,
        [
            "lab",
            "sweep",
            str(tmp_path / "cls.toml"),
            "--out",
            str(tmp_path / "c"),
            "--workers",
            "1",
            "--backend",
            "jax",
        ],
    )
    assert cls.exit_code == 1
    bad = runner.invoke(app, [*base, "--backend", "tensorflow"])
    assert bad.exit_code == 2 and "backend must be one of" in bad.output


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ('["nope", "learned"]', '["nope", "ropee"]', "unknown positional encoding 'ropee'"),
        ('["copy_rep", "ascending"]', '["copy_rep", "copyy"]', "unknown task 'copyy'"),
    ],
)
def test_unknown_encoding_or_task_is_a_one_line_error(
    tmp_path: Path, old: str, new: str, match: str
) -> None:
    (tmp_path / "bad.toml").write_text(TINY.replace(old, new))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["lab", "sweep", str(tmp_path / "bad.toml"), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: config key") and match in result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, ValueError)
    assert not out.exists()  # nothing written for a config that cannot run


def test_ray_executor_without_ray_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # "import ray" raises ImportError
    (tmp_path / "tiny.toml").write_text(TINY)
    args = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*args, "--executor", "ray"])
    assert result.exit_code == 2, result.output
    assert "pip install 'posenc[ray]'" in result.output
    assert not isinstance(result.exception, ImportError)


def test_zero_workers_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TINY)
    args = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*args, "--workers", "0"])
    assert result.exit_code == 2 and "workers must be >= 1, got 0" in result.output


@pytest.mark.parametrize("case", ["file", "under-file", "read-only-dir", "read-only-store"])
def test_an_out_that_cannot_be_written_is_a_one_line_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """``--out`` naming a file, a path under a file, a directory or a store this user cannot
    write: one line on stderr naming the path and what is wrong, exit 2, nothing trained.
    (Root may write anywhere, so the read-only cases answer ``os.access`` as a user's would.)"""
    (tmp_path / "tiny.toml").write_text(TINY)
    (tmp_path / "notes.txt").write_text("a file\n")
    out = {"file": "notes.txt", "under-file": "notes.txt/out"}.get(case, "out")
    out_path, denied = tmp_path / out, tmp_path / "out"
    if case.startswith("read-only"):
        denied.mkdir()
        if case == "read-only-store":
            (denied / "results.sqlite").touch()
            denied = denied / "results.sqlite"
        real_access = os.access

        def access(path: str | Path, mode: int, **kwargs: object) -> bool:
            return not (Path(path) == denied and mode & os.W_OK) and real_access(path, mode)

        monkeypatch.setattr(os, "access", access)
    args = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(out_path), "--workers", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    want = {
        "file": " is a file, not a directory",
        "under-file": f": {tmp_path / 'notes.txt'} is a file, not a directory",
        "read-only-dir": " is not writable",
        "read-only-store": f": {denied} is read-only",
    }[case]
    assert result.stderr == f"error: --out {out_path}{want}\n"
    assert result.stdout == "" and not isinstance(result.exception, OSError)
    assert not (tmp_path / "out" / "report.html").exists()
