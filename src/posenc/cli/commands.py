"""The ``posenc`` command's typer app (``app``). Heavy imports live inside each command,
so ``--help`` is instant."""

from __future__ import annotations

import typer

from ._errors import PosencGroup
from .bench import bench
from .check import check
from .conform import conform_command
from .demo import demo
from .eval import app as eval_app
from .lab import app as lab_app
from .listing import list_encodings
from .plot import plot
from .report import report

app = typer.Typer(
    name="posenc",
    help="Positional encodings for transformers: list, verify, plot, compare.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    cls=PosencGroup,  # every error as one "error: <message>" line, exit 2 (usage) or 1
)
app.command("list")(list_encodings)
app.command("demo")(demo)
app.command("check")(check)
app.command("conform")(conform_command)
app.command("plot")(plot)
app.command("report")(report)
app.command("bench")(bench)
app.add_typer(lab_app, name="lab")
app.add_typer(eval_app, name="eval")
