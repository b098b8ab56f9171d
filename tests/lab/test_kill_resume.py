"""The lab as a long job through the CLI: Ctrl-C, progress output, broken stores, Ray clusters."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc.cli import app
from posenc.lab import sweep as sweep_module
from posenc.lab.config import expand, parse_sweep
from posenc.lab.executors import RayExecutor, RunFailure
from posenc.lab.progress import SweepProgress
from posenc.lab.sweep import STORE_NAME
from posenc.lab.train import RunResult

TINY = """
name = "tiny"
encodings = ["nope"]
tasks = [{{name = "copy_rep", train_len = [1, 4]}}]
seeds = [0, 1]
[model]
d_model = 16
n_layers = 1
n_heads = 2
[train]
steps = {steps}
batch_size = 8
warmup = 2
eval_samples = 8
"""
SWEEP = {
    "name": "tiny",
    "encodings": ["nope"],
    "tasks": [{"name": "copy_rep", "train_len": [1, 4]}],
    "seeds": [0],
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
    "train": {"steps": 4, "batch_size": 8, "warmup": 2, "eval_samples": 8},
}


def _result() -> RunResult:
    run = expand(parse_sweep(SWEEP))[0]
    return RunResult(run.key(), asdict(run), [(4, "exact_match", 1.0)], [(0, 1.0)], 0.1, 0.1)


def test_ctrl_c_says_how_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tiny.toml").write_text(TINY.format(steps=4))

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_sweep", interrupted)
    out = tmp_path / "out"
    args = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(out), "--workers", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130
    assert "interrupted" in result.output and "again to resume" in result.output
    assert "Traceback" not in result.output


def test_live_progress_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """The bars are chosen by ``sys.stderr.isatty()``: they and their log lines belong on
    stderr, not in the stdout a user pipes (``posenc lab | tee``) or parses."""
    result = _result()
    with SweepProgress(1, 0, steps=4, live=True) as progress:
        progress.steps(result.key, 4, 0.5)
        progress.run_done(result)
    captured = capsys.readouterr()
    assert "[1/1]" in captured.err
    assert "[1/1]" not in captured.out and "runs" not in captured.out


def test_live_log_lines_are_whole_lines_without_a_source_path(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the bars each event is one line as written: not wrapped at the terminal width,
    no ``progress.py:NN`` column, brackets in an error message kept (not read as markup)."""
    monkeypatch.setenv("COLUMNS", "40")
    result = _result()
    with SweepProgress(2, 0, steps=4, live=True) as progress:
        progress.run_done(result)
        progress.log("[2/2] FAILED nope copy_rep seed 1: shape [batch, seq] is wrong")
    err = capsys.readouterr().err
    done = next(line for line in err.splitlines() if "[1/2]" in line)
    assert done.rstrip().endswith("exact match by length 4:1.00  (eta 0s)"), err
    assert "[2/2] FAILED nope copy_rep seed 1: shape [batch, seq] is wrong" in err.splitlines()
    assert ".py:" not in err


def test_run_counts_are_pluralised(capsys: pytest.CaptureFixture[str]) -> None:
    with SweepProgress(1, 0, steps=4, live=False):
        pass
    with SweepProgress(54, 0, steps=4, live=False):
        pass
    err = capsys.readouterr().err
    assert "1 run to do, 0 already" in err and "54 runs to do" in err


def test_step_bar_completes_for_failed_runs_and_runs_without_step_reports() -> None:
    """A run that fails mid-way, or one from an executor that reports no steps (Ray), still
    counts its steps when it ends: the steps bar reaches its total instead of stalling."""
    done, failed = _result(), RunFailure(expand(parse_sweep(SWEEP | {"seeds": [1]}))[0], "boom")
    with SweepProgress(2, 0, steps=4, live=True) as progress:
        progress.steps(failed.config.key(), 2, 0.5)  # failed at step 2 of 4
        progress.run_failed(failed)
        progress.run_done(done)  # no step report at all
        steps = progress._bar.tasks[1]
        assert steps.completed == steps.total == 8


