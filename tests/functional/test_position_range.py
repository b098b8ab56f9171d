"""Each encoding's supported position range: inside it the numbers hold (measured here), outside
it a ValueError, never a silently wrong number (``posenc._validate.check_position_range``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
import posenc.functional as PF
from posenc._validate import ANGLE_POSITION_LIMIT, OFFSET_POSITION_LIMIT


def _rope_scores(shift: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE scores q·k of N(0, 1) heads of 64 at positions 0..31 and shifted by ``shift``."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 1, 32, 64, generator=g, dtype=torch.float64)
    inv = torch.as_tensor(PF.rope_inv_freq(64))

    def scores(pos: torch.Tensor) -> torch.Tensor:
        cos, sin = PF.rope_cos_sin(pos, inv)
        return PF.apply_rope(q, cos, sin) @ PF.apply_rope(k, cos, sin).transpose(-1, -2)

    pos = torch.arange(32)
    return scores(pos), scores(pos + shift)


def test_rope_scores_hold_up_to_the_limit() -> None:
    """A shift leaves RoPE scores unchanged in exact arithmetic; in float64 they move by
    5e-4 at most at a 2^40 shift (scores ~8), 3e-6 at 2^32."""
    for shift, atol in ((2**32, 1e-5), (ANGLE_POSITION_LIMIT - 32, 2e-3)):
        plain, shifted = _rope_scores(shift)
        torch.testing.assert_close(shifted, plain, rtol=0, atol=atol)


@pytest.mark.parametrize("shift", [2**53, 2**62])
def test_rope_positions_past_the_limit_are_refused(shift: int) -> None:
    with pytest.raises(ValueError, match=r"must lie in \[-2\*\*40, 2\*\*40\]"):
        _rope_scores(shift)
    pe = posenc.build("rope", head_dim=16)
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match="2\\*\\*40"):
        pe.rotate(q, q, torch.arange(4) + shift, torch.arange(4) + shift)


def test_sinusoidal_rows_past_the_limit_are_refused() -> None:
    """At 2^62 and 2^62 + 1 the rows were identical: refused (torch and NumPy)."""
    for pos in (torch.tensor([2**62, 2**62 + 1]), np.array([2**62, 2**62 + 1])):
        with pytest.raises(ValueError, match="2\\*\\*40"):
            PF.sinusoidal_table(pos, 8)
    inside = PF.sinusoidal_table(np.array([ANGLE_POSITION_LIMIT - 1, ANGLE_POSITION_LIMIT]), 8)
    assert not np.array_equal(inside[0], inside[1])


def test_alibi_offsets_never_overflow() -> None:
    """2^62 - (-2^62) wraps int64 to -2^63: the bias came out +3.6e16 (a reward for distance)."""
    pe = posenc.build("alibi", n_heads=1)
    with pytest.raises(ValueError, match="q_pos must lie in"):
        pe.bias(torch.tensor([2**62]), torch.tensor([-(2**62)]))
    slopes = PF.alibi_slopes(1)
    edge = PF.alibi_bias(
        np.array([OFFSET_POSITION_LIMIT]), np.array([-OFFSET_POSITION_LIMIT]), slopes
    )
    assert edge[0, 0, 0] == -slopes[0] * 2.0**53  # exact: 2^53 is a float64 integer


@pytest.mark.parametrize("name", ["alibi", "kerple", "fire", "t5"])
def test_every_relative_bias_refuses_positions_past_its_range(name: str) -> None:
    pe = posenc.build(name, n_heads=2)
    with pytest.raises(ValueError, match="must lie in"):
        pe.bias(torch.tensor([2**60]), torch.tensor([0]))


def test_traced_and_device_positions_are_not_read() -> None:
    """The check reads values only where that is free: not under torch.compile tracing (see
    ``values_checked``); a meta tensor (no values) passes through."""
    pos = torch.empty(4, dtype=torch.long, device="meta")
    from posenc._validate import check_position_range

    check_position_range(pos, ANGLE_POSITION_LIMIT)
