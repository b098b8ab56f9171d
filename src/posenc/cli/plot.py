"""``posenc plot KIND [NAME...] --out DIR``: write figures of encodings as PNG or SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def plot(
    kind: Annotated[str, typer.Argument(help="Figure kind, e.g. heatmap, bias, extension.")],
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Encodings (default: every one the kind applies to)."),
    ] = None,
    out: Annotated[Path, typer.Option(help="Output directory.")] = Path("posenc-plots"),
    fmt: Annotated[str, typer.Option("--format", help="png or svg.")] = "png",
) -> None:
    """Draw one figure per encoding (overlay kinds: one figure for all) into --out."""
    from ..analysis.subjects import resolve, subject_names
    from ..plots import PLOTS

    if kind not in PLOTS:
        raise typer.BadParameter(f"unknown plot kind {kind!r}; choose one of {sorted(PLOTS)}")
    if fmt not in ("png", "svg"):
        raise typer.BadParameter(f"--format must be png or svg, got {fmt!r}")
    chosen = PLOTS[kind]
    try:
        if chosen.applies is None:
            figures = {kind: chosen()}
        else:
            pes = [resolve(n) for n in (names or subject_names())]
            if not names:
                pes = [pe for pe in pes if chosen.applies(pe)]
            if chosen.multi:
                figures = {kind: chosen(pes)}
            else:
                figures = {f"{kind}-{pe.name.replace(':', '-')}": chosen([pe]) for pe in pes}
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    out.mkdir(parents=True, exist_ok=True)
    for stem, fig in figures.items():
        path = out / f"{stem}.{fmt}"
        fig.savefig(path, format=fmt)
        typer.echo(str(path))
