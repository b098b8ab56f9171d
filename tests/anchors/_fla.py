"""fla-core's naive (pure torch + einops) attention references without importing the ``fla``
package: its ``__init__`` imports Triton kernels. Each ``naive.py`` is loaded from the installed
files as it is (fla's own code) under a private module name; nothing is registered as ``fla``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

_PREFIX = "_posenc_fla_naive_"


def fla_naive(op: str) -> ModuleType:
    """``fla.ops.<op>.naive`` (e.g. "forgetting_attn"), loaded from the installed fla-core's
    files; the test is skipped when fla-core is not installed (test extra)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or spec.origin is None:
        pytest.skip("fla-core is not installed (test extra)")
    name = _PREFIX + op
    if name not in sys.modules:
        path = Path(spec.origin).parent / "ops" / op / "naive.py"
        file_spec = importlib.util.spec_from_file_location(name, path)
        if file_spec is None or file_spec.loader is None:  # pragma: no cover
            pytest.skip(f"fla-core has no {path}")
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[name] = module
        file_spec.loader.exec_module(module)
    return sys.modules[name]
