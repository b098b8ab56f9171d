"""The lab's result store under faults: its folder removed mid-sweep, a full disk, a damaged or
foreign SQLite file. Each stops with one ``error:`` line, never loses a result silently and
never touches what is stored."""

from __future__ import annotations

import errno
import shutil
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc.cli import app
from posenc.lab import executors as executors_module
from posenc.lab.config import RunConfig, parse_sweep
from posenc.lab.executors import RunFailure
from posenc.lab.store import ResultStore
from posenc.lab.sweep import LOCK_NAME, STORE_NAME, run_sweep
from posenc.lab.train import RunResult

SWEEP = {
    "name": "tiny",
    "encodings": ["nope"],
    "tasks": [{"name": "copy_rep", "train_len": [1, 4]}],
    "seeds": [0, 1, 2, 3],
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
    "train": {"steps": 4, "batch_size": 8, "warmup": 2, "eval_samples": 8},
}
TOML = """
name = "tiny"
encodings = ["nope"]
tasks = [{name = "copy_rep", train_len = [1, 4]}]
seeds = [0, 1, 2, 3]
[model]
d_model = 16
n_layers = 1
n_heads = 2
[train]
steps = 4
batch_size = 8
warmup = 2
eval_samples = 8
"""


def _result(run: RunConfig) -> RunResult:
    curve = [(s, 1.0) for s in range(0, 4000, 10)]  # a few pages of the store per run
    return RunResult(run.key(), asdict(run), [(4, "exact_match", 1.0)], curve, 0.1, 0.1)


class Scripted:
    """An executor that returns made-up results at once, and calls ``between(i)`` after the
    i-th one was handed over (and so stored)."""

    def __init__(self, between: object = None, fail: dict[int, BaseException] | None = None):
        self.between, self.fail, self.handed = between, fail or {}, 0

    def map(self, runs: Sequence[RunConfig], checkpoint_dir: Path | None) -> Iterator[object]:
        for i, run in enumerate(runs):
            err = self.fail.get(i)
            yield _result(run) if err is None else RunFailure.of(run, err)
            self.handed += 1
            if callable(self.between):
                self.between(i)


def _stored(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])


def _sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ex: Scripted, *extra: str):
    monkeypatch.setattr(executors_module, "make_executor", lambda *a, **k: ex)
    (tmp_path / "tiny.toml").write_text(TOML)
    args = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "out"), *extra]
    return CliRunner().invoke(app, args)


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    assert "Traceback" not in output, output
    return lines[0]


# 1. the output folder removed during a sweep


def test_a_folder_removed_mid_sweep_stops_it_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"

    def remove(i: int) -> None:
        if i == 1:  # two runs stored, then `rm -rf out`
            shutil.rmtree(out)

    ex = Scripted(remove)
    result = _sweep(tmp_path, monkeypatch, ex)
    assert result.exit_code == 1, result.output
    line = _one_error_line(result.output)
    assert "removed" in line and STORE_NAME in line, line
    assert ex.handed == 2, "nothing after the removal is taken from the executor"
    assert not (out / STORE_NAME).exists() or _stored(out / STORE_NAME) == 0


def test_a_replaced_store_stops_the_sweep_without_writing_to_either(tmp_path: Path) -> None:
    out = tmp_path / "out"

    other = tmp_path / "other.sqlite"
    ResultStore(other).close()
    theirs = other.read_bytes()

    def replace(i: int) -> None:
        if i == 0:
            other.replace(out / STORE_NAME)

    ex = Scripted(replace)
    with pytest.raises(OSError, match="replaced"):
        run_sweep(parse_sweep(SWEEP), out, executor=ex, live=False)
    assert ex.handed == 1
    assert (out / STORE_NAME).read_bytes() == theirs


def test_a_replaced_lock_file_stops_the_sweep(tmp_path: Path) -> None:
    """The lock file recreated (by anyone) no longer locks the folder: stop."""
    out = tmp_path / "out"

    def relock(i: int) -> None:
        if i == 0:
            (out / LOCK_NAME).unlink()
            (out / LOCK_NAME).touch()

    with pytest.raises(OSError, match="lock"):
        run_sweep(parse_sweep(SWEEP), out, executor=Scripted(relock), live=False)
    assert _stored(out / STORE_NAME) == 1


# 3. SQLite and OS errors as one line, the first failed write stops the sweep


def test_a_full_disk_while_storing_is_one_line_and_keeps_what_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's "database or disk is full" on the third run's transaction (injected where
    the store executes its INSERT): exit 1, one line naming the file and the cause, the two
    runs stored before it intact, nothing taken after it."""
    real = ResultStore.add
    calls = {"n": 0}

    def add(self: ResultStore, result: RunResult, *, sweep: str) -> bool:
        calls["n"] += 1
        if calls["n"] == 3:  # the file may not grow: SQLite's SQLITE_FULL, as on a full disk
            pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
            self.conn.execute(f"PRAGMA max_page_count = {pages}")
        return real(self, result, sweep=sweep)

    monkeypatch.setattr(ResultStore, "add", add)
    ex = Scripted()
    result = _sweep(tmp_path, monkeypatch, ex)
    assert result.exit_code == 1, result.output
    line = _one_error_line(result.output)
    assert STORE_NAME in line and "database or disk is full" in line, line
    assert ex.handed == 2
    assert _stored(tmp_path / "out" / STORE_NAME) == 2


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_run_that_cannot_write_its_checkpoint_stops_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Every later run would fail the same way: stop at the first, say why in one line."""
    err = OSError(code, "refused", str(tmp_path / "out" / "checkpoints" / "k.pt"))
    ex = Scripted(fail={1: err})
    result = _sweep(tmp_path, monkeypatch, ex)
    assert result.exit_code == 1, result.output
    line = _one_error_line(result.output)
    assert "k.pt" in line and "refused" in line, line
    assert ex.handed == 1, "the sweep stopped at the failed write"
    assert _stored(tmp_path / "out" / STORE_NAME) == 1


