"""RoPE against Hugging Face's apply_rotary_pos_emb (full and partial rotary)."""

from __future__ import annotations

import pytest
import torch

import posenc


@pytest.mark.anchor
@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_rope_equals_hugging_face_apply_rotary_pos_emb(partial: float) -> None:
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    D = 64
    rot = int(D * partial)
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(2, 4, 33, D, generator=g), torch.randn(2, 4, 33, D, generator=g)
    pos = torch.randint(0, 4096, (2, 33))
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    freqs = pos[..., None].double() * inv_freq  # (B, T, rot/2), float64 angles
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()
    hq_rot, hk_rot = llama.apply_rotary_pos_emb(q[..., :rot], k[..., :rot], cos, sin)
    hq = torch.cat([hq_rot, q[..., rot:]], dim=-1)  # Phi / GPT-NeoX partial rotary
    hk = torch.cat([hk_rot, k[..., rot:]], dim=-1)
    ours = posenc.build("rope", head_dim=D, partial=partial)
    oq, ok = ours.rotate(q, k, pos, pos)
    torch.testing.assert_close(oq, hq, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ok, hk, atol=1e-5, rtol=1e-5)
