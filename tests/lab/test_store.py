"""Result store: schema, one transaction per run, idempotent adds, export round trips."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posenc.cli import app
from posenc.lab.store import COLUMNS, SCHEMA_VERSION, ResultStore
from posenc.lab.train import RunResult


def _result(key: str, enc: str = "rope", seed: int = 0) -> RunResult:
    cfg = {
        "encoding": enc,
        "seed": seed,
        "task": {"name": "copy", "train_len": [1, 8], "eval_lens": None, "n_symbols": None},
    }
    metrics = [(n, m, 0.5 + 0.01 * n) for n in (8, 16) for m in ("exact_match", "loss")]
    return RunResult(
        key, cfg, metrics, [(0, 2.5), (10, 1.0)], 1.5, 1.2, None, 40, 0.996, passed_gate=True
    )


def test_schema_wal_and_version(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        mode = store.conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
        version = store.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        assert int(version[0]) == SCHEMA_VERSION
        tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
        assert {"meta", "runs", "metrics", "curves"} <= tables


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    ResultStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(ValueError, match="schema version 99"):
        ResultStore(path)


def test_add_is_idempotent_and_rows_join_runs(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        assert store.add(_result("a"), sweep="s")
        assert not store.add(_result("a"), sweep="s")  # already stored: no duplicate
        assert store.add(_result("b", "alibi", 1), sweep="s")
        assert store.finished_keys() == {"a", "b"}
        rows = store.rows()
        assert len(rows) == 8 and set(rows[0]) == set(COLUMNS)
        assert {(r["encoding"], r["train_min"], r["train_max"]) for r in rows} == {
            ("rope", 1, 8),
            ("alibi", 1, 8),
        }
        assert [r["key"] for r in store.runs(["b"])] == ["b"]
        run = store.runs(["a"])[0]
        assert run["final_loss"] == 1.0
        assert (run["steps_trained"], run["gate_metric"], run["passed_gate"]) == (40, 0.996, 1)
        assert {(r["passed_gate"], r["gate_metric"]) for r in rows} == {(1, 0.996)}


def test_csv_export_round_trip(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add(_result("a"), sweep="s")
        n = store.export_csv(tmp_path / "r.csv")
        expected = store.rows()
    with (tmp_path / "r.csv").open() as f:
        back = list(csv.DictReader(f))
    assert n == len(back) == len(expected)
    for got, want in zip(back, expected, strict=False):
        assert {k: str(v) for k, v in want.items()} == got


def test_parquet_export_round_trip(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    with ResultStore(tmp_path / "r.sqlite") as store:
        store.add(_result("a"), sweep="s")
        store.export_parquet(tmp_path / "r.parquet")
        expected = store.rows()
    assert pq.read_table(tmp_path / "r.parquet").to_pylist() == expected


def _force_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SQLite connection opened read-only, as SQLite opens a file this user cannot
    write (root may write any file, so the test cannot chmod its way there)."""
    real = sqlite3.connect

    def connect(database: str | Path, *args: object, uri: bool = False, **kw: object) -> object:
        target = str(database) if uri else Path(database).absolute().as_uri()
        if not uri:  # the store's own read-only URIs (mode=ro, immutable=1) as they are
            target += "?mode=ro"
        return real(target, *args, uri=True, **kw)

    monkeypatch.setattr(sqlite3, "connect", connect)


@pytest.mark.parametrize("case", ["read-only-file", "read-only-dir"])
def test_export_reads_a_store_this_user_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """``posenc lab export`` opens the store read-only: it works on a database file opened
    read-only, and in a directory where SQLite cannot create the WAL's -shm/-wal files
    (directories stand in their place, as root could create any file)."""
    out = tmp_path / "out"
    with ResultStore(out / "results.sqlite") as store:
        store.add(_result("a"), sweep="s")
        expected = store.rows()
    if case == "read-only-file":
        _force_read_only(monkeypatch)
    else:
        (out / "results.sqlite-shm").mkdir()
        (out / "results.sqlite-wal").mkdir()
    result = CliRunner().invoke(
        app, ["lab", "export", "--out", str(out), "--csv", str(tmp_path / "r.csv")]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {len(expected)} rows to {tmp_path / 'r.csv'}\n"
    with ResultStore(out / "results.sqlite", readonly=True) as store:
        assert store.rows() == expected
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.conn.execute("DELETE FROM runs")


def test_read_only_open_refuses_what_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    with pytest.raises(ValueError, match="not a posenc result store"):
        ResultStore(tmp_path / "notes.txt", readonly=True)
    with sqlite3.connect(tmp_path / "other.sqlite") as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ValueError, match="not a posenc result store"):
        ResultStore(tmp_path / "other.sqlite", readonly=True)


