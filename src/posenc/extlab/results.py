"""Stored rows read back per seed: the numbers the findings, tables and figures compare.

Every reader returns ``{seed: value}`` so that comparisons pair seeds (the same seed's model,
data and evaluation text on both sides). ``base`` is the unchanged RoPE model at L.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .store import Row

Key = tuple[str, str, str, int, int]  # encoding, method, variant, factor, length


class Results:
    """Index of stored rows by (encoding, method, variant, factor, length)."""

    def __init__(self, rows: list[Row]) -> None:
        self._rows: dict[tuple[Key, str], dict[int, list[Row]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for r in rows:
            key = (r.encoding, r.method, r.variant, r.factor, r.length)
            self._rows[key, r.metric][r.seed].append(r)

    def loss(self, key: Key) -> dict[int, float]:
        """Mean next-token loss over the whole window, per seed."""
        return {s: rows[0].value for s, rows in self._rows.get((key, "loss"), {}).items()}

    def passkey(self, key: Key, seeds: set[int] | None = None) -> dict[int, float]:
        """Passkey accuracy averaged over depths, per seed (only ``seeds`` if given)."""
        found = self._rows.get((key, "passkey"), {})
        return {
            s: float(np.mean([r.value for r in rows]))
            for s, rows in found.items()
            if seeds is None or s in seeds
        }

    def passkey_grid(self, key: Key) -> dict[float, dict[int, float]]:
        """Accuracy by depth, per seed."""
        grid: dict[float, dict[int, float]] = defaultdict(dict)
        for s, rows in self._rows.get((key, "passkey"), {}).items():
            for r in rows:
                assert r.depth is not None
                grid[r.depth][s] = r.value
        return dict(grid)

    def buckets(self, key: Key) -> dict[tuple[int, int], dict[int, float]]:
        """Loss by bucket (start, stop), per seed."""
        out: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
        for s, rows in self._rows.get((key, "bucket"), {}).items():
            for r in rows:
                assert r.start is not None and r.stop is not None
                out[r.start, r.stop][s] = r.value
        return dict(sorted(out.items()))

    def span(self, key: Key, start: int, stop: int) -> dict[int, float]:
        """Loss over prediction positions start..stop-1 per seed: the mean of the buckets
        inside the span, weighted by their widths (empty when no bucket lies inside)."""
        inside = {b: v for b, v in self.buckets(key).items() if start <= b[0] and b[1] <= stop}
        seeds = set.intersection(*(set(v) for v in inside.values())) if inside else set()
        return {
            s: float(
                sum((b[1] - b[0]) * v[s] for b, v in inside.items())
                / sum(b[1] - b[0] for b in inside)
            )
            for s in seeds
        }
