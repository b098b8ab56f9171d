"""The Ray executor on a local Ray instance gives the local executor's results."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from posenc.lab.config import parse_sweep
from posenc.lab.executors import LocalExecutor, RayExecutor, make_executor
from posenc.lab.sweep import STORE_NAME, run_sweep

SWEEP = {
    "name": "ray",
    "encodings": ["nope", "alibi"],
    "tasks": [{"name": "copy_rep", "train_len": [1, 4]}],
    "seeds": [0],
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
    "train": {"steps": 20, "batch_size": 8, "warmup": 2, "eval_samples": 8},
}


def _metrics(path: Path) -> list[tuple]:
    with sqlite3.connect(path / STORE_NAME) as conn:
        return conn.execute("SELECT * FROM metrics ORDER BY run_key, length, name").fetchall()


# Ray starts its processes by fork + exec; JAX (imported by the JAX tests in the same pytest
# process) warns on any fork, though nothing runs in the child before the exec.
@pytest.mark.slow  # a Ray cluster starts: 1-3 min on 2 cores
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
def test_ray_results_equal_local_results(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    sweep = parse_sweep(SWEEP)
    run_sweep(sweep, tmp_path / "local", executor=LocalExecutor(1), live=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcome = run_sweep(sweep, tmp_path / "ray", executor=RayExecutor(), live=False)
    finally:
        ray.shutdown()
    assert outcome.ran == 2
    assert _metrics(tmp_path / "ray") == _metrics(tmp_path / "local")


def test_executor_choices_are_validated() -> None:
    assert isinstance(make_executor("local", workers=1), LocalExecutor)
    with pytest.raises(ValueError, match="executor must be 'local' or 'ray', got 'dask'"):
        make_executor("dask")
    with pytest.raises(ValueError, match=r"gpus_per_run must be in \[0, 1\], got 2"):
        RayExecutor(gpus_per_run=2)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        LocalExecutor(-1)
