"""timm's layer modules without importing the ``timm`` package: its ``__init__`` imports
torchvision, which has no build for the CPU torch the tests pin. The module files are loaded
as they are (timm's own code) under a private package name; nothing is registered as ``timm``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

_PACKAGE = "_posenc_timm_layers"


def timm_layer(module: str) -> Any:
    """``timm.layers.<module>`` (e.g. "pos_embed"), loaded from the installed timm's files;
    the test is skipped when timm is not installed."""
    spec = importlib.util.find_spec("timm")
    if spec is None or spec.origin is None:
        pytest.skip("timm is not installed (test extra)")
    if _PACKAGE not in sys.modules:
        package = types.ModuleType(_PACKAGE)
        package.__path__ = [str(Path(spec.origin).parent / "layers")]
        sys.modules[_PACKAGE] = package
    return importlib.import_module(f"{_PACKAGE}.{module}")
