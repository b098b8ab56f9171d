"""Run (or resume) the extension lab: every unit of ``units.plan`` not yet in the store, in
``workers`` processes (one torch thread each) or in this process (``workers=1``), each as soon
as the units it needs are stored; then the report.

A run holds the lab's lock on ``out`` (``posenc.lab.sweep.sweep_lock``): a second run, or a
lab sweep, on the same folder waits for it and then does only what is still missing.

Time is measured twice: wall time of this invocation, and CPU time of this process and its
worker processes (``resource.getrusage``, user + system), so a run on a loaded machine can be
judged by the CPU it needed. Both are stored in the store's ``meta`` (``last_run``).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import Any

from ...kernels.native import cpu_model
from ..config import ExtendConfig
from ..store import EXTEND_STORE_NAME, ExtendStore, StoreError, UnitResult
from ..sweep import WRITE_ERRNOS, sweep_lock
from .units import Unit, execute, plan


@dataclass
class Outcome:
    """What one invocation did: units run now, reused from the store, failed (name: error)."""

    store: Path
    ran: list[str] = field(default_factory=list)
    reused: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def run_extend(
    cfg: ExtendConfig,
    out: str | Path,
    *,
    workers: int | None = None,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """Run every missing unit of ``cfg`` into ``out/extend.sqlite``; returns the ``Outcome``.

    ``workers``: processes (default: the CPU count; 1 runs every unit in this process);
    ``log``: one line per finished unit (default: stderr).
    Raises: ValueError when ``out`` holds a store of another configuration.
    """
    out = Path(out)
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    workers = (os.cpu_count() or 1) if workers is None else workers
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    start, cpu0 = time.perf_counter(), _cpu()
    # one writer per folder: a second run (or a lab sweep) on ``out`` waits, then reuses
    with sweep_lock(out), ExtendStore(out / EXTEND_STORE_NAME, cfg) as store:
        done = store.finished_units()
        todo = [u for u in plan(cfg) if u.name not in done]
        outcome = Outcome(out / EXTEND_STORE_NAME, reused=len(done))
        say(f"extension lab {cfg.name!r}: {len(todo)} units to run, {len(done)} in {store.path}")
        run = _Run(cfg, out, store, outcome, say, len(todo))
        try:
            if workers == 1 or len(todo) <= 1:
                run.in_process(todo)
            else:
                run.pool(todo, workers)
        finally:
            outcome.seconds = time.perf_counter() - start
            outcome.cpu_seconds = _cpu() - cpu0
            store.set_meta("last_run", json.dumps(_summary(outcome, workers)))
    return outcome


def _cpu() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _summary(outcome: Outcome, workers: int) -> dict[str, object]:
    return {
        "seconds": round(outcome.seconds, 1),
        "cpu_seconds": round(outcome.cpu_seconds, 1),
        "units_run": len(outcome.ran),
        "units_reused": outcome.reused,
        "failed": len(outcome.failed),
        "workers": workers,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpu_model": cpu_model() or platform.machine(),
        "python": platform.python_version(),
    }


@dataclass
class _Run:
    """The state of one invocation: where results go and what to say."""

    cfg: ExtendConfig
    out: Path
    store: ExtendStore
    outcome: Outcome
    say: Callable[[str], None]
    total: int

    def needs(self, unit: Unit) -> dict[str, dict[str, Any]]:
        """The info of the units ``unit`` needs (all stored)."""
        return {n: self.store.unit_info(n) for n in unit.needs}

    def blocked(self, unit: Unit) -> bool:
        """A unit it needs failed: it cannot run."""
        if any(n in self.outcome.failed for n in unit.needs):
            self.outcome.failed[unit.name] = "a unit it needs failed"
            return True
        return False

    def record(self, result: UnitResult) -> None:
        self.store.add_unit(result)
        self.outcome.ran.append(result.name)
        n = len(self.outcome.ran) + len(self.outcome.failed)
        self.say(
            f"[{n}/{self.total}] {result.name}: {result.seconds:.1f} s "
            f"(cpu {result.cpu_seconds:.1f} s), {len(result.rows)} numbers"
        )

    def fail(self, name: str, err: Exception) -> None:
        """One unit's failure is reported; the others go on, unless it could not write its
        files (``WRITE_ERRNOS``: every later unit would fail so): StoreError, stop."""
        if isinstance(err, OSError) and err.errno in WRITE_ERRNOS:
            raise StoreError(f"unit {name} not stored: {err}") from err
        self.outcome.failed[name] = f"{type(err).__name__}: {err}"
        self.say(f"FAILED {name}: {self.outcome.failed[name]}")

    def in_process(self, todo: list[Unit]) -> None:
        """Every unit in this process, in plan order (each after the units it needs)."""
        for unit in todo:
            if self.blocked(unit):
                continue
            try:
                result = execute(unit, self.cfg, self.out, self.needs(unit))
            except Exception as err:
                self.fail(unit.name, err)
                continue
            self.record(result)

    def pool(self, todo: list[Unit], workers: int) -> None:
        """Submit each unit once the units it needs are stored; collect results as they end
        (this process sleeps until a worker finishes one, or a second has passed)."""
        pending = list(todo)
        running: dict[str, AsyncResult[UnitResult]] = {}
        ended = threading.Event()
        pool = mp.get_context("spawn").Pool(workers, _init_worker, (os.getpid(),))
        try:
            while pending or running:
                finished = self.store.finished_units()
                for unit in list(pending):
                    if self.blocked(unit):
                        pending.remove(unit)
                    elif len(running) < workers and all(n in finished for n in unit.needs):
                        pending.remove(unit)
                        args = (unit, self.cfg, self.out, self.needs(unit))
                        running[unit.name] = pool.apply_async(
                            execute,
                            args,
                            callback=lambda _: ended.set(),
                            error_callback=lambda _: ended.set(),
                        )
                if not running:
                    break
                ended.wait(1.0)
                ended.clear()  # a unit ending from here on sets it again
                for name, job in list(running.items()):
                    if job.ready():
                        del running[name]
                        try:
                            result = job.get()
                        except Exception as err:
                            self.fail(name, err)
                            continue
                        self.record(result)  # a store that cannot keep it stops the run
            pool.close()
        finally:  # on Ctrl-C (or an error): stop the workers now, keep what is stored
            pool.terminate()
            pool.join()


def _init_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run from the parent
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A worker whose run was killed (even ``kill -9``) stops within a second."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)