def test_a_damaged_store_is_refused_before_any_run(tmp_path: Path) -> None:
    """A store whose inner pages are damaged: refused on opening (exit 2), nothing trained."""
    out = tmp_path / "out"
    run_sweep(parse_sweep(SWEEP), out, executor=Scripted(), live=False)
    path = out / STORE_NAME
    with sqlite3.connect(path) as conn:  # fold the WAL in: every page in the main file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert pages >= 3
    data = bytearray(path.read_bytes())
    for offset in range(page * 2, page * 3):  # the third page: a table's, past the header
        data[offset] = 0xA5
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    ex = Scripted()
    runner = CliRunner()
    toml = tmp_path / "more.toml"
    toml.write_text(TOML.replace("seeds = [0, 1, 2, 3]", "seeds = [4, 5]"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(executors_module, "make_executor", lambda *a, **k: ex)
        result = runner.invoke(app, ["lab", "sweep", str(toml), "--out", str(out)])
    assert result.exit_code == 2, result.output
    line = _one_error_line(result.output)
    assert "not a posenc result store" in line and str(path) in line, line
    assert ex.handed == 0
    assert path.read_bytes() == before


def test_an_unwritable_out_under_sys_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "tiny.toml").write_text(TOML)
    for out in ("/sys/kernel", "/proc/x"):
        if not Path(out).parent.exists():
            continue
        args = ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", out, "--workers", "1"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (out, result.output)
        assert out in _one_error_line(result.output)


# 4. a foreign SQLite file is not adopted


def _foreign(path: Path, script: str) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');", "users"),
        ("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);", "no schema_version"),
        (
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO meta VALUES ('schema_version', 'abc');",
            "'abc', not an integer",
        ),
    ],
    ids=["other-app", "no-version", "version-abc"],
)
def test_a_foreign_sqlite_file_is_refused_and_left_alone(
    tmp_path: Path, script: str, said: str
) -> None:
    path = tmp_path / "out" / STORE_NAME
    before = _foreign(path, script)
    (tmp_path / "tiny.toml").write_text(TOML)
    runner = CliRunner()
    for args in (
        ["lab", "sweep", str(tmp_path / "tiny.toml"), "--out", str(tmp_path / "out")],
        ["lab", "export", "--out", str(tmp_path / "out"), "--csv", str(tmp_path / "r.csv")],
        ["lab", "table", "--out", str(tmp_path / "out")],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        line = _one_error_line(result.output)
        assert "not a posenc result store" in line and said in line, line
    assert path.read_bytes() == before
    with sqlite3.connect(path) as conn:
        tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "runs" not in tables


@pytest.mark.slow
def test_rm_rf_of_the_output_folder_mid_sweep_exits_1(tmp_path: Path) -> None:
    """The probe's case end to end: ``posenc lab sweep --out s8 &``, two runs stored, ``rm -rf
    s8``: the sweep stops with exit 1 and one line, not "(10 runs, 0 reused)" and exit 0."""
    import os
    import subprocess
    import sys
    import time

    config = tmp_path / "tiny.toml"
    config.write_text(
        TOML.replace("seeds = [0, 1, 2, 3]", "seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]")
        .replace("steps = 4", "steps = 150")
        .replace("[train]", "[train]\ngate = 0")
    )
    out = tmp_path / "s8"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "posenc", "lab", "sweep", str(config), "--out", str(out)]
    proc = subprocess.Popen(
        [*args, "--workers", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _stored(out / STORE_NAME) >= 2:
                break
        except sqlite3.Error:
            pass
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    shutil.rmtree(out)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, (stdout, stderr)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "removed" in errors[0], stderr
    assert "Traceback" not in stderr and "reused" not in stdout


def test_the_extension_store_stops_when_its_file_is_removed_or_foreign(tmp_path: Path) -> None:
    from posenc.lab.presets import extend_preset
    from posenc.lab.store import ExtendStore, UnitResult

    cfg = extend_preset("quick")
    path = tmp_path / "extend.sqlite"
    unit = UnitResult("u", [], {}, 0.1, 0.1)
    with ExtendStore(path, cfg) as store:
        store.add_unit(unit)
        path.unlink()
        with pytest.raises(OSError, match="was removed while it was open"):
            store.add_unit(unit._replace(name="v"))
    before = _foreign(tmp_path / "other" / "extend.sqlite", "CREATE TABLE users (id INTEGER);")
    with pytest.raises(ValueError, match="users"):
        ExtendStore(tmp_path / "other" / "extend.sqlite", cfg)
    assert (tmp_path / "other" / "extend.sqlite").read_bytes() == before
