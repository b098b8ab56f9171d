"""C++ kernels built on first use (``torch.utils.cpp_extension``) and cached on disk.

Each kernel is one source file registering ``torch.ops.<name>``. It is compiled once per
machine with the system C++ compiler and ninja (what ``torch.compile`` on CPU needs too) and
cached in ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``): seconds once (said
in the log, at WARNING level on logger ``posenc.kernels.native``, so the pause is no surprise),
then a load. A failed build is remembered and raised again as one clear RuntimeError; a build
killed midway does not block later ones (``_build_guard``).

The target ISA follows ATen's CPU capability (``build_isa``): by default this CPU's own
(``-march=native``); ``ATEN_CPU_CAPABILITY=avx2`` builds for AVX2 (``-march=x86-64-v3``) and
``=default`` for the compiler's baseline target, so the AVX2 and plain paths can be run and
tested on any newer CPU. The build name carries the ISA, a hash of the CPU's model and flags (a
native build made on one CPU is never loaded on another) and a hash of the sources with the
headers beside them.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)


def _cpuinfo(*keys: str) -> list[str]:
    """The lines of /proc/cpuinfo starting with one of ``keys`` ([] where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return [line for line in f if line.startswith(keys)]
    except OSError:
        return []


def cpu_tag() -> str:
    """A short hash of this CPU's model and flags: ``-march=native`` builds differ per CPU."""
    text = platform.machine() + "".join(_cpuinfo("model name", "flags", "Features"))[:4096]
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def cpu_has(flag: str) -> bool:
    """Whether /proc/cpuinfo lists ``flag`` (e.g. "avx2", "avx512f") for this CPU."""
    lines = _cpuinfo("flags", "Features")
    return bool(lines) and flag in lines[0].split(":", 1)[1].split()


def cpu_model() -> str:
    """This CPU's model name from /proc/cpuinfo, else ``platform.processor()`` (maybe "")."""
    model = _cpuinfo("model name")
    return model[0].split(":", 1)[1].strip() if model else platform.processor()


def build_isa() -> str:
    """The ISA posenc's C++ kernels are built for: "default" (the compiler's baseline: plain
    loops on x86, NEON on AArch64), "avx2", or "native" (this CPU's best).

    It follows ``torch.backends.cpu.get_cpu_capability()``, which ``ATEN_CPU_CAPABILITY``
    lowers: DEFAULT gives "default"; AVX2 on a CPU that also has AVX-512 gives "avx2"; anything
    else gives "native" (torch reports a requested AVX512 even on a CPU without it, which
    ``-march=native`` cannot exceed).
    """
    cap = torch.backends.cpu.get_cpu_capability().lower()
    x86 = platform.machine() in ("x86_64", "AMD64")
    if cap == "default" or not (x86 or platform.machine() in ("aarch64", "arm64")):
        return "default"
    if x86 and cap == "avx2" and cpu_has("avx512f"):
        return "avx2"
    return "native"


#: Compiler flags per ``build_isa()`` answer ("default": none). x86-64-v3: AVX2, FMA, F16C,
#: BMI2 (Haswell, Zen 1 and later).
ISA_FLAGS = {"native": ["-march=native"], "avx2": ["-march=x86-64-v3"]}


def isa_flags(isa: str) -> list[str]:
    """Compiler flags for ``build_isa()``'s answer."""
    return list(ISA_FLAGS.get(isa, []))


def _sources_tag(source: Path) -> str:
    """A short hash of the source and the headers beside it (torch hashes the source alone)."""
    h = hashlib.sha1()
    for path in [source, *sorted(source.parent.glob("*.h"))]:
        h.update(path.read_bytes() if path.exists() else b"")
    return h.hexdigest()[:8]


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


def _lib_ext() -> str:
    """The built library's suffix (torch's ``LIB_EXT``: ".so", ".pyd" on Windows)."""
    return ".pyd" if platform.system() == "Windows" else ".so"


class NativeKernel:
    """One C++ source registering the operator namespace ``name``; ``load()`` builds it once."""

    def __init__(self, name: str, source: Path, what: str) -> None:
        self.name, self.source, self.what = name, source, what
        self.op: Any = None
        self.error: str | None = None
        self.warned = False  # the fallback was said
        self._lock = threading.Lock()

    def build_name(self) -> str:
        """The extension's name: kernel, ISA, CPU and sources (one build per combination)."""
        return f"{self.name}_{build_isa()}_{cpu_tag()}_{_sources_tag(self.source)}"

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
            isa = build_isa()
            flags = ["-O3", "-fopenmp", *isa_flags(isa)]
            try:
                # imports setuptools, which Python >= 3.12 venvs do not ship: a failed build too
                from torch.utils import cpp_extension

                name = self.build_name()
                where = getattr(cpp_extension, "_get_build_directory", None)  # torch's default
                build_dir = None if where is None else Path(where(name, False))
                built = build_dir is not None and (build_dir / f"{name}{_lib_ext()}").exists()
                if not built:
                    log.warning(
                        "posenc: building the %s for this CPU (%s; once per machine, "
                        "seconds), cached in %s",
                        self.what,
                        isa,
                        build_dir or "torch's extensions directory",
                    )
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

    def available(self, fallback: str | None = None) -> bool:
        """Whether the kernel loads (building it if needed); never raises. ``fallback``: what
        runs instead, said once in a warning when it cannot load."""
        try:
            self.load()
        except RuntimeError:
            if fallback is not None and not self.warned:
                self.warned = True
                warnings.warn(f"{self.error}; {fallback}", stacklevel=5)
            return False
        return True
