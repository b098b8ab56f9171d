"""Next-token sampling written from the definitions, float64 NumPy, one row at a time:
temperature scaling, top-k (Fan et al. 2018, arXiv:1805.04833) and nucleus (top-p) sampling
(Holtzman et al. 2020, arXiv:1904.09751, sec. 3.1: the smallest set of most probable tokens
whose total probability is at least p)."""

from __future__ import annotations

import numpy as np


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z[np.isfinite(z)].max())
    return e / e.sum()


def allowed(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None):
    """(probabilities (V,) renormalised over the kept tokens, kept (V,) bool) of one row."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    keep = np.ones(z.shape, dtype=bool)
    if top_k is not None:
        order = sorted(range(len(z)), key=lambda i: -z[i])
        keep[:] = False
        keep[order[: min(top_k, len(z))]] = True
    if top_p is not None:
        p = softmax(np.where(keep, z, -np.inf))
        nucleus, total = [], 0.0
        for i in sorted(range(len(z)), key=lambda i: -p[i]):
            if total >= top_p:
                break
            nucleus.append(i)
            total += p[i]
        keep[:] = False
        keep[nucleus] = True
    return softmax(np.where(keep, z, -np.inf)), keep
