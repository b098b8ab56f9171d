"""Files posenc writes for a user are replaced whole: a full disk (ENOSPC injected into the
write) or a kill before the rename leaves the old file as it was, never an empty or cut one;
identical checkpoints are identical bytes; a killed write's temporary file does not stay."""

from __future__ import annotations

import builtins
import errno
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posenc import _files
from posenc.cli import app
from posenc.lab import table as table_module
from posenc.lab.store import ResultStore
from posenc.lab.table import BEGIN, END, write_into
from posenc.lab.train import save_checkpoint

README = f"# my project\n\nintro\n\n{BEGIN}\nold table\n{END}\n\nmore text the user wrote\n"


def _full_disk_after(limit: int) -> Callable[..., object]:
    """``open`` whose write-mode files take ``limit`` bytes, then fail with ENOSPC."""
    real_open = builtins.open

    def fake_open(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        f = real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]
        if "w" not in mode:
            return f
        written = {"n": 0}
        real_write = f.write

        def write(data: object) -> int:
            size = len(data)  # type: ignore[arg-type]
            if written["n"] + size > limit:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written["n"] += size
            return int(real_write(data))

        f.write = write
        return f

    return fake_open


def _inject_full_disk(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """Every file opened for writing takes ``limit`` bytes, then fails with ENOSPC (``open``
    and ``io.open``, which ``Path.write_text`` calls)."""
    fake = _full_disk_after(limit)
    monkeypatch.setattr(builtins, "open", fake)
    monkeypatch.setattr(io, "open", fake)


def test_into_a_full_disk_leaves_the_users_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "README.md"
    target.write_text(README)
    _inject_full_disk(monkeypatch, 10)
    with pytest.raises(OSError, match="No space left"):
        write_into(target, f"{BEGIN}\nnew table, rather longer than ten bytes\n{END}\n")
    monkeypatch.undo()
    assert target.read_text() == README
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


def test_lab_table_into_on_a_full_disk_is_one_line_and_keeps_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, store = tmp_path / "README.md", tmp_path / "results.sqlite"
    target.write_text(README)
    ResultStore(store).close()
    block = f"{BEGIN}\n" + "a row\n" * 1000 + f"{END}\n"
    monkeypatch.setattr(table_module, "results_markdown", lambda *a, **k: block)
    _inject_full_disk(monkeypatch, 100)
    result = CliRunner().invoke(app, ["lab", "table", "--out", str(store), "--into", str(target)])
    monkeypatch.undo()
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "No space left on device" in lines[0], result.output
    assert str(target) in lines[0], lines[0]
    assert target.read_text() == README


def test_a_report_cut_by_a_full_disk_leaves_the_old_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from posenc.report.encodings import write_report

    monkeypatch.setattr("posenc.report.encodings.build_report", lambda *a, **k: "x" * 200_000)
    old = tmp_path / "index.html"
    old.write_text("<html>old</html>")
    _inject_full_disk(monkeypatch, 139_000)
    with pytest.raises(OSError, match="No space left"):
        write_report(tmp_path)
    monkeypatch.undo()
    assert old.read_text() == "<html>old</html>"
    assert [p.name for p in tmp_path.iterdir()] == ["index.html"]


def test_lab_report_html_is_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from posenc.lab import report as report_module

    (tmp_path / "report.html").write_text("<html>old</html>")
    ResultStore(tmp_path / "results.sqlite").close()
    monkeypatch.setattr(report_module, "render_page", lambda *a, **k: "<html>" + "x" * 10_000)
    _inject_full_disk(monkeypatch, 1000)
    with pytest.raises(OSError, match="No space left"):
        report_module.write_report([], tmp_path)
    monkeypatch.undo()
    assert (tmp_path / "report.html").read_text() == "<html>old</html>"


def test_identical_checkpoints_are_identical_bytes(tmp_path: Path) -> None:
    state = {"w": torch.arange(12.0).reshape(3, 4), "b": torch.ones(4)}
    a = save_checkpoint(state, tmp_path / "a", "key")
    b = save_checkpoint(state, tmp_path / "b", "key")
    assert a is not None and b is not None
    assert Path(a).read_bytes() == Path(b).read_bytes()
    assert torch.equal(torch.load(a, weights_only=True)["w"], state["w"])
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["key.pt"]


def test_a_checkpoint_on_a_full_disk_says_so_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's own file writer says "[enforce fail at inline_container.cc]"; through a file
    object the OSError (ENOSPC, with the file's name) comes out as it is."""
    _inject_full_disk(monkeypatch, 100)
    with pytest.raises(OSError, match="No space left on device") as caught:
        save_checkpoint({"w": torch.zeros(1000)}, tmp_path, "key")
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC and "key.pt" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_temporary_file_left_by_a_killed_write_is_removed(tmp_path: Path) -> None:
    """kill -9 between the write and the rename: the next write of the file removes it (its
    process is gone); a live process's temporary file is left alone."""
    script = (
        "import os, sys\n"
        "from posenc import _files\n"
        "tmp = _files.temp_name(__import__('pathlib').Path(sys.argv[1]))\n"
        "tmp.write_bytes(b'half a checkpoint')\n"
        "print(tmp, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    target = tmp_path / "key.pt"
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(target)], capture_output=True, text=True, env=env
    )
    assert done.returncode == -9
    stale = Path(done.stdout.strip())
    assert stale.exists()
    live = _files.temp_name(target)  # this process's: alive
    live = live.with_name(live.name.replace(f".{os.getpid()}.", f".{os.getppid()}.", 1))
    live.write_bytes(b"another process is writing")
    save_checkpoint({"w": torch.ones(2)}, tmp_path, "key")
    assert not stale.exists()
    assert live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["key.pt", live.name])


def test_an_export_on_a_full_disk_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lab export --csv`` over an existing file on a full disk: the old file stays."""
    store = tmp_path / "results.sqlite"
    ResultStore(store).close()
    csv = tmp_path / "rows.csv"
    csv.write_text("old,rows\n")
    _inject_full_disk(monkeypatch, 0)
    with ResultStore(store, readonly=True) as s, pytest.raises(OSError, match="No space left"):
        s.export_csv(csv)
    monkeypatch.undo()
    assert csv.read_text() == "old,rows\n"


def test_atomic_write_replaces_and_keeps_the_folder_clean(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    _files.atomic_write(path, "one")
    _files.atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]

    def fail_midway() -> None:
        with _files.atomic_open(path, "w") as f:
            f.write("three")
            raise RuntimeError("the writer failed")

    with pytest.raises(RuntimeError, match="the writer failed"):
        fail_midway()
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
