"""Run a sweep: expand the grid, skip runs already in the store, store each run as it ends.

Runs are keyed by ``RunConfig.key()`` and stored whole, so re-running a sweep killed at any
moment (even ``kill -9``) loses only the runs in flight and never duplicates a finished one.
A sweep holds ``sweep_lock(out_dir)``: a second sweep on the same directory waits for it, then
skips what it stored, so no run is trained twice.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from .config import RunConfig, SweepConfig, expand
from .executors import Executor, LocalExecutor, RunFailure
from .progress import SweepProgress
from .store import ResultStore

STORE_NAME = "results.sqlite"
LOCK_NAME = STORE_NAME + ".lock"


@contextmanager
def sweep_lock(out_dir: str | Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``out_dir/results.sqlite.lock``; where another process
    holds it, say so on stderr and wait. The OS releases it when its holder ends, even killed."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): sweeps on one directory are not serialised
        yield
        return
    with (out / LOCK_NAME).open("a") as lock:  # closing it releases the lock
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"another sweep is writing to {out}; waiting for it to finish…",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class SweepOutcome:
    """The sweep's run configs (all of them, finished earlier or now) and where they are."""

    runs: list[RunConfig]
    store: Path
    ran: int
    skipped: int
    failed: list[RunFailure]


def run_sweep(
    sweep: SweepConfig,
    out_dir: str | Path,
    *,
    executor: Executor | None = None,
    live: bool | None = None,
    lock: bool = True,
) -> SweepOutcome:
    """Run every unfinished cell of ``sweep`` into ``out_dir/results.sqlite`` (checkpoints in
    ``out_dir/checkpoints``) under ``sweep_lock(out_dir)`` (``lock=False``: the caller holds
    it). ``executor`` defaults to a local process pool."""
    out = Path(out_dir)
    runs = list({r.key(): r for r in expand(sweep)}.values())  # equal keys: equal runs
    with sweep_lock(out) if lock else nullcontext(), ResultStore(out / STORE_NAME) as store:
        finished = store.finished_keys()
        todo = [r for r in runs if r.key() not in finished]
        budgets = {r.key(): r.train.steps for r in todo}  # task_train: budgets per task
        progress = SweepProgress(
            len(todo), len(runs) - len(todo), steps=sweep.train.steps, budgets=budgets, live=live
        )
        executor = LocalExecutor() if executor is None else executor
        if isinstance(executor, LocalExecutor) and executor.on_steps is None:
            executor.on_steps = progress.steps
        failed = []
        by_key = {r.key(): r for r in todo}
        with progress:
            for result in executor.map(todo, out / "checkpoints"):
                if not isinstance(result, RunFailure):
                    try:
                        store.add(result, sweep=sweep.name)
                    except ValueError as err:  # a NaN metric: report it, store nothing
                        result = RunFailure.of(by_key[result.key], err)
                if isinstance(result, RunFailure):
                    failed.append(result)
                    progress.run_failed(result)
                else:
                    progress.run_done(result)
    ran = len(todo) - len(failed)
    return SweepOutcome(runs, out / STORE_NAME, ran, len(runs) - len(todo), failed)
