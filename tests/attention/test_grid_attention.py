"""Grid positions (T, A) | (B, T, A) through Attention, KVCache and TinyTransformer: cached
decoding, offsets, packing and padding as for sequences; grid_positions and mrope_positions."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import posenc
from posenc.models import KVCache

GRIDS = posenc.names(axes=2) + posenc.names(axes=3)
V = 11


def _model(name: str, **kw: Any) -> posenc.TinyTransformer:
    torch.manual_seed(0)
    config = {"grid": (6, 6)} if name == "learned_2d" else {}
    return posenc.TinyTransformer(
        vocab_size=V, pe=name, d_model=24, n_heads=2, n_layers=2, pe_config=config, **kw
    ).double()


def _grid(name: str, rows: int = 3, cols: int = 4, offset: int = 0) -> torch.Tensor:
    A = posenc.build_for_model(name, dim=24, n_heads=2, max_len=8).capabilities.axes
    return posenc.grid_positions(*([2] * (A - 2)), rows, cols, offset=offset)  # (T, A)


def test_every_grid_encoding_is_listed_by_axes() -> None:
    assert set(GRIDS) == {"rope_2d", "rope_3d", "rope_mixed", "mrope", "sincos_2d", "learned_2d"}
    assert not set(GRIDS) & set(posenc.names(axes=1))


@pytest.mark.parametrize("name", GRIDS)
def test_cached_decoding_equals_one_forward(name: str) -> None:
    model = _model(name).eval()
    pos = _grid(name)  # (T, A)
    T = len(pos)
    pos = torch.stack([pos, pos.flip(0)])  # (B, T, A): rows at different cells
    idx = torch.randint(0, V, (2, T))
    with torch.no_grad():
        full = model(idx, pos)
        cache = model.new_cache()
        steps = [model(idx[:, :5], pos[:, :5], cache=cache)]
        steps += [model(idx[:, t : t + 1], pos[:, t : t + 1], cache=cache) for t in range(5, T)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-12, atol=1e-12)
    assert cache[0].key_positions(pos[:, :0]).shape == (2, T, pos.shape[-1])


@pytest.mark.parametrize("name", ["rope_2d", "rope_mixed", "mrope"])
def test_rotary_grid_attention_sees_offsets_only(name: str) -> None:
    model = _model(name).eval()
    idx = torch.randint(0, V, (1, len(_grid(name))))
    with torch.no_grad():
        at_origin = model(idx, _grid(name))
        shifted = model(idx, _grid(name, offset=17))
    torch.testing.assert_close(shifted, at_origin, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name", GRIDS)
def test_packed_images_equal_separate_forwards(name: str) -> None:
    """Two images in one row, each at its own grid positions, attend within their segment."""
    model = _model(name, causal=False).eval()
    a, b = _grid(name, 2, 3), _grid(name, 3, 2)
    idx = torch.randint(0, V, (1, len(a) + len(b)))
    segments = torch.tensor([[0] * len(a) + [1] * len(b)])
    with torch.no_grad():
        packed = model(idx, torch.cat([a, b])[None], segment_ids=segments)
        first, second = model(idx[:, : len(a)], a), model(idx[:, len(a) :], b)
    torch.testing.assert_close(packed, torch.cat([first, second], 1), rtol=1e-12, atol=1e-12)


def test_left_padding_leaves_real_tokens_unchanged() -> None:
    model = _model("rope_2d").eval()
    pos = _grid("rope_2d")
    idx = torch.randint(0, V, (1, len(pos)))
    padded_idx = torch.cat([torch.zeros(1, 3, dtype=torch.long), idx], 1)
    padded_pos = torch.cat([torch.zeros(3, 2, dtype=torch.long), pos])[None]
    mask = torch.tensor([[False] * 3 + [True] * len(pos)])
    with torch.no_grad():
        want = model(idx, pos)
        got = model(padded_idx, padded_pos, padding_mask=mask)[:, 3:]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_grid_encodings_need_their_positions() -> None:
    attn = posenc.Attention(16, 2, pe=posenc.build("rope_2d", head_dim=8), causal=True)
    x = torch.randn(2, 6, 16)
    with pytest.raises(ValueError, match=r"reads 2 position axes: pass pos of shape \(T, 2\)"):
        attn(x)
    with pytest.raises(ValueError, match=r"pos must have shape \(T, 2\) or \(B, T, 2\)"):
        attn(x, torch.arange(6))
    with pytest.raises(ValueError, match=r"pos must have shape \(6, 2\) or \(2, 6, 2\)"):
        attn(x, posenc.grid_positions(1, 5))
    rope = posenc.Attention(16, 2, pe=posenc.build("rope", head_dim=8), causal=True)
    with pytest.raises(ValueError, match=r"\(B, T, A\) need an encoding that takes A axes"):
        rope(x, posenc.grid_positions(2, 3)[None].expand(2, 6, 2))


def test_a_cache_keeps_one_kind_of_positions() -> None:
    cache = KVCache()
    attn = posenc.Attention(16, 2, pe=posenc.build("rope_2d", head_dim=8), causal=True)
    x = torch.randn(1, 3, 16)
    attn(x, posenc.grid_positions(1, 3), cache=cache)
    one_d = posenc.Attention(16, 2, pe=posenc.build("rope", head_dim=8), causal=True)
    with pytest.raises(ValueError, match=r"KVCache holds positions \(B, L, 2\); new positions"):
        one_d(x, cache=cache)


def test_grid_tables_are_made_once_per_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model("rope_2d").eval()
    calls = [0]
    original = type(model.pe).angles

    def counting(self: Any, pos: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        return original(self, pos)

    monkeypatch.setattr(type(model.pe), "angles", counting)
    with torch.no_grad():
        model(torch.randint(0, V, (2, 12)), _grid("rope_2d"))
    assert calls[0] == 1  # two layers, q and k: one table


def test_grid_positions() -> None:
    assert posenc.grid_positions(2, 3).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    video = posenc.grid_positions(2, 1, 2, offset=(5, 0, 1))
    assert video.tolist() == [[5, 0, 1], [5, 0, 2], [6, 0, 1], [6, 0, 2]]
    with pytest.raises(ValueError, match="at least one axis"):
        posenc.grid_positions()
    with pytest.raises(ValueError, match="each grid size must be an integer >= 1"):
        posenc.grid_positions(2, 0)
    with pytest.raises(ValueError, match="one int per axis"):
        posenc.grid_positions(2, 2, offset=(1, 2, 3))


def test_mrope_positions_of_text_image_text() -> None:
    """Wang et al. 2024, sec. 2.1: text advances (t, h, w) together; an image starts at the next
    text position s with ids (s, s + row, s + column); text resumes at s + max(h, w)."""
    img = 9
    ids = torch.tensor([[1, 2, img, img, img, img, img, img, 3]])  # image grid (1, 4, 6) / 2
    got = posenc.mrope_positions(ids, image_grid_thw=torch.tensor([[1, 4, 6]]), image_token_id=img)
    assert got[:, 0].T.tolist() == [
        [0, 0, 0],
        [1, 1, 1],
        [2, 2, 2],
        [2, 2, 3],
        [2, 2, 4],
        [2, 3, 2],
        [2, 3, 3],
        [2, 3, 4],
        [5, 5, 5],
    ]
    text = posenc.mrope_positions(torch.tensor([[4, 5, 6]]))
    assert text.tolist() == [[[0, 1, 2]]] * 3


def test_mrope_decoding_continues_after_the_prompt() -> None:
    """Prefill at mrope_positions, then decode text at max + 1, max + 2 on all three axes."""
    pe = posenc.build("mrope", head_dim=12)
    model = posenc.TinyTransformer(vocab_size=V, pe=pe, d_model=24, n_heads=2).double().eval()
    ids = torch.tensor([[1, 9, 9, 9, 9, 2, 3]])
    pos = posenc.mrope_positions(
        ids, image_grid_thw=torch.tensor([[1, 4, 4]]), image_token_id=9
    ).movedim(0, -1)  # (B, T, 3)
    nxt = pos.amax(dim=(1, 2)) + 1  # (B,)
    steps = torch.stack([nxt, nxt + 1], 1)[..., None].expand(1, 2, 3)  # (B, 2, 3)
    new = torch.tensor([[4, 5]])
    with torch.no_grad():
        full = model(torch.cat([ids, new], 1), torch.cat([pos, steps], 1))
        cache = model.new_cache()
        model(ids, pos, cache=cache)
        decoded = [model(new[:, i : i + 1], steps[:, i : i + 1], cache=cache) for i in range(2)]
    torch.testing.assert_close(torch.cat(decoded, 1), full[:, -2:], rtol=1e-12, atol=1e-12)


def test_mrope_positions_reject_what_does_not_fit() -> None:
    ids = torch.tensor([[1, 9, 9, 9, 2]])
    grid = torch.tensor([[1, 4, 4]])
    with pytest.raises(
        ValueError, match=r"an image block of 3 tokens \(at token 1\) does not match"
    ):
        posenc.mrope_positions(ids, image_grid_thw=grid, image_token_id=9)
    with pytest.raises(ValueError, match="more image blocks than image_grid_thw has grids"):
        posenc.mrope_positions(ids, image_token_id=9)
    with pytest.raises(ValueError, match="1 grid\\(s\\) more than the prompt has blocks"):
        posenc.mrope_positions(ids[:, :1], image_grid_thw=grid, image_token_id=9)
    with pytest.raises(ValueError, match=r"image_grid_thw must be integer \(t, h, w\) rows"):
        posenc.mrope_positions(ids, image_grid_thw=torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input_ids must have shape \(B, T\)"):
        posenc.mrope_positions(ids[0])
