"""A C++ kernel's first build says so once in the log (the pause is never a surprise); a load of
an existing build says nothing. The compiler is replaced by a stub: no C++ is built here."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from torch.utils import cpp_extension

from posenc.kernels import native


def _kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[native.NativeKernel, Path]:
    source = tmp_path / "k.cpp"
    source.write_text("// kernel\n")
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    builds: list[str] = []

    def load(name: str, **kwargs: Any) -> None:  # the stub compiler: records the build
        builds.append(name)

    monkeypatch.setattr(cpp_extension, "load", load)
    monkeypatch.setattr(cpp_extension, "_get_build_directory", lambda name, verbose: build_dir)
    return native.NativeKernel("posenc_test_notice", source, "test kernel"), build_dir


def test_first_build_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kernel, _ = _kernel(tmp_path, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="posenc.kernels.native"):
        kernel.load()
        kernel.load()  # loaded: no second build, no second notice
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1, notices
    assert "building the test kernel for this CPU" in notices[0]
    assert "once per machine" in notices[0]


def test_loading_an_existing_build_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kernel, build_dir = _kernel(tmp_path, monkeypatch)
    built = build_dir / f"{kernel.build_name()}{native._lib_ext()}"
    built.write_bytes(b"")  # built by an earlier process
    with caplog.at_level(logging.WARNING, logger="posenc.kernels.native"):
        kernel.load()
    assert caplog.records == []
