"""Sweeps: resume after ``kill -9`` loses no finished run and duplicates none."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from posenc.lab.config import RunConfig, expand, parse_sweep
from posenc.lab.executors import LocalExecutor, RunFailure
from posenc.lab.sweep import STORE_NAME, run_sweep
from posenc.lab.train import RunResult, train_run

SWEEP = {
    "name": "resume",
    "encodings": ["nope", "rope", "alibi"],
    "tasks": [{"name": "copy_rep", "train_len": [1, 4]}],
    "seeds": [0, 1],
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
    "train": {"steps": 25, "batch_size": 8, "warmup": 2, "eval_samples": 8},
}
CHILD = """
import sys, torch
torch.set_num_threads(1)
from posenc.lab.config import parse_sweep
from posenc.lab.executors import LocalExecutor, RunFailure
from posenc.lab.sweep import run_sweep
run_sweep(parse_sweep({sweep!r}), sys.argv[1], executor=LocalExecutor(1), live=False)
"""


def _stored(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    try:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT key, finished_at FROM runs ORDER BY key").fetchall()
    except sqlite3.OperationalError:  # created, schema not yet written
        return []


def _metrics_per_run(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT run_key, COUNT(*) FROM metrics GROUP BY run_key").fetchall()
    return dict(rows)


def test_sweep_killed_mid_run_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    store = tmp_path / STORE_NAME
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(sweep=SWEEP), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while len(_stored(store)) < 2 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)  # mid-sweep, possibly mid-run or mid-write
    child.wait()
    before = _stored(store)
    assert 2 <= len(before) < 6, child.stderr.read().decode() if child.stderr else ""
    assert all(n == 12 for n in _metrics_per_run(store).values())  # every stored run is whole

    outcome = run_sweep(parse_sweep(SWEEP), tmp_path, executor=LocalExecutor(1), live=False)
    after = _stored(store)
    assert outcome.skipped == len(before) and outcome.ran == 6 - len(before)
    assert len(after) == 6 and {k for k, _ in after} == {
        r.key() for r in expand(parse_sweep(SWEEP))
    }
    assert set(before) <= set(after)  # finished runs kept as they were (same finished_at)
    assert all(n == 12 for n in _metrics_per_run(store).values())
    again = run_sweep(parse_sweep(SWEEP), tmp_path, executor=LocalExecutor(1), live=False)
    assert again.ran == 0 and _stored(store) == after


def test_process_pool_matches_in_process_results(tmp_path: Path) -> None:
    sweep = parse_sweep(SWEEP | {"encodings": ["rope"]})
    run_sweep(sweep, tmp_path / "one", executor=LocalExecutor(1), live=False)
    run_sweep(sweep, tmp_path / "pool", executor=LocalExecutor(2), live=False)
    rows = []
    for sub in ("one", "pool"):
        with sqlite3.connect(tmp_path / sub / STORE_NAME) as conn:
            rows.append(
                conn.execute("SELECT * FROM metrics ORDER BY run_key, length, name").fetchall()
            )
    assert rows[0] == rows[1] and len(rows[0]) == 2 * 12


def test_step_progress_reaches_every_run_in_a_pool_and_in_process(tmp_path: Path) -> None:
    sweep = parse_sweep(SWEEP | {"encodings": ["nope"]})
    for workers in (1, 2):
        seen: dict[str, int] = {}

        def record(key: str, done: int, loss: float, seen: dict[str, int] = seen) -> None:
            seen[key] = done

        ex = LocalExecutor(workers, on_steps=record)
        results = list(ex.map(expand(sweep), None))
        assert len(results) == 2
        assert seen == {r.key: 25 for r in results}


def test_live_progress_bars_run(tmp_path: Path) -> None:
    sweep = parse_sweep(SWEEP | {"encodings": ["nope"], "seeds": [0]})
    outcome = run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=True)
    assert outcome.ran == 1


def _children(pid: int) -> set[int]:
    """Child process ids of ``pid``, read from /proc."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # fields after "(comm)": state, ppid, ...
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")  # zombies are gone


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_pool_workers_stop_when_the_sweep_is_killed(tmp_path: Path) -> None:
    long = SWEEP | {"train": SWEEP["train"] | {"steps": 100000}}
    script = CHILD.replace("LocalExecutor(1)", "LocalExecutor(2)").format(sweep=long)
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and time.monotonic() < deadline:  # pool workers (+ resource tracker)
        time.sleep(0.2)
        workers = _children(child.pid)
    assert len(workers) >= 2
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers)


def test_a_failing_run_is_reported_and_the_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc.lab import executors

    def train_or_fail(cfg: RunConfig, **kw: Any) -> Any:
        if cfg.encoding == "learned":
            raise RuntimeError("boom")
        return train_run(cfg, **kw)

    monkeypatch.setattr(executors, "train_run", train_or_fail)
    sweep = parse_sweep(SWEEP | {"encodings": ["nope", "learned"], "seeds": [0]})
    outcome = run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    assert outcome.ran == 1 and [f.config.encoding for f in outcome.failed] == ["learned"]
    assert outcome.failed[0].error == "RuntimeError: boom"
    again = run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    assert again.skipped == 1 and len(again.failed) == 1  # the failure is retried, not stored


