"""``posenc list``: the registered encodings as a table."""

from __future__ import annotations

from typing import Annotated

import typer


def list_encodings(
    family: Annotated[
        str | None, typer.Option(help="Only encodings of this family (e.g. rotary).")
    ] = None,
    scaling: Annotated[
        bool, typer.Option("--scaling", help="Only the RoPE context-extension methods.")
    ] = False,
) -> None:
    """Print every registered encoding (name, family, parameters, paper), then the RoPE
    context-extension methods, each usable as `build("rope", scaling={"rope_type": NAME})`."""
    from rich.console import Console
    from rich.table import Table

    from ..extension import SCALINGS
    from ..registry import info, names

    families = sorted({info(n).family for n in names()})
    if family is not None and family not in families:
        raise typer.BadParameter(f"unknown family {family!r}; choose one of {families}")
    if scaling and family not in (None, "rotary"):  # the methods rescale RoPE only
        raise typer.BadParameter(f"--scaling lists RoPE's methods: no {family!r} encoding has them")
    methods = Table(title='RoPE context extension: build("rope", scaling={"rope_type": ...})')
    for column in ("rope_type", "parameters", "paper"):
        methods.add_column(column, overflow="fold")
    for cls in SCALINGS.values():
        methods.add_row(cls.method, cls.signature(), cls.paper)
    if not scaling:
        table = Table(title="posenc encodings")
        for column in ("name", "family", "parameters", "paper"):
            table.add_column(column, overflow="fold")
        for name in names():
            entry = info(name)
            if family is None or entry.family == family:
                table.add_row(name, entry.family, entry.signature() or "-", entry.paper)
        Console().print(table)
    if family in (None, "rotary"):  # --scaling: validated above
        Console().print(methods)
