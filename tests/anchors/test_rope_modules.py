"""Interleaved RoPE against torchtune's RotaryPositionalEmbeddings."""

from __future__ import annotations

import pytest
import torch

import posenc
from tests.reference.rotary import rope as ref_rope


@pytest.mark.anchor
def test_rope_interleaved_equals_torchtune_with_per_row_positions() -> None:
    """torchtune's RotaryPositionalEmbeddings (interleaved pairs, Meta Llama) with input_pos
    (B, T) per row; x in torchtune's (B, T, H, D)."""
    tt = pytest.importorskip("torchtune.modules")
    D, T = 16, 6
    theirs = tt.RotaryPositionalEmbeddings(dim=D, max_seq_len=4096)
    q = torch.randn(2, 3, T, D)
    pos = torch.tensor([[0, 1, 2, 3, 4, 5], [4000, 17, 0, 300, 301, 302]])
    want = theirs(q.transpose(1, 2), input_pos=pos).transpose(1, 2)
    got, _ = posenc.build("rope", head_dim=D, layout="interleaved").rotate(q, q, pos, pos)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # theirs: float32 angles
    exact = torch.from_numpy(ref_rope(q.double().numpy(), pos.numpy(), layout="interleaved"))
    torch.testing.assert_close(got.double(), exact, rtol=1e-6, atol=1e-6)