def test_failures_in_pool_workers_are_reported(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU (device='cuda' must fail)")
    sweep = parse_sweep(SWEEP | {"encodings": ["nope"], "device": "cuda"})
    outcome = run_sweep(sweep, tmp_path, executor=LocalExecutor(2), live=False)
    assert outcome.ran == 0 and len(outcome.failed) == 2
    assert all("torch.cuda.is_available() is False" in f.error for f in outcome.failed)
    assert _stored(tmp_path / STORE_NAME) == []


def test_a_repeated_eval_length_is_measured_once(tmp_path: Path) -> None:
    task = {"name": "copy_rep", "train_len": [1, 4], "eval_lens": [8, 4, 8]}
    sweep = parse_sweep(SWEEP | {"encodings": ["nope"], "seeds": [0], "tasks": [task]})
    outcome = run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    assert outcome.ran == 1 and not outcome.failed
    assert list(_metrics_per_run(tmp_path / STORE_NAME).values()) == [2 * 3]


def test_a_nan_metric_fails_its_run_and_the_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A diverged run (NaN loss, which SQLite cannot store as a REAL) is reported as a
    failure; the other runs are stored and nothing of the diverged one is."""
    from dataclasses import replace

    from posenc.lab import executors

    def diverge(cfg: RunConfig, **kw: Any) -> Any:
        result = train_run(cfg, **kw)
        if cfg.encoding != "learned":
            return result
        nan = [(n, m, float("nan") if m == "loss" else v) for n, m, v in result.metrics]
        return replace(result, metrics=nan)

    monkeypatch.setattr(executors, "train_run", diverge)
    sweep = parse_sweep(SWEEP | {"encodings": ["learned", "nope"], "seeds": [0]})
    outcome = run_sweep(sweep, tmp_path, executor=LocalExecutor(1), live=False)
    assert outcome.ran == 1 and [f.config.encoding for f in outcome.failed] == ["learned"]
    assert "NaN" in outcome.failed[0].error
    assert len(_stored(tmp_path / STORE_NAME)) == 1
    assert list(_metrics_per_run(tmp_path / STORE_NAME).values()) == [12]


def test_in_process_runs_match_a_pool_on_a_multithreaded_torch(tmp_path: Path) -> None:
    """``workers=1`` trains in the calling process with one torch thread as pool workers
    do: with the caller's thread count a wider model's float sums (and metrics) differ."""
    import torch

    sweep = parse_sweep(
        SWEEP
        | {
            "encodings": ["rope"],
            "tasks": [{"name": "copy_rep", "train_len": [8, 16]}],
            "model": {"d_model": 128, "n_layers": 2, "n_heads": 4},
            "train": {"steps": 6, "batch_size": 64, "warmup": 2, "eval_samples": 16},
        }
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        one = {r.key: r for r in LocalExecutor(1).map(expand(sweep), None)}
        assert torch.get_num_threads() == max(2, threads)  # the caller's count is restored
    finally:
        torch.set_num_threads(threads)
    pool = {r.key: r for r in LocalExecutor(2).map(expand(sweep), None)}
    assert set(one) == set(pool) and len(one) == 2
    for key, result in one.items():
        assert result.loss_curve == pool[key].loss_curve and result.metrics == pool[key].metrics


@dataclass(frozen=True)
class _DiesInWorker(RunConfig):
    """A run whose worker process dies (as under the OOM killer) when it unpickles it."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        os._exit(1)


def test_a_dying_worker_fails_only_its_own_run(tmp_path: Path) -> None:
    sweep = parse_sweep(SWEEP | {"encodings": ["nope"], "seeds": [0, 1, 2]})
    runs = expand(sweep)
    doomed = _DiesInWorker(**{f.name: getattr(runs[1], f.name) for f in fields(RunConfig)})
    outcomes = list(LocalExecutor(2).map([runs[0], doomed, runs[2]], None))
    failed = [o for o in outcomes if isinstance(o, RunFailure)]
    assert [f.config.key() for f in failed] == [doomed.key()]
    assert "died" in failed[0].error
    finished = {o.key for o in outcomes if not isinstance(o, RunFailure)}
    assert finished == {runs[0].key(), runs[2].key()}


class _Recording:
    """An executor that "trains" each run at once and records its key; ``hold=True`` keeps
    its first run in flight until ``release`` is set."""

    def __init__(self, hold: bool = False) -> None:
        self.trained: list[str] = []
        self.started, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()

    def map(self, runs: Sequence[RunConfig], checkpoint_dir: Path | None) -> Iterator[RunResult]:
        for cfg in runs:
            self.started.set()
            self.release.wait(60)
            self.trained.append(cfg.key())
            yield RunResult(cfg.key(), asdict(cfg), [(4, "exact_match", 1.0)], [(0, 1.0)], 0.1, 0.1)


def test_a_second_sweep_on_the_same_directory_waits_and_trains_no_run_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two sweeps on one directory: the second waits for the first (saying so), then finds
    every run stored and trains none of them again."""
    sweep = parse_sweep(SWEEP)
    first, second = _Recording(hold=True), _Recording()

    def start(executor: _Recording) -> threading.Thread:
        kwargs = {"executor": executor, "live": False}
        thread = threading.Thread(target=run_sweep, args=(sweep, tmp_path), kwargs=kwargs)
        thread.start()
        return thread

    one = start(first)
    assert first.started.wait(60)  # the first sweep is mid-run
    two, err, deadline = start(second), "", time.monotonic() + 60
    while two.is_alive() and "another sweep" not in err and time.monotonic() < deadline:
        err += capsys.readouterr().err
        time.sleep(0.02)
    first.release.set()
    one.join(60)
    two.join(60)
    err += capsys.readouterr().err
    assert sorted(first.trained) == sorted({r.key() for r in expand(sweep)})
    assert second.trained == []
    assert f"another sweep is writing to {tmp_path}; waiting" in err
    assert "0 runs to do, 6 already in the store" in err
