"""The lab report's attention sections: only runs that passed the gate, lengths the model was
built for, whole inputs."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch

from posenc.lab import attention_maps as maps_module
from posenc.lab.config import expand, parse_sweep
from posenc.lab.executors import LocalExecutor
from posenc.lab.report import write_report
from posenc.lab.sweep import run_sweep


def _sweep(task: dict[str, Any], encoding: str = "learned") -> Any:
    return parse_sweep(
        {
            "name": "report",
            "encodings": [encoding],
            "tasks": [task],
            "seeds": [0],
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
            "train": {"steps": 2, "batch_size": 4, "warmup": 1, "eval_samples": 4},
        }
    )


def _pass_the_gate(out: Path) -> None:
    """Two training steps learn nothing: store exact match 1 up to the training length, as a
    run that passed the gate would have (the maps only need its checkpoint)."""
    with sqlite3.connect(out / "results.sqlite") as conn:
        conn.execute(
            "UPDATE metrics SET value = 1.0 WHERE name = 'exact_match' AND length <= "
            "(SELECT train_max FROM runs WHERE runs.key = metrics.run_key)"
        )
        conn.execute("UPDATE runs SET passed_gate = 1, gate_metric = 1.0")


def test_attention_stays_within_the_evaluated_lengths(tmp_path: Path) -> None:
    """Eval lengths short of 2x training: the learned table ends there, so must the maps."""
    sweep = _sweep({"name": "copy", "train_len": [1, 8], "eval_lens": [4, 12]})
    run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    _pass_the_gate(tmp_path)
    html = write_report(expand(sweep), tmp_path).read_text()
    assert "Attention: learned" in html and "passed the gate" in html
    assert "mean distance at length 8" in html and "mean distance at length 12" in html


def test_encodings_computing_attention_from_the_data_get_a_note_not_maps(tmp_path: Path) -> None:
    """fox's layers return no softmax weights: a run that passed the gate is reported without
    maps (not a crash of the report)."""
    sweep = _sweep({"name": "copy", "train_len": [1, 8], "eval_lens": [8, 12]}, "fox")
    run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    _pass_the_gate(tmp_path)
    html = write_report(expand(sweep), tmp_path).read_text()
    assert "Attention: fox" not in html
    assert "fox compute attention from the data, blockwise: no softmax weights to draw." in html


def test_runs_that_did_not_learn_get_no_attention_maps(tmp_path: Path) -> None:
    sweep = _sweep({"name": "copy", "train_len": [1, 8], "eval_lens": [8, 12]})
    run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    html = write_report(expand(sweep), tmp_path).read_text()
    assert "Attention: learned" not in html
    assert "No run of learned passed the gate with a checkpoint: no maps." in html


def test_classification_maps_read_the_whole_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = maps_module.attention_maps

    def spy(net: Any, tokens: torch.Tensor, pos: torch.Tensor | None = None) -> list[torch.Tensor]:
        seen.append(tokens.shape[1])
        return real(net, tokens, pos)

    monkeypatch.setattr(maps_module, "attention_maps", spy)
    sweep = _sweep({"name": "offset", "train_len": [2, 6]}, encoding="rope")
    run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    _pass_the_gate(tmp_path)
    write_report(expand(sweep), tmp_path)
    assert seen == [6, 12]  # n tokens at n = 6 and n = 12, as the model is evaluated
