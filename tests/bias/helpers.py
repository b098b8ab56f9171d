"""Helpers shared by the bias tests."""

from __future__ import annotations

import torch

import posenc


class BiasCall(torch.nn.Module):
    """forward = the wrapped encoding's bias, so ``functional_call`` can swap its parameters."""

    def __init__(self, pe: posenc.PositionalEncoding) -> None:
        super().__init__()
        self.pe = pe

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        bias = self.pe.bias(q_pos, k_pos)
        assert bias is not None
        return bias
