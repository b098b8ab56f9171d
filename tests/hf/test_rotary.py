"""The pieces of posenc.hf.patch: embedding forms (expand/compact), the form detection and the
rotation check, which refuse what they do not recognise instead of guessing."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import posenc
from posenc.hf import rotate
from posenc.hf.rotary import FORMS, RotaryEmbedding, compact, detect_form, expand


@pytest.mark.parametrize("form", FORMS)
def test_compact_inverts_expand(form: Any) -> None:
    cos, sin = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    back = compact(expand(cos, sin, form), form)
    assert torch.equal(back[0], cos) and torch.equal(back[1], sin)


class _Rotary(torch.nn.Module):
    """A stand-in transformers rotary module returning cat(c, c) shifted by ``offset``."""

    def __init__(self, offset: float = 0.0) -> None:
        super().__init__()
        self.pe, self.offset = posenc.build("rope", head_dim=8), offset

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> Any:
        cos, sin = expand(*self.pe.cos_sin(position_ids), "cat")
        return cos + self.offset, sin


def test_detect_form_reads_the_form_and_refuses_an_unknown_one() -> None:
    ropes = {None: posenc.build("rope", head_dim=8)}
    assert detect_form(_Rotary(), ropes) == "cat"
    with pytest.raises(ValueError, match="_Rotary returns position embeddings in a form posenc"):
        detect_form(_Rotary(offset=0.5), ropes)


def test_rotary_embedding_refuses_an_unknown_layer_type() -> None:
    rotary = RotaryEmbedding({"full_attention": posenc.build("rope", head_dim=8)}, "cat")
    cos, _ = rotary(torch.zeros(1, 3, 2), torch.arange(3)[None], "full_attention")
    assert cos.shape == (1, 3, 8)
    with pytest.raises(ValueError, match=r"layer_type must be one of \['full_attention'\]"):
        rotary(torch.zeros(1, 3, 2), torch.arange(3)[None], "sliding_attention")


def _half(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
    """Llama's apply_rotary_pos_emb (the reference), written out."""

    def rot(x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)

    c, s = cos[:, None], sin[:, None]
    return q * c + rot(q) * s, k * c + rot(k) * s


def test_verified_picks_the_matching_layout_and_refuses_other_rotations() -> None:
    embeddings = expand(*posenc.build("rope", head_dim=8).cos_sin(torch.arange(5)[None]), "cat")
    args = ("apply_rotary_pos_emb", _half, embeddings, "cat")
    ours = rotate.verified(*args, "interleaved", "eager")  # the layout hint is corrected
    q, k = torch.randn(1, 2, 5, 8), torch.randn(1, 1, 5, 8)
    torch.testing.assert_close(ours(q, k, *embeddings), _half(q, k, *embeddings))

    def scaled(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
        a, b = _half(q, k, cos, sin)
        return 2 * a, b  # not a rotation

    with pytest.raises(ValueError, match="patch with kernel=None to keep the model's own"):
        rotate.verified("apply_rotary_pos_emb", scaled, embeddings, "cat", "half", "eager")


def test_patch_refuses_m_rope_without_the_modules_sections() -> None:
    """rope_from_hf reads Qwen-VL configs as M-RoPE (3-D position ids); patch replaces M-RoPE
    from a rotary module's own mrope_section (test_patch_grid.py) and refuses it without one."""
    from types import SimpleNamespace

    from posenc.hf.patch import _one_axis

    mrope = posenc.build("mrope", head_dim=16)
    with pytest.raises(ValueError, match=r"'qwen2_vl' reads as 'mrope'.*no mrope_section"):
        _one_axis(mrope, SimpleNamespace(model_type="qwen2_vl"))
    rope = posenc.build("rope", head_dim=16)
    assert _one_axis(rope, SimpleNamespace(model_type="llama")) is rope
