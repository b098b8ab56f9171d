"""The extension lab's results: one SQLite file, ``OUT/extend.sqlite`` (beside the lab's own
``results.sqlite``, whose schema it does not touch).

Tables: ``meta`` (schema version, the configuration and its digest), ``units`` (each finished
unit of work: its name, extra outputs as JSON, wall and CPU seconds) and ``results`` (one
number per row: seed, encoding, method, variant ``free``/``tuned``, factor, context length,
metric, bucket start..stop or passkey depth, value). A unit and its rows are written in one
transaction, so a run killed at any moment keeps every finished unit and nothing of the others;
running it again does only what is missing. A store holds one configuration: opening it with
another raises. As the lab's store does, each write first checks that the file is still the
one opened, and a write SQLite or the OS refuses raises ``StoreError`` (nothing of it kept).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from ..lab.store import file_identity, guarded_write
from .config import ExtendConfig

STORE_NAME = "extend.sqlite"
SCHEMA = 1

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS units (
    name TEXT PRIMARY KEY, info TEXT NOT NULL, seconds REAL NOT NULL, cpu_seconds REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    unit TEXT NOT NULL, seed INTEGER NOT NULL, encoding TEXT NOT NULL, method TEXT NOT NULL,
    variant TEXT NOT NULL, factor INTEGER NOT NULL, length INTEGER NOT NULL,
    metric TEXT NOT NULL, start INTEGER, stop INTEGER, depth REAL, value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_unit ON results (unit);
"""


class Row(NamedTuple):
    """One stored number (see the module doc)."""

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
    rows: list[Row]
    info: dict[str, Any]
    seconds: float
    cpu_seconds: float


class ExtendStore:
    """``OUT/extend.sqlite`` for ``cfg``. Raises: ValueError when the file is not such a store,
    or holds another configuration."""

    def __init__(self, path: str | Path, cfg: ExtendConfig) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        try:
            tables = {
                n for (n,) in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            foreign = sorted(tables - {"meta", "units", "results"})
            if foreign:  # another application's database (or the lab's results.sqlite)
                raise ValueError(
                    f"{self.path} is not an extension-lab store: it holds the tables "
                    f"{', '.join(foreign)}"
                )
            self.db.executescript(_TABLES)
            self._claim(cfg)
            self._identity = file_identity(self.path)
        except sqlite3.DatabaseError as err:
            self.db.close()
            raise ValueError(f"{self.path} is not an extension-lab store ({err})") from None
        except ValueError:
            self.db.close()
            raise

    def _claim(self, cfg: ExtendConfig) -> None:
        meta = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
        if not meta:
            with self.db:
                self.db.executemany(
                    "INSERT INTO meta VALUES (?, ?)",
                    [
                        ("schema", str(SCHEMA)),
                        ("digest", cfg.digest()),
                        ("config", json.dumps(cfg.to_dict(), sort_keys=True)),
                    ],
                )
            return
        if meta.get("schema") != str(SCHEMA):
            raise ValueError(f"{self.path} has schema {meta.get('schema')}, expected {SCHEMA}")
        if meta.get("digest") != cfg.digest():
            stored = json.loads(meta.get("config", "{}"))
            changed = sorted(k for k, v in cfg.to_dict().items() if stored.get(k) != v)
            raise ValueError(
                f"{self.path} holds results of another configuration (differs in {changed}); "
                "use another --out, or delete it to start over"
            )

    def __enter__(self) -> ExtendStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def done(self) -> set[str]:
        """Names of the finished units."""
        return {name for (name,) in self.db.execute("SELECT name FROM units")}

    def _writing(self, what: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One transaction on the file this store opened (``lab.store.guarded_write``)."""
        return guarded_write(self.db, self.path, self._identity, what)

    def add(self, unit: UnitResult) -> None:
        """Store a finished unit and its rows, atomically (replacing an earlier copy)."""
        with self._writing(f"unit {unit.name!r}"):
            self.db.execute("DELETE FROM results WHERE unit = ?", (unit.name,))
            self.db.execute(
                "INSERT OR REPLACE INTO units VALUES (?, ?, ?, ?)",
                (unit.name, json.dumps(unit.info), unit.seconds, unit.cpu_seconds),
            )
            self.db.executemany(
                "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(unit.name, *r[:7], r.start, r.stop, r.depth, r.value) for r in unit.rows],
            )

    def set_meta(self, key: str, value: str) -> None:
        with self._writing(f"meta {key!r}"):
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, value FROM meta").fetchall())

    def info(self, name: str) -> dict[str, Any]:
        """The extra outputs of finished unit ``name``. Raises: KeyError if not finished."""
        found = self.db.execute("SELECT info FROM units WHERE name = ?", (name,)).fetchone()
        if found is None:
            raise KeyError(name)
        return dict(json.loads(found[0]))

    def units(self) -> list[dict[str, Any]]:
        """Every finished unit: name, info, seconds, cpu_seconds."""
        cur = self.db.execute("SELECT name, info, seconds, cpu_seconds FROM units ORDER BY name")
        return [
            {"name": n, "info": json.loads(i), "seconds": s, "cpu_seconds": c} for n, i, s, c in cur
        ]

    def rows(self) -> list[Row]:
        """Every stored number."""
        cur = self.db.execute(
            "SELECT seed, encoding, method, variant, factor, length, metric, value, start, stop,"
            " depth FROM results"
        )
        return [Row(*r) for r in cur]
