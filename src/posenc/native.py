"""C++ kernels built on first use (``torch.utils.cpp_extension``) and cached on disk.

Each kernel is one source file registering ``torch.ops.<name>``. It is compiled once per
machine with the system C++ compiler and ninja (what ``torch.compile`` on CPU needs too) for
this CPU (``-march=native``, so the build name carries a hash of the CPU's model and flags),
cached in ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``): seconds once, then
a load. A failed build is remembered and raised again as one clear RuntimeError; a build
killed midway does not block later ones (``_build_guard``).
"""

from __future__ import annotations

import hashlib
import platform
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


def cpu_tag() -> str:
    """A short hash of this CPU's model and flags: ``-march=native`` builds differ per CPU."""
    text = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            text += "".join(
                line for line in f if line.startswith(("model name", "flags", "Features"))
            )[:4096]
    except OSError:
        pass
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _native_ok() -> bool:
    return platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64")


@contextmanager
def _build_guard(build_dir: Path | None) -> Iterator[None]:
    """Hold this build directory for one ``cpp_extension.load`` across processes.

    torch marks a build in progress with a ``lock`` file and waits, without end, for it to go:
    a build killed before it removed the file (SIGKILL, OOM, a preempted job) made every later
    load hang. The guard is an ``flock``, released by the system when its holder dies, so a
    ``lock`` file found while holding it is stale and is removed. (No ``fcntl`` or no known
    directory: no guard.)
    """
    try:
        import fcntl
    except ImportError:  # not POSIX
        fcntl = None  # type: ignore[assignment]
    if fcntl is None or build_dir is None:
        yield
        return
    with open(build_dir / "posenc.lock", "a") as guard:  # released on close or exit
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
        except OSError:  # a file system without locks (some NFS): torch's lock file alone
            yield
            return
        (build_dir / "lock").unlink(missing_ok=True)  # stale: its builder held the guard
        yield


class NativeKernel:
    """One C++ source registering the operator namespace ``name``; ``load()`` builds it once."""

    def __init__(self, name: str, source: Path, what: str) -> None:
        self.name, self.source, self.what = name, source, what
        self.op: Any = None
        self.error: str | None = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """Build (first time) and load; returns ``torch.ops.<name>``.

        Raises: RuntimeError naming what is missing (a C++ compiler, ninja, setuptools) when the
        build fails.
        """
        with self._lock:
            if self.op is not None:
                return self.op
            if self.error is not None:
                raise RuntimeError(self.error)
            flags = ["-O3", "-fopenmp"] + (["-march=native"] if _native_ok() else [])
            try:
                # imports setuptools, which Python >= 3.12 venvs do not ship: a failed build too
                from torch.utils import cpp_extension

                name = f"{self.name}_{cpu_tag()}"
                where = getattr(cpp_extension, "_get_build_directory", None)  # torch's default
                build_dir = None if where is None else Path(where(name, False))
                with _build_guard(build_dir):
                    cpp_extension.load(
                        name=name,
                        sources=[str(self.source)],
                        extra_cflags=flags,
                        extra_ldflags=["-fopenmp"],
                        is_python_module=False,
                        verbose=False,
                        build_directory=None if build_dir is None else str(build_dir),
                    )
            except Exception as err:  # compiler, ninja, setuptools, headers or a symbol missing
                self.error = (
                    f"could not build posenc's {self.what} ({type(err).__name__}: {err}); "
                    "it needs a C++ compiler (g++), ninja and setuptools"
                )
                raise RuntimeError(self.error) from err
            self.op = getattr(torch.ops, self.name)
            return self.op

    def available(self) -> bool:
        """Whether the kernel loads (building it if needed); never raises."""
        try:
            self.load()
        except RuntimeError:
            return False
        return True
