"""Shared fixtures: deterministic seeds and float64 defaults for reference comparisons."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator for tests that draw their own data."""
    return torch.Generator().manual_seed(1234)
