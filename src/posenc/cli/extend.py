"""``posenc lab extend`` (also ``posenc lab --preset extend``): the context-extension lab.

Trains small RoPE, ALiBi, NoPE and FIRE language models at a context L, applies every RoPE
extension method training-free and after a short fine-tune, measures loss by position and
passkey retrieval at 2x-8x L, streams with attention sinks, and checks the published findings.
Writes OUT/extend.sqlite (resumable) and OUT/extend.html. A view of the lab's ``extend`` suite
(``posenc.lab.extension``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ._errors import interrupted
from ._options import check_out, out_path

Out = Annotated[
    Path,
    typer.Option(
        "--out", parser=out_path, help="Output folder (extend.sqlite, extend.html, checkpoints)."
    ),
]
Quick = Annotated[
    bool, typer.Option("--quick", help="The smoke-test variant: every code path in seconds.")
]
Workers = Annotated[int | None, typer.Option(help="Worker processes (default: CPU count).")]
Sets = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a setting, e.g. --set steps=600 (repeatable)."),
]


def extend(
    out: Out = Path("posenc-results"),
    quick: Quick = False,
    workers: Workers = None,
    set_: Sets = None,
) -> None:
    """Train at L, extend at inference (PI, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE) and after
    a short fine-tune; compare ALiBi, NoPE, FIRE and attention sinks; check the findings."""
    run_preset(out, "quick" if quick else "extend", workers, set_ or [])


def run_preset(out: Path, name: str, workers: int | None, sets: list[str]) -> None:
    """Run (or resume) preset ``name`` into ``out`` and write its report."""
    from ..lab.extension import run_extend
    from ..lab.presets import extend_preset
    from ..lab.report import write_extend_report
    from ..lab.summary import extend_answer_text

    try:
        cfg = extend_preset(name, **_overrides(sets))
    except (ValueError, TypeError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    check_out(out, "extend.sqlite")
    try:
        outcome = run_extend(cfg, out, workers=workers)
    except (ValueError, TypeError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise interrupted("units", out / "extend.sqlite") from None
    report = write_extend_report(out, cfg)
    if name == "quick":
        typer.echo("quick preset: a smoke test of every code path; its verdicts mean nothing")
    typer.echo(extend_answer_text(out, cfg))  # the answer first, then where everything is
    typer.echo(
        f"results: {outcome.store}  ({len(outcome.ran)} units run, {outcome.reused} reused; "
        f"{outcome.seconds:.0f} s wall, {outcome.cpu_seconds:.0f} s CPU)"
    )
    typer.echo(f"report:  {report.resolve()}")
    if outcome.failed:
        for name_, error in outcome.failed.items():
            typer.echo(f"failed: {name_}: {error}", err=True)
        typer.echo("running the same command again retries them", err=True)
        raise typer.Exit(1)


def _overrides(sets: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values read as JSON (numbers, lists), else as strings."""
    found: dict[str, Any] = {}
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--set takes key=value, got {item!r}")
        try:
            found[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            found[key.strip()] = value
    return found
