"""SQLite result store: one transaction per finished run, WAL mode, versioned schema.

A run is written whole (its row, metrics and loss curve) in one transaction, so a sweep killed
at any moment leaves only complete runs; ``finished_keys()`` is what a resumed sweep skips.
Metrics are long rows (run, length, name, value): exact_match, token_acc, loss per length.
"""

from __future__ import annotations

import csv
import json
import math
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .config import TaskConfig, run_label
from .train import RunResult

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY, sweep TEXT NOT NULL, encoding TEXT NOT NULL, task TEXT NOT NULL,
    seed INTEGER NOT NULL, train_min INTEGER NOT NULL, train_max INTEGER NOT NULL,
    config TEXT NOT NULL, seconds REAL NOT NULL, cpu_seconds REAL NOT NULL, final_loss REAL,
    checkpoint TEXT, finished_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS metrics (
    run_key TEXT NOT NULL REFERENCES runs(key), length INTEGER NOT NULL, name TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (run_key, length, name));
CREATE TABLE IF NOT EXISTS curves (
    run_key TEXT NOT NULL REFERENCES runs(key), step INTEGER NOT NULL, loss REAL NOT NULL,
    PRIMARY KEY (run_key, step));
"""
#: Columns of ``rows()`` and of the CSV/Parquet export, in order.
COLUMNS = (
    "run_key",
    "encoding",
    "task",
    "seed",
    "train_min",
    "train_max",
    "length",
    "metric",
    "value",
)


class ResultStore:
    """``ResultStore(path)`` opens or creates the database; use as a context manager.
    ``readonly=True`` opens an existing store for reading only (export, a store this user
    cannot write) and creates nothing.

    Raises: ValueError if the file is not a result store or holds another schema version.
    """

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly:
            self.conn = self._connect_readonly()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(self.path, timeout=30)
        try:
            self._open(readonly)
        except BaseException:
            self.conn.close()
            raise

    def _connect_readonly(self) -> sqlite3.Connection:
        uri = self.path.absolute().as_uri()
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30)
        try:
            conn.execute("PRAGMA schema_version")  # reading a WAL store opens its -shm file
        except sqlite3.OperationalError:  # none there and none can be made (a read-only dir)
            conn.close()
            return sqlite3.connect(f"{uri}?immutable=1", uri=True)  # reads the file as it is
        except sqlite3.DatabaseError:  # "file is not a database": _open says so
            pass
        return conn

    def _open(self, readonly: bool) -> None:
        try:  # the first read: "file is not a database", or (read-only) no meta table
            if readonly:
                self.conn.execute("SELECT count(*) FROM meta")
            else:
                self.conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as err:
            raise ValueError(f"{self.path}: not a posenc result store (SQLite: {err})") from err
        if not readonly:
            self.conn.execute("PRAGMA synchronous=NORMAL")
            with self.conn:
                self.conn.executescript(_SCHEMA)
                self.conn.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
        found = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if int(found[0]) != SCHEMA_VERSION:
            raise ValueError(
                f"{self.path}: result store schema version {found[0]}, this posenc reads "
                f"version {SCHEMA_VERSION}; export it with the posenc that wrote it"
            )

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def finished_keys(self) -> set[str]:
        return {k for (k,) in self.conn.execute("SELECT key FROM runs")}

    def add(self, result: RunResult, *, sweep: str) -> bool:
        """Write a finished run in one transaction; False (and no change) if already stored.

        Raises: ValueError (nothing written) if a metric or the loss curve holds a NaN.
        """
        cfg = result.config
        nan = [f"{name} at length {n}" for n, name, v in result.metrics if math.isnan(v)]
        nan += ["training loss"] if any(math.isnan(v) for _, v in result.loss_curve) else []
        if nan:  # SQLite keeps NaN as NULL, which the schema refuses mid-transaction
            raise ValueError(f"NaN {', '.join(nan[:3])} (diverged?); run not stored")
        lo, hi = TaskConfig(**cfg["task"]).build().train_len  # the task's defaults resolved
        final = result.loss_curve[-1][1] if result.loss_curve else None
        with self.conn:  # one transaction: all of the run or none of it
            cur = self.conn.execute(
                "INSERT OR IGNORE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    result.key,
                    sweep,
                    run_label(cfg["encoding"], cfg["task"]["name"], cfg.get("pe_config", {})),
                    cfg["task"]["name"],
                    cfg["seed"],
                    lo,
                    hi,
                    json.dumps(cfg, sort_keys=True),
                    result.seconds,
                    result.cpu_seconds,
                    final,
                    result.checkpoint,
                    time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                ),
            )
            if cur.rowcount == 0:
                return False
            self.conn.executemany(
                "INSERT INTO metrics VALUES (?,?,?,?)",
                [(result.key, n, name, v) for n, name, v in result.metrics],
            )
            self.conn.executemany(
                "INSERT INTO curves VALUES (?,?,?)",
                [(result.key, s, v) for s, v in result.loss_curve],
            )
        return True

    def runs(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Run rows (config parsed back to a dict), optionally only ``keys``."""
        wanted = None if keys is None else set(keys)
        cur = self.conn.execute("SELECT * FROM runs ORDER BY encoding, task, seed, train_max")
        names = [d[0] for d in cur.description]
        rows = (dict(zip(names, r, strict=True)) for r in cur)
        return [
            r | {"config": json.loads(r["config"])}
            for r in rows
            if wanted is None or r["key"] in wanted
        ]

    def rows(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Long metric rows with their run's encoding, task, seed and training lengths."""
        cur = self.conn.execute(
            "SELECT m.run_key, r.encoding, r.task, r.seed, r.train_min, r.train_max, m.length, "
            "m.name, m.value FROM metrics m JOIN runs r ON r.key = m.run_key "
            "ORDER BY r.encoding, r.task, r.seed, r.train_max, m.length, m.name"
        )
        wanted = None if keys is None else set(keys)
        return [dict(zip(COLUMNS, r, strict=True)) for r in cur if wanted is None or r[0] in wanted]

    def export_csv(self, path: str | Path) -> int:
        """Write ``rows()`` as CSV; returns the number of rows."""
        rows = self.rows()
        with Path(path).open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        return len(rows)

    def export_parquet(self, path: str | Path) -> int:
        """Write ``rows()`` as Parquet (needs ``pip install posenc[parquet]``)."""
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(
                "Parquet export needs pyarrow: pip install 'posenc[parquet]'"
            ) from None
        ints = ("seed", "train_min", "train_max", "length")
        types = {c: pa.int64() if c in ints else pa.string() for c in COLUMNS}
        schema = pa.schema(list((types | {"value": pa.float64()}).items()))
        rows = self.rows()
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), str(path))
        return len(rows)
