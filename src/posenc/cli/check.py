"""``posenc check [NAME...] [--set KEY=VALUE...] [--json]``: property checks as a PASS/FAIL
table."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer


def check(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Encodings to check, e.g. rope alibi rope:yarn (default: all)."),
    ] = None,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Run only this check (repeatable).")
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="KEY=VALUE, repeatable: an encoding parameter (dim=9, base=100.0), as for "
            "`posenc plot`; without names, every encoding that takes the keys.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON.")] = False,
    list_checks: Annotated[
        bool, typer.Option("--list", help="List the checks and what they verify, then exit.")
    ] = False,
) -> None:
    """Verify the math of each encoding; exit status 1 if any check fails."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..analysis import all_checks, run_checks

    if list_checks:
        table = Table(title="posenc checks")
        table.add_column("check")
        table.add_column("property", overflow="fold")
        for c in all_checks():
            table.add_row(c.name, escape(c.description))  # keep "PE[p + k]" literal
        Console(width=160).print(table)
        return

    try:
        results = run_checks(_encodings(names, settings), only=only or None)
    except (ValueError, TypeError) as err:
        raise typer.BadParameter(str(err)) from err
    if not results:  # a gate that ran nothing must not pass (`posenc check rope --only t5_...`)
        raise typer.BadParameter(
            f"no check in {sorted(only or [])} applies to {names}; see `posenc check --list`"
        )
    failed = sum(not r.passed for r in results)
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        table = Table(title=f"posenc check: {len(results) - failed} passed, {failed} failed")
        for column in ("encoding", "check", "measured", "needs", "result", "detail"):
            table.add_column(column, overflow="fold")
        for r in results:
            verdict = "[green]PASS[/]" if r.passed else "[bold red]FAIL[/]"
            table.add_row(
                escape(r.encoding),
                r.name,
                f"{r.error:.3g}",
                f"{r.comparison} {r.tolerance:.3g}",
                verdict,
                escape(r.detail),  # details index tensors ("PE[p]"): text, not rich markup
            )
        Console(width=160).print(table)
    if failed:
        raise typer.Exit(code=1)


def _encodings(names: list[str] | None, settings: list[str] | None) -> list[Any] | None:
    """What to check: the names as given (None: every subject), or with ``--set`` each named
    encoding (default: every one that takes the keys) built with those parameters."""
    from ..analysis.subjects import subject, subject_names
    from .plot import accepts, parse_settings

    config = parse_settings(settings or [])
    if not config:
        return list(names) if names else None
    chosen = names or [n for n in subject_names() if accepts(n, config)]
    if not chosen:
        raise ValueError(f"no encoding takes {sorted(config)}")
    return [subject(n, **config) for n in chosen]