_V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    key TEXT PRIMARY KEY, sweep TEXT NOT NULL, encoding TEXT NOT NULL, task TEXT NOT NULL,
    seed INTEGER NOT NULL, train_min INTEGER NOT NULL, train_max INTEGER NOT NULL,
    config TEXT NOT NULL, seconds REAL NOT NULL, cpu_seconds REAL NOT NULL, final_loss REAL,
    checkpoint TEXT, finished_at TEXT NOT NULL);
CREATE TABLE metrics (
    run_key TEXT NOT NULL REFERENCES runs(key), length INTEGER NOT NULL, name TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (run_key, length, name));
CREATE TABLE curves (
    run_key TEXT NOT NULL REFERENCES runs(key), step INTEGER NOT NULL, loss REAL NOT NULL,
    PRIMARY KEY (run_key, step));
INSERT INTO meta VALUES ('schema_version', '1');
"""


def _v1_store(path: Path) -> None:
    """A store as posenc's schema version 1 wrote it: a run that learned copy at its training
    length 8 (1.00), one that did not (0.50), and an lm run (no gate)."""
    with sqlite3.connect(path) as conn:
        conn.executescript(_V1_SCHEMA)
        for key, task, exact in (("good", "copy", 1.0), ("bad", "copy", 0.5), ("lm", "lm", 0.4)):
            config = json.dumps({"encoding": "rope", "train": {"steps": 600}})
            hi = 64 if task == "lm" else 8
            row = (key, "s", "rope", task, 0, 1, hi, config, 1.0, 1.0, 0.1, None, "t")
            conn.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
            name = "token_acc" if task == "lm" else "exact_match"
            conn.execute("INSERT INTO metrics VALUES (?,?,?,?)", (key, hi, name, exact))
            conn.execute("INSERT INTO metrics VALUES (?,?,?,?)", (key, 2 * hi, name, 0.0))


V1_GATES = {"good": (600, 1.0, 1), "bad": (600, 0.5, 0), "lm": (600, 0.4, 1)}


def test_a_version_1_store_is_migrated_when_opened_for_writing(tmp_path: Path) -> None:
    _v1_store(tmp_path / "r.sqlite")
    with ResultStore(tmp_path / "r.sqlite") as store:
        gates = {
            r["key"]: (r["steps_trained"], r["gate_metric"], r["passed_gate"]) for r in store.runs()
        }
        assert gates == V1_GATES
        assert {(r["run_key"], r["passed_gate"]) for r in store.rows()} == {
            ("good", 1),
            ("bad", 0),
            ("lm", 1),
        }
        assert store.add(_result("new"), sweep="s")  # and takes version-2 runs
        assert store.runs(["new"])[0]["passed_gate"] == 1
    with sqlite3.connect(tmp_path / "r.sqlite") as conn:
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            str(SCHEMA_VERSION),
        )
    with ResultStore(tmp_path / "r.sqlite") as store:  # opened again: nothing to migrate
        assert len(store.runs()) == 4


def test_a_version_1_store_reads_with_gates_when_read_only(tmp_path: Path) -> None:
    _v1_store(tmp_path / "r.sqlite")
    with ResultStore(tmp_path / "r.sqlite", readonly=True) as store:
        gates = {
            r["key"]: (r["steps_trained"], r["gate_metric"], r["passed_gate"]) for r in store.runs()
        }
        assert gates == V1_GATES
        assert {r["run_key"]: r["gate_metric"] for r in store.rows()} == {
            k: g[1] for k, g in V1_GATES.items()
        }
    with sqlite3.connect(tmp_path / "r.sqlite") as conn:  # left as it was
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
            "1",
        )
