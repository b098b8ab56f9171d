"""TinyTransformer's size arguments are checked up front, with errors naming the argument."""

from __future__ import annotations

from typing import Any

import pytest

from posenc.models import TinyTransformer


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"d_model": 30, "n_heads": 4},
            ValueError,
            "d_model must be divisible by n_heads, got 30 and 4",
        ),
        ({"n_heads": 0}, ValueError, "n_heads must be an integer >= 1, got 0"),
        ({"d_model": 0}, ValueError, "d_model must be an integer >= 1, got 0"),
        ({"max_len": 0}, ValueError, "max_len must be an integer >= 1, got 0"),
        (
            {"pe": "sinusoidal", "max_len": -5},
            ValueError,
            "max_len must be an integer >= 1, got -5",
        ),
        ({"d_ff": 0}, ValueError, "d_ff must be an integer >= 1, got 0"),
        ({"d_ff": -3}, ValueError, "d_ff must be an integer >= 1, got -3"),
        ({"n_heads": 2.0}, TypeError, "n_heads must be an int, got float"),
    ],
)
def test_bad_sizes_raise_naming_the_argument(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        TinyTransformer(**({"vocab_size": 10, "pe": "rope"} | kwargs))


def test_d_ff_given_is_used_and_none_means_four_times_d_model() -> None:
    widths = [
        TinyTransformer(vocab_size=10, pe="rope", d_model=32, d_ff=d_ff).blocks[0].mlp[0]
        for d_ff in (None, 8)
    ]
    assert [w.out_features for w in widths] == [128, 8]
