"""The extend suite's store is the lab's result store: schema version 3's unit tables, the
version-2 stores that gain them, the committed files, and the move of a retired
``posenc.extlab`` store (``benchmarks/migrate_extend_store.py``)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

from posenc.lab.store import (
    EXTEND_CONFIG,
    EXTEND_DIGEST,
    SCHEMA_VERSION,
    ExtendRow,
    ExtendStore,
    ResultStore,
    UnitResult,
)

from .conftest import TINY

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "benchmarks" / "results"
ROWS = [
    ExtendRow(0, "rope", "none", "free", 1, 24, "loss", 2.5),
    ExtendRow(0, "rope", "none", "free", 1, 24, "bucket", 2.25, 0, 8),
    ExtendRow(0, "rope", "none", "free", 1, 24, "passkey", 1.0, depth=0.5),
]


def _version(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return str(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])


def test_units_and_their_numbers_round_trip_in_the_order_stored(tmp_path: Path) -> None:
    path = tmp_path / "extend.sqlite"
    with ExtendStore(path, TINY) as store:
        store.add_unit(UnitResult("b", ROWS[:2], {"x": [1.5]}, 1.0, 0.5))
        store.add_unit(UnitResult("a", ROWS[2:], {}, 2.0, 1.5))
        assert store.finished_units() == {"a", "b"}
        assert store.measures() == ROWS
        assert store.unit_info("b") == {"x": [1.5]}
        with pytest.raises(KeyError):
            store.unit_info("c")
        store.add_unit(UnitResult("b", ROWS[:1], {}, 1.0, 0.5))  # a unit again: replaced whole
        assert store.measures() == [ROWS[2], ROWS[0]]
        meta = store.meta()
    assert meta[EXTEND_DIGEST] == TINY.digest()
    assert json.loads(meta[EXTEND_CONFIG]) == TINY.to_dict()
    assert int(meta["schema_version"]) == SCHEMA_VERSION == 3
    with ResultStore(path, readonly=True) as store:  # read as any lab store
        assert store.runs() == [] and [u["name"] for u in store.units()] == ["a", "b"]


def test_a_store_of_lab_sweep_runs_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    shutil.copyfile(RESULTS / "lab-quick.sqlite", path)
    with pytest.raises(ValueError, match="lab sweep runs; the extend suite needs a store"):
        ExtendStore(path, TINY)


def test_a_version_2_store_gains_the_unit_tables_when_opened_for_writing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "results.sqlite"
    shutil.copyfile(RESULTS / "lab-quick.sqlite", path)
    assert _version(path) == "2"
    with ResultStore(path, readonly=True) as store:  # read-only: as it is, no units
        runs = store.runs()
        assert runs and store.units() == [] and store.finished_units() == set()
    assert _version(path) == "2"
    with ResultStore(path) as store:
        assert store.runs() == runs and store.units() == []
    assert _version(path) == str(SCHEMA_VERSION)


def test_the_committed_extend_store_is_a_lab_result_store() -> None:
    with ResultStore(RESULTS / "extend.sqlite", readonly=True) as store:
        meta, units, rows = store.meta(), store.units(), store.measures()
        assert store.runs() == []
    assert meta["schema_version"] == str(SCHEMA_VERSION) and EXTEND_CONFIG in meta
    assert len(units) == 90 and len(rows) == 4182


def _migration() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "migrate_extend_store", ROOT / "benchmarks" / "migrate_extend_store.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The schema of ``posenc.extlab``'s stores (retired), as it wrote them.
EXTLAB_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE units (
    name TEXT PRIMARY KEY, info TEXT NOT NULL, seconds REAL NOT NULL, cpu_seconds REAL NOT NULL
);
CREATE TABLE results (
    unit TEXT NOT NULL, seed INTEGER NOT NULL, encoding TEXT NOT NULL, method TEXT NOT NULL,
    variant TEXT NOT NULL, factor INTEGER NOT NULL, length INTEGER NOT NULL,
    metric TEXT NOT NULL, start INTEGER, stop INTEGER, depth REAL, value REAL NOT NULL
);
CREATE INDEX results_by_unit ON results (unit);
"""


def test_an_extlab_store_moves_whole_into_the_lab_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "extend.sqlite"
    info = {"passed_gate": True, "passkey_at_L": 1.0, "loss_curve": [[0, 3.25]]}
    with sqlite3.connect(path) as db:
        db.executescript(EXTLAB_SCHEMA)
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [
                ("schema", "1"),
                ("digest", TINY.digest()),
                ("config", json.dumps(TINY.to_dict(), sort_keys=True)),
                ("last_run", json.dumps({"seconds": 1.0})),
            ],
        )
        db.execute(
            "INSERT INTO units VALUES (?, ?, ?, ?)",
            ("pretrain/rope/s0", json.dumps(info), 1.5, 1.25),
        )
        db.executemany(
            "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [("pretrain/rope/s0", *r[:7], r.start, r.stop, r.depth, r.value) for r in ROWS],
        )
    db.close()
    migrate = _migration().migrate
    migrate(path)
    assert "1 units, 3 numbers moved; findings unchanged" in capsys.readouterr().out
    with ExtendStore(path, TINY) as store:
        assert store.measures() == ROWS
        assert store.units() == [
            {"name": "pretrain/rope/s0", "info": info, "seconds": 1.5, "cpu_seconds": 1.25}
        ]
        assert json.loads(store.meta()["last_run"]) == {"seconds": 1.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extend.sqlite"]  # no temp file left
    migrate(path)  # a second time: nothing to do
    assert "already a lab result store" in capsys.readouterr().out
