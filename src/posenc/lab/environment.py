"""Where a sweep ran: CPU model and vector flags, library versions, the posenc commit.

``record_environment`` adds this machine's description to the result store's ``meta`` table
(key ``environment``: a JSON list, one entry per distinct machine and software that ran runs
into the store); the report and ``posenc lab table`` print what the store recorded, so numbers
name the CPU they came from even when read elsewhere.
"""

from __future__ import annotations

import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from .._version import __version__
from ..kernels.native import _cpuinfo, cpu_has
from .store import ResultStore

#: Vector ISA flags worth naming (x86 and Arm); /proc/cpuinfo's others say little about speed
#: or rounding.
FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_bf16",
    "amx_tile",
    "asimd",
    "sve",
)
_KEY = "environment"


def environment() -> dict[str, str]:
    """This machine and its software, as display strings."""
    import torch

    model = _cpuinfo("model name")
    cpu = model[0].split(":", 1)[1].strip() if model else platform.processor() or "unknown"
    flags = [f for f in FLAGS if cpu_has(f)]
    return {
        "cpu": f"{cpu} ({platform.machine()})",
        "cpu flags": ", ".join(flags) or "none of " + ", ".join(FLAGS),
        "aten cpu capability": torch.backends.cpu.get_cpu_capability(),
        "posenc": f"{__version__}, commit {posenc_commit()}",
        "python": platform.python_version(),
        **{lib: _version(lib) for lib in ("torch", "numpy", "matplotlib")},
    }


def posenc_commit() -> str:
    """``git describe --always --dirty`` of the checkout posenc runs from, or why there is none."""
    src = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return out.stdout.strip()


def _version(lib: str) -> str:
    try:
        return metadata.version(lib)
    except metadata.PackageNotFoundError:
        return "not installed"


def record_environment(store: ResultStore, env: dict[str, str] | None = None) -> None:
    """Add ``env`` (default: this machine's) to the store's recorded environments, once."""
    env = environment() if env is None else env
    known = stored_environments(store)
    if env not in known:
        store.set_meta(_KEY, json.dumps([*known, env]))


def stored_environments(store: ResultStore) -> list[dict[str, str]]:
    """The environments recorded in the store ([] for a store written before they were)."""
    found = store.conn.execute("SELECT value FROM meta WHERE key = ?", (_KEY,)).fetchone()
    return [] if found is None else list(json.loads(found[0]))
