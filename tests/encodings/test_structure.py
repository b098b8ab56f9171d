"""The encodings' structure: every registered torch encoding a short class chain (at most 3
posenc classes in its MRO: the family class, at most one shared parent, ``PositionalEncoding``),
and ``Any`` kept within issue 34's budget where the types are known."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import posenc
from posenc.encodings.base import PositionalEncoding
from posenc.registry import info


def _posenc_classes(cls: type) -> list[str]:
    return [c.__qualname__ for c in cls.__mro__ if c.__module__.startswith("posenc")]


@pytest.mark.parametrize("name", posenc.names())
def test_at_most_three_posenc_classes_in_the_mro(name: str) -> None:
    cls = info(name).cls
    chain = _posenc_classes(cls)
    assert issubclass(cls, PositionalEncoding)
    assert len(chain) <= 3, f"{name}: {' > '.join(chain)}"


def test_any_stays_within_its_budget_in_encodings_attention_and_models() -> None:
    """At most 40 words ``Any`` in the torch encodings, attention and models together: their
    hooks and layers take tensors and typed states (array-API code in functional/ may keep it)."""
    root = Path(posenc.__file__).parent
    files = [f for d in ("encodings", "attention", "models") for f in (root / d).rglob("*.py")]
    counts = {f.name: len(re.findall(r"\bAny\b", f.read_text())) for f in files}
    assert files and sum(counts.values()) <= 40, {n: c for n, c in counts.items() if c}
