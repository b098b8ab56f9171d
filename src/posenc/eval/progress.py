"""Progress of the evaluations on stderr: a rich bar on a terminal, one line per step
otherwise (a log file or pipe still shows how far a long evaluation is)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(
    total: int, description: str, show: bool | None = None
) -> Iterator[Callable[[str], None]]:
    """Yield ``step(label)``: one unit done, ``label`` the bar's new description. ``show``:
    None (default) a bar on a terminal and lines elsewhere, False nothing (stdout stays clean
    for results either way)."""
    if show is False:
        yield lambda label: None
        return
    if not sys.stderr.isatty() and show is None:
        done = [0]

        def line(label: str) -> None:
            done[0] += 1
            print(f"{description}: {label} ({done[0]}/{total})", file=sys.stderr, flush=True)

        yield line
        return
    from ..lab.progress import progress_bar as rich_bar

    bar = rich_bar()
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda label: bar.update(task, advance=1, description=label)
