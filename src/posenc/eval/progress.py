"""A progress bar for the evaluations: rich on a terminal (stderr), nothing otherwise."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(
    total: int, description: str, show: bool | None = None
) -> Iterator[Callable[[str], None]]:
    """Yield ``step(label)``: one unit done, ``label`` the bar's new description. ``show``
    default: whether stderr is a terminal (stdout stays clean for results)."""
    if not (sys.stderr.isatty() if show is None else show):
        yield lambda label: None
        return
    from rich import progress as rp
    from rich.console import Console

    bar = rp.Progress(
        rp.TextColumn("{task.description}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeElapsedColumn(),
        rp.TextColumn("eta"),
        rp.TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda label: bar.update(task, advance=1, description=label)
