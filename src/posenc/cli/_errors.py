"""One style for every error of the ``posenc`` command: ``error: <message>`` on stderr.

Usage errors (bad arguments, options or config values) exit 2, failures at run time exit 1.
No rich box, no "Usage:" block, no pydantic prefixes; ``--help`` is left as it is.
"""

from __future__ import annotations

import errno
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x carries its own copy of click: its exceptions are typer's, not click's
    from typer._click import exceptions as click
except ImportError:  # older typer runs on click itself
    from click import exceptions as click  # type: ignore[no-redef]

USAGE, FAILURE = 2, 1


class PosencGroup(TyperGroup):
    """The ``posenc`` group: runs its commands and turns what they raise into one message."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        call = dict(args=args, prog_name=prog_name, complete_var=complete_var, **extra)
        if not standalone_mode:  # a caller that handles the exceptions itself
            return super().main(standalone_mode=False, **call)
        try:
            rv = super().main(standalone_mode=False, **call)
        except click.ClickException as err:
            _fail(usage_message(err), err.exit_code)
        except typer.Abort:
            _fail("aborted", FAILURE)
        except (ValueError, TypeError) as err:
            if not _raised_by_posenc(err):
                raise  # someone else's error (a bug): the traceback says where
            _fail(error_message(err), USAGE)
        except OSError as err:
            if err.errno == errno.EPIPE:
                raise
            _fail(str(err), FAILURE)
        # commands return None; an int is the code of a typer.Exit
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


def _fail(message: str, code: int) -> None:
    """Print ``error: message`` (continuation lines as they are) and exit with ``code``."""
    typer.echo(f"error: {message.strip()}", err=True)
    sys.exit(code)


def interrupted(finished: str, store: Path) -> typer.Exit:
    """Say that a resumable command stopped on Ctrl-C with its ``finished`` units (``"runs"``)
    kept in ``store``; returns the exit to raise (130, as for SIGINT)."""
    typer.echo(
        f"\ninterrupted: finished {finished} are kept in {store}; "
        "run the same command again to resume",
        err=True,
    )
    return typer.Exit(130)


def _raised_by_posenc(err: BaseException) -> bool:
    """Whether the innermost frame of ``err``'s traceback is posenc's (its own validation)."""
    if type(err).__module__.startswith("pydantic"):
        return True
    tb: types.TracebackType | None = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith("posenc")


def error_message(err: ValueError | TypeError) -> str:
    """The text of a ValueError/TypeError; a pydantic ValidationError without pydantic's words."""
    if type(err).__module__.startswith("pydantic"):
        from ..lab.config import describe_problem

        problems = [describe_problem(dict(e), _dotted(e["loc"])) for e in err.errors()]  # type: ignore[union-attr]
        return "\n  ".join(problems)
    return str(err)


def _dotted(loc: tuple[int | str, ...]) -> str:
    return "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in loc).lstrip(".")


def usage_message(err: click.ClickException) -> str:
    """A click/typer error without its "Invalid value" wording, naming the option it is about."""
    if not isinstance(err, click.UsageError):
        return err.format_message()
    hint = _hint(err)
    cause = err.__cause__
    if isinstance(err, click.BadParameter) and type(cause).__module__.startswith("pydantic"):
        # typer converts option values with pydantic: "--seed must be an integer, got 'x'"
        from ..lab.config import describe_problem

        first = cause.errors()[0]  # type: ignore[union-attr]
        return describe_problem(dict(first), hint or "value")
    if isinstance(err, click.BadParameter) and not isinstance(err, click.MissingParameter):
        message = err.message.strip().removesuffix(".")
        return message if not hint or hint in message else f"{hint}: {message}"
    message = _sentence(err.format_message())
    command = err.ctx.command_path if err.ctx is not None else "posenc"
    return f"{message} (see '{command} --help')"


def _hint(err: click.UsageError) -> str:
    """The option or argument an error is about, e.g. ``--seed`` or ``KIND`` ('' if none)."""
    if not isinstance(err, click.BadParameter):
        return ""
    if err.param_hint is not None:
        hints = [err.param_hint] if isinstance(err.param_hint, str) else list(err.param_hint)
        return " / ".join(hints)
    param = err.param
    if param is None:
        return ""
    if getattr(param, "param_type_name", "") == "argument":
        return str(param.name or "").upper()
    opts = [*param.opts, *param.secondary_opts]
    return next((o for o in opts if o.startswith("--")), opts[0] if opts else "")


def _sentence(text: str) -> str:
    """Click's "No such command 'x'." as "no such command 'x'" (acronyms kept)."""
    text = text.strip().removesuffix(".")
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        text = text[0].lower() + text[1:]
    return text
