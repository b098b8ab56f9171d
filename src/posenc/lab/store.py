"""SQLite result store: one transaction per finished run, WAL mode, versioned schema.

A run is written whole (its row, metrics and loss curve) in one transaction, so a sweep killed
at any moment leaves only complete runs; ``finished_keys()`` is what a resumed sweep skips.
Metrics are long rows (run, length, name, value): exact_match, token_acc, loss per length.
Each run also keeps its competence gate (``passed_gate`` 0/1, ``gate_metric``, the held-out
score at the training lengths, and ``steps_trained``): a run that did not pass never learned
its task, and comparisons of extrapolation leave it out.

Schema version 2 added the gate's columns. A version-1 store is migrated when opened for
writing, and read as if migrated when opened read-only: its runs get ``steps_trained`` = the
configured steps, ``gate_metric`` = the evaluation's exact match at the longest training length
(token accuracy for ``lm``) and ``passed_gate`` = that metric >= 0.99 (``lm``: 1). Schema
version 3 added the extend suite's tables (below); a version-2 store opened for writing gains
them (empty), one opened read-only reads as having no units.

The extend suite (``posenc lab extend``) keeps its results in the same store, in a file of its
own (``OUT/extend.sqlite``, beside a sweep's ``results.sqlite``), through ``ExtendStore``:
``units`` holds each finished unit of work (its name, extra outputs as JSON, wall and CPU
seconds), ``measures`` its numbers, one per row (seed, encoding, method, variant
``free``/``tuned``, factor, context length, metric, bucket start..stop or passkey depth,
value), and ``meta`` the configuration and its digest (``extend_config``, ``extend_digest``)
and the last invocation's time (``last_run``). A unit and its numbers are written in one
transaction, so a run killed at any moment keeps every finished unit and nothing of the
others; running it again does only what is missing. Such a store holds one configuration:
opening it with another raises, as does opening a store of lab sweep runs. (Stores of the
retired ``posenc.extlab``, in a schema of their own, are moved into this one by
``benchmarks/migrate_extend_store.py``.)

Only posenc's own stores are opened: a SQLite file holding other tables (another
application's), a ``meta`` table without a version or a version that is not an integer is
refused (ValueError) and left as it is. A store opened for writing is checked whole first
(``PRAGMA quick_check``), so a damaged one is refused before any run is trained. Every write
first checks that the file is still the one opened (same device and inode): a store removed or
replaced during a sweep stops it (``StoreError``) instead of writing into a deleted file. A
write SQLite or the OS refuses (disk full, read-only, damaged) raises ``StoreError`` naming the
file and the cause; its transaction is rolled back, so what was stored stays as it was.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from .._files import atomic_open
from .config import ExtendConfig, TaskConfig, stored_label
from .train import RunResult

SCHEMA_VERSION = 3
#: The gate a version-1 store's runs are judged by (they were trained without one).
V1_GATE = 0.99
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY, sweep TEXT NOT NULL, encoding TEXT NOT NULL, task TEXT NOT NULL,
    seed INTEGER NOT NULL, train_min INTEGER NOT NULL, train_max INTEGER NOT NULL,
    config TEXT NOT NULL, seconds REAL NOT NULL, cpu_seconds REAL NOT NULL, final_loss REAL,
    checkpoint TEXT, finished_at TEXT NOT NULL, steps_trained INTEGER, gate_metric REAL,
    passed_gate INTEGER);
CREATE TABLE IF NOT EXISTS metrics (
    run_key TEXT NOT NULL REFERENCES runs(key), length INTEGER NOT NULL, name TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (run_key, length, name));
CREATE TABLE IF NOT EXISTS curves (
    run_key TEXT NOT NULL REFERENCES runs(key), step INTEGER NOT NULL, loss REAL NOT NULL,
    PRIMARY KEY (run_key, step));
CREATE TABLE IF NOT EXISTS units (
    name TEXT PRIMARY KEY, info TEXT NOT NULL, seconds REAL NOT NULL, cpu_seconds REAL NOT NULL);
CREATE TABLE IF NOT EXISTS measures (
    unit TEXT NOT NULL REFERENCES units(name), seed INTEGER NOT NULL, encoding TEXT NOT NULL,
    method TEXT NOT NULL, variant TEXT NOT NULL, factor INTEGER NOT NULL, length INTEGER NOT NULL,
    metric TEXT NOT NULL, start INTEGER, stop INTEGER, depth REAL, value REAL NOT NULL);
CREATE INDEX IF NOT EXISTS measures_by_unit ON measures (unit);
"""
#: The tables of a result store (``meta`` may hold other keys: the environments, an extend
#: suite's configuration); ``units`` and ``measures`` hold the extend suite's units of work.
TABLES = frozenset({"meta", "runs", "metrics", "curves", "units", "measures"})
#: Tables added by schema version 3 (empty in a store of lab sweeps).
UNIT_TABLES = frozenset({"units", "measures"})
#: The gate's columns of ``runs`` (added by schema version 2).
GATE_COLUMNS = ("steps_trained", "gate_metric", "passed_gate")
#: Columns of ``rows()`` and of the CSV/Parquet export, in order.
COLUMNS = (
    "run_key",
    "encoding",
    "task",
    "seed",
    "train_min",
    "train_max",
    "passed_gate",
    "gate_metric",
    "length",
    "metric",
    "value",
)


