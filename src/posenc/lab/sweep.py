"""Run a sweep: expand the grid, skip runs already in the store, store each run as it ends.

Runs are keyed by ``RunConfig.key()`` and stored whole, so re-running a sweep killed at any
moment (even ``kill -9``) loses only the runs in flight and never duplicates a finished one.
A sweep holds ``sweep_lock(out_dir)``: a second sweep on the same directory waits for it, then
skips what it stored, so no run is trained twice.

A sweep stops (``StoreError``, nothing more trained) at the first result it cannot keep: its
store or lock file removed or replaced (the folder deleted mid-sweep), a store write refused,
or a run that failed writing its checkpoint for want of space, permission or a writable disk.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from .config import RunConfig, SweepConfig, expand
from .executors import Executor, LocalExecutor, RunFailure
from .footprint import check_fits
from .progress import SweepProgress
from .store import ResultStore, StoreError

STORE_NAME = "results.sqlite"
LOCK_NAME = STORE_NAME + ".lock"
#: A run failing with one of these could not write its files: every later run would too.
WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}
)


class HeldLock:
    """The lock file a sweep holds; ``check()`` raises StoreError once it is no longer the
    file at its path (the folder removed, the lock file replaced): the folder is unlocked."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd

    def check(self) -> None:
        if self.fd is None:
            return
        held = os.fstat(self.fd)
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            raise StoreError(
                f"{self.path} was removed or replaced while this sweep held it (was the folder "
                "deleted?); stopped: another sweep could now write there too"
            )


@contextmanager
def sweep_lock(out_dir: str | Path) -> Iterator[HeldLock]:
    """Hold an exclusive ``flock`` on ``out_dir/results.sqlite.lock``; where another process
    holds it, say so on stderr and wait. The OS releases it when its holder ends, even killed.
    Yields the held lock (``HeldLock.check``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): sweeps on one directory are not serialised
        yield HeldLock(out / LOCK_NAME, None)
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
        yield HeldLock(out / LOCK_NAME, lock.fileno())


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
    held: HeldLock | None = None,
) -> SweepOutcome:
    """Run every unfinished cell of ``sweep`` into ``out_dir/results.sqlite`` (checkpoints in
    ``out_dir/checkpoints``) under ``sweep_lock(out_dir)`` (``lock=False``: the caller holds
    it, and may pass it as ``held`` to be checked). ``executor`` defaults to a local process
    pool.

    Raises: ValueError before any run when one cannot fit in memory (``footprint.check_fits``);
    StoreError at the first result that cannot be kept (module doc): the runs in flight are
    stopped, the runs stored before it stay stored.
    """
    out = Path(out_dir)
    runs = list({r.key(): r for r in expand(sweep)}.values())  # equal keys: equal runs
    with (
        sweep_lock(out) if lock else nullcontext(held) as holding,
        ResultStore(out / STORE_NAME) as store,
    ):
        finished = store.finished_keys()
        todo = [r for r in runs if r.key() not in finished]
        executor = LocalExecutor() if executor is None else executor
        check_fits(todo, executor.workers if isinstance(executor, LocalExecutor) else 1)
        budgets = {r.key(): r.train.steps for r in todo}  # task_train: budgets per task
        progress = SweepProgress(
            len(todo), len(runs) - len(todo), steps=sweep.train.steps, budgets=budgets, live=live
        )
        if isinstance(executor, LocalExecutor) and executor.on_steps is None:
            executor.on_steps = progress.steps
        failed = []
        by_key = {r.key(): r for r in todo}
        with progress:
            for result in executor.map(todo, out / "checkpoints"):
                if holding is not None:
                    holding.check()
                store.check_intact()  # before the result: a lost folder explains a failure
                if isinstance(result, RunFailure) and result.errno in WRITE_ERRNOS:
                    raise StoreError(f"run {result.config.key()} not stored: {result.error}")
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
