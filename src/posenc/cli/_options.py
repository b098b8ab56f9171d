"""Options shared by the commands that write into an output folder: ``--out`` parsed (an empty
path is refused, not read as the current folder) and checked before any work (``check_out``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import typer


def out_path(text: str | Path) -> Path:
    """``--out``'s value as a Path; raises BadParameter for an empty one ("" is not ".")."""
    if isinstance(text, Path):  # the default
        return text
    if not text.strip():
        raise typer.BadParameter("must name a folder, got an empty path", param_hint="--out")
    return Path(text)


def check_out(out: Path, *files: str) -> None:
    """Exit 2 with one line if a command could not write into folder ``out`` (or its
    ``files`` already there): before any work. The part of ``out`` that exists must be a
    writable directory; the folder is then made and a file created in it and removed, which
    finds what ``os.access`` does not (a read-only file system, /proc or /sys, as root)."""
    found = out.absolute()
    while not found.exists():  # the part of OUT that exists (a file stops the walk too)
        found = found.parent
    problem, path = "", found
    if not found.is_dir():
        problem = "is a file, not a directory"
    elif not os.access(found, os.W_OK | os.X_OK):
        problem = "is not writable"
    else:
        for name in files:
            if (out / name).exists() and not os.access(out / name, os.W_OK):
                path, problem = (out / name).absolute(), "is read-only"
                break
    if not problem:
        try:
            out.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=out, prefix=".posenc-probe-"):
                pass
        except OSError as err:
            path, problem = found, f"cannot be written ({err.strerror or err})"
            with contextlib.suppress(OSError):
                if out.is_dir() and not any(out.iterdir()) and out.absolute() != found:
                    out.rmdir()
    if not problem:
        return
    where = "" if path == out.absolute() else f": {path}"
    typer.echo(f"error: --out {out}{where} {problem}", err=True)
    raise typer.Exit(2)