#: Columns of the ``runs`` table, in order.
RUN_COLUMNS = (
    "key",
    "sweep",
    "encoding",
    "task",
    "seed",
    "train_min",
    "train_max",
    "config",
    "seconds",
    "cpu_seconds",
    "final_loss",
    "checkpoint",
    "finished_at",
    *GATE_COLUMNS,
)


class StoreError(OSError):
    """A result store that could not be written at run time: removed or replaced while open,
    or a write that SQLite or the OS refused (the message names the file and the cause).
    Nothing of the failed write is kept (its transaction is rolled back)."""


class ResultStore:
    """``ResultStore(path)`` opens or creates the database; use as a context manager.
    ``readonly=True`` opens an existing store for reading only (export, a store this user
    cannot write) and creates nothing.

    Raises: ValueError if the file is not a result store (another application's SQLite file, a
    damaged one, a version that is missing or not an integer) or holds another schema version;
    StoreError when the store cannot be created (a folder that cannot be written).
    """

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        if readonly:
            self.conn = self._connect_readonly()
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.conn = sqlite3.connect(self.path, timeout=30)
            except (OSError, sqlite3.Error) as err:
                raise StoreError(f"{self.path}: cannot create the result store: {err}") from err
        try:
            self._open(readonly)
            self._identity = file_identity(self.path)
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
        not_store = f"{self.path}: not a posenc result store"
        try:  # the first read: "file is not a database", or (read-only) no meta table
            tables = {
                name
                for (name,) in self.conn.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
                )
            }
            if not readonly:
                damage = self.conn.execute("PRAGMA quick_check").fetchall()
                if damage != [("ok",)]:
                    found = "; ".join(str(r[0]) for r in damage[:3])
                    raise ValueError(f"{not_store}: a damaged SQLite file ({found})")
        except sqlite3.DatabaseError as err:
            raise ValueError(f"{not_store} (SQLite: {err})") from err
        foreign = sorted(tables - TABLES)
        if foreign:  # another application's database: adopting it would mix two schemas
            raise ValueError(
                f"{not_store}: it holds the tables {', '.join(foreign)} of another application; "
                "give --out a folder of its own"
            )
        if (tables or readonly) and "meta" not in tables:
            raise ValueError(f"{not_store}: it has no meta table (tables {sorted(tables)})")
        version = self._version(not_store) if tables else SCHEMA_VERSION  # before any write
        if not readonly:
            try:
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")
                # one transaction: a kill leaves no store, or one with its version
                self.conn.executescript(
                    f"BEGIN; {_SCHEMA} INSERT OR IGNORE INTO meta VALUES ('schema_version', "
                    f"'{SCHEMA_VERSION}'); COMMIT;"
                    if not tables
                    else _SCHEMA
                )
            except sqlite3.Error as err:
                raise StoreError(f"{self.path}: cannot write the result store: {err}") from err
        #: version-1 runs' gate columns, derived (a read-only store cannot be migrated)
        self._derived: dict[str, tuple[int, float | None, int]] | None = None
        #: whether the file has the extend suite's tables (a read-only version 1 or 2 has not)
        self._has_units = not readonly or UNIT_TABLES <= tables
        if version == 1 and readonly:
            self._derived = _v1_gate_columns(self.conn)
        elif version == 1:
            self._migrate_v1()
        elif version == 2 and not readonly:
            with self.conn:  # its new tables were made above: only the version changes
                self.conn.execute(
                    "UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),)
                )

    def _version(self, not_store: str) -> int:
        """The stored schema version. Raises ValueError when it is missing, not an integer,
        or one this posenc does not read."""
        found = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if found is None:
            raise ValueError(f"{not_store}: its meta table has no schema_version")
        try:
            version = int(found[0])
        except (TypeError, ValueError):
            raise ValueError(
                f"{not_store}: its schema_version is {found[0]!r}, not an integer"
            ) from None
        if version not in (1, 2, SCHEMA_VERSION):
            raise ValueError(
                f"{self.path}: result store schema version {found[0]}, this posenc reads "
                f"versions 1 to {SCHEMA_VERSION}; export it with the posenc that wrote it"
            )
        return version

    def _migrate_v1(self) -> None:
        """Add the gate's columns to a version-1 store and fill them (module docstring)."""
        with self.conn:  # one transaction: migrated whole or not at all
            have = {r[1] for r in self.conn.execute("PRAGMA table_info(runs)")}
            for name, kind in zip(GATE_COLUMNS, ("INTEGER", "REAL", "INTEGER"), strict=True):
                if name not in have:
                    self.conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
            self.conn.executemany(
                "UPDATE runs SET steps_trained=?, gate_metric=?, passed_gate=? WHERE key=?",
                [(*cols, key) for key, cols in _v1_gate_columns(self.conn).items()],
            )
            self.conn.execute(
                "UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),)
            )

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def check_intact(self) -> None:
        """Raise StoreError unless ``path`` is still the file this store opened (not removed,
        not replaced by another file): a write now would go to a deleted file, and be lost."""
        check_same_file(self.path, self._identity)

    def _writing(self, what: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return guarded_write(self.conn, self.path, self._identity, what)

    def set_meta(self, key: str, value: str) -> None:
        """Set ``meta[key] = value`` (one transaction)."""
        with self._writing(f"meta {key!r}") as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def meta(self) -> dict[str, str]:
        """Every ``meta`` entry (the schema version, environments, a suite's configuration)."""
        return dict(self.conn.execute("SELECT key, value FROM meta").fetchall())

    def finished_units(self) -> set[str]:
        """Names of the extend suite's finished units."""
        if not self._has_units:
            return set()
        return {name for (name,) in self.conn.execute("SELECT name FROM units")}

    def add_unit(self, unit: UnitResult) -> None:
        """Store a finished unit of the extend suite and its measures, in one transaction
        (replacing an earlier copy of it)."""
        with self._writing(f"unit {unit.name!r}") as conn:
            conn.execute("DELETE FROM measures WHERE unit = ?", (unit.name,))
            conn.execute(
                "INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?)",
                (unit.name, json.dumps(unit.info), unit.seconds, unit.cpu_seconds),
            )
            conn.executemany(
                "INSERT INTO measures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(unit.name, *r[:7], r.start, r.stop, r.depth, r.value) for r in unit.rows],
            )

    def unit_info(self, name: str) -> dict[str, Any]:
        """The extra outputs of finished unit ``name``. Raises: KeyError if not finished."""
        found = None
        if self._has_units:
            found = self.conn.execute("SELECT info FROM units WHERE name = ?", (name,)).fetchone()
        if found is None:
            raise KeyError(name)
        return dict(json.loads(found[0]))

    def units(self) -> list[dict[str, Any]]:
        """Every finished unit: name, info, seconds, cpu_seconds (by name)."""
        if not self._has_units:
            return []
        cur = self.conn.execute("SELECT name, info, seconds, cpu_seconds FROM units ORDER BY name")
        return [
            {"name": n, "info": json.loads(i), "seconds": s, "cpu_seconds": c} for n, i, s, c in cur
        ]

    def measures(self) -> list[ExtendRow]:
        """Every number the extend suite's units stored, in the order they were stored."""
        if not self._has_units:
            return []
        cur = self.conn.execute(
            "SELECT seed, encoding, method, variant, factor, length, metric, value, start, stop,"
            " depth FROM measures ORDER BY rowid"
        )
        return [ExtendRow(*r) for r in cur]

    def finished_keys(self) -> set[str]:
        try:
            return {k for (k,) in self.conn.execute("SELECT key FROM runs")}
        except sqlite3.Error as err:
            raise StoreError(f"{self.path}: cannot read the stored runs: {err}") from err

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
        gate = None if math.isnan(result.gate_metric) else result.gate_metric
        with self._writing(f"run {result.key}") as conn:  # all of the run or none of it
            cur = conn.execute(
                f"INSERT OR IGNORE INTO runs ({', '.join(RUN_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
                (
                    result.key,
                    sweep,
                    stored_label(cfg),
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
                    result.steps_trained,
                    gate,
                    int(result.passed_gate),
                ),
            )
            if cur.rowcount == 0:
                return False
            conn.executemany(
                "INSERT INTO metrics VALUES (?,?,?,?)",
                [(result.key, n, name, v) for n, name, v in result.metrics],
            )
            conn.executemany(
                "INSERT INTO curves VALUES (?,?,?)",
                [(result.key, s, v) for s, v in result.loss_curve],
            )
        return True

    def runs(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Run rows (config parsed back to a dict), optionally only ``keys``; each with
        ``passed_gate`` (0/1), ``gate_metric`` and ``steps_trained``."""
        wanted = None if keys is None else set(keys)
        columns = [c for c in RUN_COLUMNS if self._derived is None or c not in GATE_COLUMNS]
        cur = self.conn.execute(
            f"SELECT {', '.join(columns)} FROM runs ORDER BY encoding, task, seed, train_max"
        )
        rows = (dict(zip(columns, r, strict=True)) for r in cur)
        return [
            r | self._gate(r["key"]) | {"config": json.loads(r["config"])}
            for r in rows
            if wanted is None or r["key"] in wanted
        ]

    def _gate(self, key: str) -> dict[str, Any]:
        """A version-1 run's derived gate columns (read-only store); {} when stored."""
        if self._derived is None:
            return {}
        return dict(zip(GATE_COLUMNS, self._derived[key], strict=True))

    def rows(self, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Long metric rows with their run's encoding, task, seed, training lengths and gate."""
        gate = "NULL, NULL" if self._derived is not None else "r.passed_gate, r.gate_metric"
        cur = self.conn.execute(
            f"SELECT m.run_key, r.encoding, r.task, r.seed, r.train_min, r.train_max, {gate}, "
            "m.length, m.name, m.value FROM metrics m JOIN runs r ON r.key = m.run_key "
            "ORDER BY r.encoding, r.task, r.seed, r.train_max, m.length, m.name"
        )
        wanted = None if keys is None else set(keys)
        rows = [dict(zip(COLUMNS, r, strict=True)) for r in cur if wanted is None or r[0] in wanted]
        for row in rows if self._derived is not None else ():
            derived = self._gate(row["run_key"])
            row["passed_gate"], row["gate_metric"] = derived["passed_gate"], derived["gate_metric"]
        return rows

    def export_csv(self, path: str | Path) -> int:
        """Write ``rows()`` as CSV; returns the number of rows."""
        rows = self.rows()
        with atomic_open(path, "w", newline="") as f:
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
        ints = ("seed", "train_min", "train_max", "passed_gate", "length")
        types = {c: pa.int64() if c in ints else pa.string() for c in COLUMNS}
        schema = pa.schema(
            list((types | {"gate_metric": pa.float64(), "value": pa.float64()}).items())
        )
        rows = self.rows()
        with atomic_open(path, "wb") as f:
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), f)
        return len(rows)


def check_same_file(path: Path, identity: tuple[int, int]) -> None:
    """Raise StoreError unless ``path`` is the file of ``identity`` (``file_identity``)."""
    try:
        now = file_identity(path)
    except FileNotFoundError:
        raise StoreError(
            f"{path} was removed while it was open for writing; stopped (what was stored in "
            "it since it was opened is gone with it)"
        ) from None
    if now != identity:
        raise StoreError(
            f"{path} was replaced by another file while it was open for writing; stopped "
            "without writing to either"
        )


@contextlib.contextmanager
def guarded_write(
    conn: sqlite3.Connection, path: Path, identity: tuple[int, int], what: str
) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``conn``, the database at ``path``, once it is checked to be
    the file opened (``check_same_file``); SQLite's and the OS's refusals (disk full,
    read-only, damaged) as a StoreError naming the file and ``what`` (rolled back)."""
    check_same_file(path, identity)
    try:
        with conn:
            yield conn
    except (sqlite3.Error, OSError) as err:
        if isinstance(err, StoreError):
            raise
        raise StoreError(f"{path}: cannot write {what}: {err}") from err


def file_identity(path: Path) -> tuple[int, int]:
    """(device, inode) of ``path``: which file it is, whatever its name."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _v1_gate_columns(conn: sqlite3.Connection) -> dict[str, tuple[int, float | None, int]]:
    """(steps_trained, gate_metric, passed_gate) of each run of a version-1 store: its
    configured steps, the evaluation's exact match at its longest training length (token
    accuracy for ``lm``, which has no gate and passes) and whether that reaches ``V1_GATE``."""
    metric = {(key, n, name): v for key, n, name, v in conn.execute("SELECT * FROM metrics")}
    out = {}
    for key, task, train_max, config in conn.execute(
        "SELECT key, task, train_max, config FROM runs"
    ):
        lm = task == "lm"
        value = metric.get((key, train_max, "token_acc" if lm else "exact_match"))
        passed = lm or (value is not None and value >= V1_GATE)
        out[key] = (json.loads(config).get("train", {}).get("steps"), value, int(passed))
    return out


# --- the extend suite's store, ``OUT/extend.sqlite`` ---------------------------------------------

EXTEND_STORE_NAME = "extend.sqlite"
#: ``meta`` keys of an extend suite's store: its configuration and that configuration's digest.
EXTEND_CONFIG, EXTEND_DIGEST = "extend_config", "extend_digest"


class ExtendRow(NamedTuple):
    """One number of the extend suite (a row of ``measures``; see the module doc)."""

    seed: int
    encoding: str
    method: str
    variant: str
    factor: int
    length: int
    metric: str
    value: float
    start: int | None = None
    stop: int | None = None
    depth: float | None = None


class UnitResult(NamedTuple):
    """What a finished unit hands to the store (plain data: it crosses processes)."""

    name: str
    rows: list[ExtendRow]
    info: dict[str, Any]
    seconds: float
    cpu_seconds: float


class ExtendStore(ResultStore):
    """The lab's result store holding the units of one extend-suite configuration ``cfg``
    (``OUT/extend.sqlite``): the first open records ``cfg`` in ``meta``, a later open with
    another configuration is refused.

    Raises: ValueError as ``ResultStore`` (not a posenc result store), when the store holds
    another configuration, or lab sweep runs; StoreError as ``ResultStore``.
    """

    def __init__(self, path: str | Path, cfg: ExtendConfig) -> None:
        super().__init__(path)
        try:
            self._claim(cfg)
        except BaseException:
            self.close()
            raise

    def _claim(self, cfg: ExtendConfig) -> None:
        meta = self.meta()
        if EXTEND_DIGEST not in meta:
            (runs,) = self.conn.execute("SELECT count(*) FROM runs").fetchone()
            if runs:
                raise ValueError(
                    f"{self.path} holds {runs} lab sweep runs; the extend suite needs a store "
                    "of its own (use another --out)"
                )
            with self._writing("the extend configuration") as conn:
                conn.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [
                        (EXTEND_DIGEST, cfg.digest()),
                        (EXTEND_CONFIG, json.dumps(cfg.to_dict(), sort_keys=True)),
                    ],
                )
            return
        if meta[EXTEND_DIGEST] != cfg.digest():
            stored = json.loads(meta.get(EXTEND_CONFIG, "{}"))
            changed = sorted(k for k, v in cfg.to_dict().items() if stored.get(k) != v)
            raise ValueError(
                f"{self.path} holds results of another configuration (differs in {changed}); "
                "use another --out, or delete it to start over"
            )

    def __enter__(self) -> ExtendStore:
        return self
