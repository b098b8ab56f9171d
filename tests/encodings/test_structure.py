"""The encodings' structure: every registered torch encoding a short class chain (at most 3
posenc classes in its MRO: the family class, at most one shared parent, ``PositionalEncoding``),
none built on the framework-neutral flow mixins."""

from __future__ import annotations

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
    assert not any(c.__module__ == "posenc.encodings.flows" for c in cls.__mro__), chain
