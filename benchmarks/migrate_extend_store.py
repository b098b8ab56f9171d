"""Move an extension-lab store of the retired ``posenc.extlab`` into the lab's result store.

``posenc.extlab`` wrote ``OUT/extend.sqlite`` in a schema of its own (``meta`` keys ``schema``
= 1, ``digest`` and ``config``; tables ``units`` and ``results``). The extend suite now writes
the lab's store (``posenc.lab.store``, schema version 3: its ``units`` and ``measures``
tables, the configuration under ``meta`` ``extend_config``). This script rewrites such a file
in place: every unit (name, info, seconds, CPU seconds) and every number in the order they
were stored, and the other ``meta`` entries (``last_run``); it then checks that the new file
reads back the same units and numbers and gives the same findings, verdicts and numbers, and
prints them. The file is written beside the old one and renamed over it, so a kill leaves
the old file.

Usage: ``python benchmarks/migrate_extend_store.py [STORE ...]`` (default: the committed
``benchmarks/results/extend.sqlite``). A store already in the lab's schema is left as it is.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from posenc.lab.config import ExtendConfig
from posenc.lab.findings import check_extend_findings
from posenc.lab.results import ExtendResults
from posenc.lab.store import EXTEND_STORE_NAME, ExtendRow, ExtendStore, UnitResult

COMMITTED = Path(__file__).resolve().parent / "results" / EXTEND_STORE_NAME
OLD_TABLES = {"meta", "units", "results"}
ROW = "seed, encoding, method, variant, factor, length, metric, value, start, stop, depth"


def read_old(
    path: Path,
) -> tuple[dict[str, str], list[tuple[Any, ...]], list[ExtendRow], list[str]] | None:
    """(meta, units in stored order, every number in stored order, each number's unit) of an
    extlab store; None for a store in the lab's schema. Raises ValueError for anything else."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if "schema_version" in meta:
            return None
        if tables != OLD_TABLES or meta.get("schema") != "1":
            raise ValueError(f"{path}: not an extlab store (tables {sorted(tables)}, meta {meta})")
        units = db.execute(
            "SELECT name, info, seconds, cpu_seconds FROM units ORDER BY rowid"
        ).fetchall()
        rows = [ExtendRow(*r) for r in db.execute(f"SELECT {ROW} FROM results ORDER BY rowid")]
        by_unit = [r[0] for r in db.execute("SELECT unit FROM results ORDER BY rowid")]
    finally:
        db.close()
    order = list(dict.fromkeys(by_unit))
    if order != [u[0] for u in units if u[0] in set(by_unit)]:
        raise ValueError(f"{path}: its numbers are not stored unit by unit in the units' order")
    return meta, units, rows, by_unit


def findings_text(rows: list[ExtendRow], units: list[dict[str, Any]], cfg: ExtendConfig) -> str:
    """Every finding's verdict and its parts' numbers (as ``posenc lab extend`` reports them)."""
    infos = {u["name"]: u["info"] for u in units}
    gated = {s for s in cfg.seeds if infos.get(f"pretrain/rope/s{s}", {}).get("passed_gate")}
    found = check_extend_findings(ExtendResults(rows), cfg, gated)
    return "\n".join(
        f"{f.key}: {f.verdict}: " + "; ".join(p.text() for p in f.parts) for f in found
    )


def migrate(path: Path) -> None:
    old = read_old(path)
    if old is None:
        print(f"{path}: already a lab result store, left as it is")
        return
    meta, units, rows, row_units = old
    of_unit: dict[str, list[ExtendRow]] = {}
    for row, unit in zip(rows, row_units, strict=True):
        of_unit.setdefault(unit, []).append(row)
    cfg = ExtendConfig(**json.loads(meta["config"]))
    if cfg.digest() != meta["digest"]:
        raise ValueError(f"{path}: its configuration does not hash to its digest")
    old_units = [
        {"name": n, "info": json.loads(i), "seconds": s, "cpu_seconds": c}
        for n, i, s, c in sorted(units)
    ]
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # the store creates it
    try:
        with ExtendStore(tmp, cfg) as store:
            for name, info, seconds, cpu in units:
                mine = of_unit.get(name, [])
                store.add_unit(UnitResult(name, mine, json.loads(info), seconds, cpu))
            for key, value in meta.items():
                if key not in ("schema", "digest", "config"):
                    store.set_meta(key, value)
            assert store.measures() == rows, "numbers differ"
            assert store.units() == old_units, "units differ"
            stored = dict(store.conn.execute("SELECT name, info FROM units").fetchall())
            assert stored == {n: i for n, i, _, _ in units}, "a unit's info text differs"
            new_text = findings_text(store.measures(), store.units(), cfg)
        db = sqlite3.connect(tmp)
        db.execute("PRAGMA journal_mode=DELETE")  # one file, as the other committed stores
        db.execute("VACUUM")
        db.close()
        old_text = findings_text(rows, old_units, cfg)
        assert new_text == old_text, f"findings differ:\n{old_text}\n---\n{new_text}"
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
    print(f"{path}: {len(units)} units, {len(rows)} numbers moved; findings unchanged:")
    print(new_text)


if __name__ == "__main__":
    for arg in sys.argv[1:] or [str(COMMITTED)]:
        migrate(Path(arg))
