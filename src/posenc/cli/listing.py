"""``posenc list``: the registered encodings as a table."""

from __future__ import annotations

from typing import Annotated

import typer


def list_encodings(
    family: Annotated[
        str | None, typer.Option(help="Only encodings of this family (e.g. rotary).")
    ] = None,
) -> None:
    """Print every registered encoding: name, family, parameters and paper."""
    from rich.console import Console
    from rich.table import Table

    from ..registry import info, names

    table = Table(title="posenc encodings")
    for column in ("name", "family", "parameters", "paper"):
        table.add_column(column, overflow="fold")
    for name in names():
        entry = info(name)
        if family is None or entry.family == family:
            table.add_row(name, entry.family, entry.signature() or "-", entry.paper)
    Console().print(table)
