"""JAX tests: compile flags, and run after every other test directory.

The lowest XLA backend optimisation level compiles the many tiny test programs ~30% faster
(set before JAX initialises its CPU backend; an explicit XLA_FLAGS wins). Once JAX has started
its thread pools, a later ``os.fork`` (Ray, subprocesses in other tests) warns of deadlocks,
so these tests go last.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    ours = [item for item in items if HERE in Path(item.fspath).parents]
    others = [item for item in items if HERE not in Path(item.fspath).parents]
    items[:] = others + ours
