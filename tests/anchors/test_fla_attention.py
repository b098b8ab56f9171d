"""Forgetting, stick-breaking and PaTH attention against fla-core's naive references
(``fla/ops/*/naive.py``, loaded by path: ``tests.anchors._fla``). fla's FoX and PaTH references
compute in float32, so those comparisons hold to float32's rounding; its stick-breaking
reference keeps float64 inputs in float64. fla lays tensors out (B, T, H, D)."""

from __future__ import annotations

import pytest
import torch

from posenc import functional as PF
from tests.anchors._fla import fla_naive
from tests.functional._data_position import inputs

pytestmark = pytest.mark.anchor
SHAPES = [(2, 4, 2, 37, 16), (1, 3, 3, 64, 8), (1, 2, 1, 5, 4)]  # (B, H, Hkv, T, D)


def fla_layout(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2)  # (B, H, T, ...) <-> (B, T, H, ...)


def arrays(shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    return {n: torch.from_numpy(x) for n, x in inputs(*shape).items()}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("block", [None, 8])
def test_forgetting_matches_fla(shape: tuple[int, ...], block: int | None) -> None:
    naive = fla_naive("forgetting_attn").naive_forgetting_attn
    a = arrays(shape)
    theirs = naive(*(fla_layout(a[n]) for n in ("q", "k", "v", "log_f")))
    ours = PF.forgetting_attention(a["q"], a["k"], a["v"], a["log_f"], block_size=block)
    torch.testing.assert_close(ours, fla_layout(theirs).double(), atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_stick_breaking_matches_fla(
    shape: tuple[int, ...], attend_current: bool, scale: float | None
) -> None:
    naive = fla_naive("stickbreaking_attn").naive_stickbreaking_attn
    a = arrays(shape)
    o, rem = naive(
        *(fla_layout(a[n]) for n in ("q", "k", "v")), scale=scale, attend_current=attend_current
    )
    ours, our_rem = PF.stick_breaking_attention(
        a["q"], a["k"], a["v"], scale=scale, attend_current=attend_current, block_size=8
    )
    torch.testing.assert_close(ours, fla_layout(o), atol=1e-13, rtol=1e-13)
    torch.testing.assert_close(our_rem, rem.transpose(1, 2), atol=1e-13, rtol=1e-13)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gated", [False, True])
def test_path_matches_fla(shape: tuple[int, ...], gated: bool) -> None:
    """fla multiplies the gate by the scale with the scores, (q·k + c_i - c_j)·scale; ours (and
    FoX's) adds it unscaled, so fla is given log_f / scale."""
    naive = fla_naive("path_attn").naive_path_attn
    a = arrays(shape)
    scale = shape[-1] ** -0.5
    log_f = a["log_f"] if gated else torch.zeros_like(a["log_f"])
    theirs = naive(
        *(fla_layout(a[n]) for n in ("q", "k", "v", "w", "beta")),
        fla_layout(log_f / scale),
        scale=scale,
        chunk_size=16,
    )
    ours = PF.path_attention(
        a["q"], a["k"], a["v"], a["w"], a["beta"], log_f if gated else None, block_size=8
    )
    torch.testing.assert_close(ours, fla_layout(theirs).double(), atol=2e-6, rtol=2e-6)
