"""Helpers shared by the bias tests."""

from __future__ import annotations

import numpy as np
import torch

import posenc
from tests.reference import bias as ref


class BiasCall(torch.nn.Module):
    """forward = the wrapped encoding's bias, so ``functional_call`` can swap its parameters."""

    def __init__(self, pe: posenc.PositionalEncoding) -> None:
        super().__init__()
        self.pe = pe

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        bias = self.pe.bias(q_pos, k_pos)
        assert bias is not None
        return bias


def fire_reference(pe: torch.nn.Module, q_pos: torch.Tensor, k_pos: torch.Tensor) -> np.ndarray:
    """The float64 paper-formula FIRE bias (``tests.reference.bias.fire``) with pe's weights."""
    w = {n: p.detach().double().numpy() for n, p in pe.named_parameters()}
    threshold = abs(float(w["threshold_scale"]) * pe.init_threshold)
    return ref.fire(
        q_pos.numpy(), k_pos.numpy(), float(w["c"]), threshold, pe.eps,
        w["mlp_in.weight"], w["mlp_in.bias"], w["mlp_out.weight"], w["mlp_out.bias"],
        bidirectional=pe.bidirectional,
    )  # fmt: skip
