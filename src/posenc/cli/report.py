"""``posenc report --out DIR``: the posenc encodings report, one self-contained HTML page of
what each encoding is, its checks and its figures (the lab's report is ``posenc lab``'s)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (the one ``mkdir(parents=
    True)`` would create first), or None when ``path`` exists."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def report(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Encodings to include (default: all, with rope:<method> examples)."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Output directory for index.html.")] = Path("report"),
    fmt: Annotated[str, typer.Option("--format", help="Figure format inside the page.")] = "png",
) -> None:
    """Write the posenc encodings report, DIR/index.html: each encoding, its checks, figures.

    Per encoding: what it is (formula, paper, parameters), its property checks and figures.
    Then context extension and a comparison across encodings.
    Not the lab's report of training results: posenc lab writes that one (report.html).
    """
    from ..report import write_report

    if fmt not in ("png", "svg"):
        raise typer.BadParameter(f"--format must be png or svg, got {fmt!r}")
    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{str(out)!r} exists and is not a directory", param_hint="--out")
    created = _first_missing(out)
    try:
        path = write_report(out, names or None, fmt=fmt)  # type: ignore[arg-type]
    except BaseException as err:
        if created is not None:  # leave no folder behind that this command made
            shutil.rmtree(created, ignore_errors=True)
        if isinstance(err, ValueError):
            raise typer.BadParameter(str(err)) from err
        if isinstance(err, OSError):
            typer.echo(f"error: cannot write the report to {out}: {err}", err=True)
            raise typer.Exit(1) from None
        raise
    typer.echo(str(path))
