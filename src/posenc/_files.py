"""Files written for a user, atomically: a temporary file in the target's folder, flushed and
fsynced, then ``os.replace``d over the target (and the folder fsynced), so a kill or a full
disk at any moment leaves the old file or the new one, never a part of it.

The temporary file is ``.<name>.<pid>.<random>.tmp`` beside the target: removed when the write
fails, and, where a kill left one, removed by the next write of that target once the process
that made it is gone. Every posenc writer of user files (reports, ``--into`` targets,
checkpoints, JSON, exports, figures) goes through ``atomic_open`` or ``atomic_write``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal, cast, overload

TEMP_SUFFIX = ".tmp"


def temp_name(path: Path) -> Path:
    """A temporary name for a write of ``path``: in its folder, of this process alone."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def clean_stale(path: Path) -> list[Path]:
    """Remove the temporary files of earlier writes of ``path`` whose process has ended (a
    kill between write and rename); returns what was removed. Another live process's are kept."""
    removed = []
    prefix = f".{path.name}."
    with contextlib.suppress(OSError):
        for sibling in path.parent.iterdir():
            name = sibling.name
            if not (name.startswith(prefix) and name.endswith(TEMP_SUFFIX)):
                continue
            pid, _, token = name[len(prefix) : -len(TEMP_SUFFIX)].partition(".")
            if not (pid.isdigit() and len(token) == 8) or _alive(int(pid)):
                continue
            with contextlib.suppress(FileNotFoundError):
                sibling.unlink()
                removed.append(sibling)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # another thread of this process may be writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


@overload
def atomic_open(
    path: str | Path, mode: Literal["w"] = ..., *, newline: str | None = None
) -> contextlib.AbstractContextManager[IO[str]]: ...
@overload
def atomic_open(
    path: str | Path, mode: Literal["wb"], *, newline: str | None = None
) -> contextlib.AbstractContextManager[IO[bytes]]: ...
def atomic_open(
    path: str | Path, mode: Literal["w", "wb"] = "w", *, newline: str | None = None
) -> contextlib.AbstractContextManager[IO[str]] | contextlib.AbstractContextManager[IO[bytes]]:
    """``with atomic_open(path, "w") as f:`` writes ``f`` to a temporary file beside ``path``
    and renames it over ``path`` when the block ends without an exception (text in UTF-8).

    Raises: OSError from the writes (ENOSPC, EROFS, EACCES...): ``path`` is then unchanged
    and the temporary file removed.
    """
    opened = _atomic(Path(path), mode, newline)  # IO[str] for "w", IO[bytes] for "wb"
    return cast("contextlib.AbstractContextManager[IO[str]]", opened)


@contextlib.contextmanager
def _atomic(path: Path, mode: str, newline: str | None) -> Iterator[IO[str] | IO[bytes]]:
    clean_stale(path)
    tmp = temp_name(path)
    encoding = None if "b" in mode else "utf-8"
    try:
        with open(tmp, mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError) and err.filename in (None, str(tmp)):
            err.filename = str(path)  # the file the user asked for, not the temporary one
        raise
    _sync_folder(path.parent)


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically (``atomic_open``); returns it."""
    path = Path(path)
    if isinstance(data, bytes):
        with atomic_open(path, "wb") as fb:
            fb.write(data)
    else:
        with atomic_open(path, "w") as ft:
            ft.write(data)
    return path


def _sync_folder(folder: Path) -> None:
    """fsync ``folder`` so the rename survives a power cut (where the OS allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
