"""Intervals over seeds: the lab's statistics (``posenc.lab.stats``: percentile bootstrap of the
mean, the same draws on every machine), under the names the extension lab uses."""

from __future__ import annotations

from ..lab.stats import BOOTSTRAP_SEED, Interval, bootstrap_interval
from ..lab.stats import paired_difference as paired

__all__ = ["BOOTSTRAP_SEED", "Interval", "bootstrap_interval", "paired"]