def test_a_store_that_is_not_a_database_is_a_one_line_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / STORE_NAME).write_text("not a database\n" * 100)
    (tmp_path / "tiny.toml").write_text(TINY.format(steps=4))
    runner = CliRunner()
    for args in (
        ["lab", "export", "--out", str(out), "--csv", str(tmp_path / "r.csv")],
        ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(out), "--workers", "1"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "not a posenc result store" in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.slow
def test_ray_workers_cap_runs_instead_of_sizing_an_existing_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--workers N --address HEAD`` (or a running local cluster): Ray refuses ``num_cpus``
    when it connects to an existing cluster, so workers must limit runs in flight instead."""
    ray = pytest.importorskip("ray")
    calls: list[dict] = []
    real_init = ray.init

    def init(address: str | None = None, **kwargs: object) -> object:
        calls.append({"address": address, **kwargs})
        if address is not None and kwargs.get("num_cpus") is not None:  # as Ray does
            raise ValueError("When connecting to an existing cluster, num_cpus must not be ...")
        return real_init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    monkeypatch.setattr(ray, "init", init)
    sweep = parse_sweep(SWEEP | {"seeds": [0, 1, 2]})
    try:
        outcome = sweep_module.run_sweep(
            sweep, tmp_path, executor=RayExecutor("127.0.0.1:6379", num_cpus=1), live=False
        )
    finally:
        ray.shutdown()
    assert outcome.ran == 3 and not outcome.failed
    with sqlite3.connect(tmp_path / STORE_NAME) as conn:
        finished = [t for (t,) in conn.execute("SELECT finished_at FROM runs")]
    assert len(finished) == 3


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _sigint_as_a_shell_starts_it() -> None:
    """SIGINT at its default in the sweep, as an interactive shell starts a command: a child
    inherits an ignored SIGINT, and Python then installs no KeyboardInterrupt handler. A pytest
    process that ignores SIGINT (started in the background by a script, or so left by an
    earlier test) passed that on, and the sweep ran on through the Ctrl-C: the whole slow
    suite timed out here while the test alone passed."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c", "kill-int"])
def test_sigint_stops_a_pool_sweep_now(tmp_path: Path, group: bool) -> None:
    """SIGINT (Ctrl-C: to the whole process group; ``kill -INT``: to the sweep alone) on a
    2-worker sweep of 4 runs that take minutes: the command exits within seconds with 130 and
    a resume hint, not after the runs in flight or queued have trained for nobody."""
    config = TINY.format(steps=200_000).replace("seeds = [0, 1]", "seeds = [0, 1, 2, 3]")
    (tmp_path / "tiny.toml").write_text(config)
    out = tmp_path / "out"
    cmd = [sys.executable, "-c", "from posenc.cli import main; main()", "lab", "sweep"]
    child = subprocess.Popen(
        [*cmd, str(tmp_path / "tiny.toml"), "--out", str(out), "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        preexec_fn=_sigint_as_a_shell_starts_it,
    )
    deadline = time.monotonic() + 90
    workers: set[int] = set()
    while len(workers) < 3 and time.monotonic() < deadline:  # 2 workers + resource tracker
        time.sleep(0.2)
        workers = _children(child.pid)
    time.sleep(4)  # the workers import torch and start training
    (os.killpg if group else os.kill)(child.pid, signal.SIGINT)
    try:  # the runs take minutes: exiting within the timeout means they were not waited for
        stdout, stderr = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 130, stderr
    assert "again to resume" in stdout + stderr and "Traceback" not in stderr, stderr
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers)


def test_step_bar_counts_each_run_s_own_budget() -> None:
    """Runs with budgets of their own (``task_train``) fill the steps bar with those; a run
    the gate stopped early counts its whole budget when it ends."""
    done, other = _result(), RunFailure(expand(parse_sweep(SWEEP | {"seeds": [1]}))[0], "boom")
    budgets = {done.key: 6, other.config.key(): 3}
    with SweepProgress(2, 0, steps=4, budgets=budgets, live=True) as progress:
        progress.steps(done.key, 2, 0.5)  # the gate stopped it after 2 of its 6 steps
        progress.run_done(done)
        progress.run_failed(other)
        steps = progress._bar.tasks[1]
        assert steps.completed == steps.total == 9
