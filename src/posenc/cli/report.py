"""``posenc report --out DIR``: one self-contained HTML page of checks and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Encodings to include (default: all, with rope:<method> examples)."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Output directory for index.html.")] = Path("report"),
    fmt: Annotated[str, typer.Option("--format", help="Figure format inside the page.")] = "png",
) -> None:
    """Write DIR/index.html: a section per encoding, context extension and a comparison."""
    from ..report import write_report

    if fmt not in ("png", "svg"):
        raise typer.BadParameter(f"--format must be png or svg, got {fmt!r}")
    try:
        path = write_report(out, names or None, fmt=fmt)  # type: ignore[arg-type]
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    typer.echo(str(path))
