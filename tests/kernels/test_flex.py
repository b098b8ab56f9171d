"""Fused score biases (bias_backend="flex") equal the blockwise path, and fall back cleanly."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.attention.backends import offset_table, offset_table_for
from posenc.kernels.flex import OffsetTable, flex_bias_attention


def _flex(q, k, v, pe, q_pos, k_pos, **kwargs):  # type: ignore[no-untyped-def]
    """The kernel with the encoding's bias at every offset of the call (as ``Attention``'s
    backend reads it); a one-column table where there are no positions to size one by."""
    table = offset_table_for(pe, q_pos, k_pos, q.shape[-3]) or OffsetTable(torch.zeros(4, 1), 0)
    return flex_bias_attention(q, k, v, table, q_pos, k_pos, **kwargs)


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple"])
def test_offset_table_reproduces_the_bias(name: str) -> None:
    pe = posenc.build_for_model(name, dim=32, n_heads=4, max_len=64)
    q_pos, k_pos = torch.arange(3, 9), torch.arange(0, 12)
    table = offset_table(pe, int(q_pos.min() - k_pos.max()), int(q_pos.max() - k_pos.min()), 4)
    offsets = q_pos[:, None] - k_pos[None, :] - int(q_pos.min() - k_pos.max())
    expected = pe.bias(q_pos, k_pos)[0]  # (H, Tq, Tk)
    torch.testing.assert_close(table[:, offsets], expected)


def _pair(name: str, causal: bool) -> tuple[posenc.Attention, posenc.Attention]:
    torch.manual_seed(0)
    pe = posenc.build_for_model(name, dim=32, n_heads=4, max_len=256)
    blocks = posenc.Attention(
        32, 4, pe=pe, causal=causal, n_kv_heads=2, block_size=16, bias_backend="blocks"
    )
    flex = posenc.Attention(32, 4, pe=pe, causal=causal, n_kv_heads=2, bias_backend="flex")
    flex.load_state_dict(blocks.state_dict())
    return blocks, flex


def _reference(q, k, v, pe, q_pos, k_pos, causal):  # type: ignore[no-untyped-def]
    """float64 softmax(q kᵀ/√D + bias) v, GQA by repeating kv heads, causal by cache index."""
    H, T, L = q.shape[1], q.shape[2], k.shape[2]
    k = k.double().repeat_interleave(H // k.shape[1], dim=1)
    v = v.double().repeat_interleave(H // v.shape[1], dim=1)
    scores = q.double() @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 + pe.bias(q_pos, k_pos).double()
    if causal:
        scores = scores.masked_fill(~torch.ones(T, L, dtype=torch.bool).tril(L - T), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


# T from 1 to 300, none a multiple of flex's 128-blocks, AVX2/AVX-512 widths or both; 40 is the
# size at which PyTorch's compiled CPU flex returned NaN (module docstring of posenc's flex).
SIZES = (1, 3, 17, 40, 63, 127, 129, 200, 257, 300)


@pytest.mark.parametrize("T", SIZES)
@pytest.mark.parametrize("causal", [True, False])
def test_flex_score_mod_and_block_mask_equal_the_reference(T: int, causal: bool) -> None:
    """posenc's part of the flex path (offset table, score_mod, causal block mask), run by flex's
    eager form, over sizes that are not multiples of any block; GQA; with a cache offset."""
    pe = posenc.build_for_model("alibi", dim=32, n_heads=4, max_len=512)
    g = torch.Generator().manual_seed(T)
    for offset in (0, 5):
        L = T + offset  # offset: T new queries after 5 cached keys
        q = torch.randn(2, 4, T, 8, generator=g)
        k, v = torch.randn(2, 2, L, 8, generator=g), torch.randn(2, 2, L, 8, generator=g)
        q_pos, k_pos = torch.arange(offset, L), torch.arange(L)
        with torch.no_grad():
            out = _flex(q, k, v, pe, q_pos, k_pos, causal=causal, compiled=False)
        assert out is not None
        expected = _reference(q, k, v, pe, q_pos, k_pos, causal)
        torch.testing.assert_close(out.double(), expected, atol=2e-5, rtol=1e-4)


def test_flex_never_runs_compiled_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU the compiled flex kernel is never called (wrong on AVX2 in torch 2.13): "flex" runs
    as "auto" and equals the blocks path at the sizes where compiled flex gave NaN."""
    from posenc.kernels import flex as flex_module

    def refuse() -> None:
        raise AssertionError("compiled FlexAttention called on CPU")

    monkeypatch.setattr(flex_module, "_compiled_flex", refuse)
    q = torch.randn(1, 4, 8, 8)
    pos = torch.arange(8)
    pe = posenc.build("alibi", n_heads=4)
    with torch.no_grad():
        assert _flex(q, q, q, pe, pos, pos, causal=True) is None
    for causal in (True, False):
        blocks, flex = _pair("alibi", causal)
        for T in (16, 40, 128, 200):
            x = torch.randn(2, T, 32)
            with torch.no_grad():
                torch.testing.assert_close(flex(x), blocks(x), atol=2e-5, rtol=1e-4)


def test_training_falls_back_to_blocks_on_cpu() -> None:
    blocks, flex = _pair("alibi", True)
    x = torch.randn(1, 24, 32, requires_grad=True)
    out = flex(x)  # flex has no CPU backward: the blockwise path runs
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    torch.testing.assert_close(out, blocks(x))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t5", "kerple"])
def test_flex_learned_biases_equal_blocks_in_inference(name: str) -> None:
    blocks, flex = _pair(name, True)
    x = torch.randn(2, 40, 32)
    with torch.no_grad():
        torch.testing.assert_close(flex(x), blocks(x), atol=2e-5, rtol=1e-4)


def test_learned_bias_needing_gradients_falls_back_to_blocks() -> None:
    pe = posenc.build("t5", n_heads=4)
    q, k, v = torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8)
    pos = torch.arange(8)
    assert _flex(q, k, v, pe, pos, pos, causal=True) is None  # grads wanted
    blocks, flex = _pair("t5", True)
    x = torch.randn(1, 12, 32)
    out = flex(x)  # trains through the blockwise path
    out.sum().backward()
    assert flex.pe.weight.grad is not None and flex.pe.weight.grad.abs().sum() > 0
    torch.testing.assert_close(out, blocks(x))


def test_bias_backend_is_validated() -> None:
    pe = posenc.build("alibi", n_heads=4)
    with pytest.raises(ValueError, match=r"bias_backend must be one of .*, got 'fused'"):
        posenc.Attention(32, 4, pe=pe, causal=True, bias_backend="fused")  # type: ignore[arg-type]


def test_float64_on_cpu_and_empty_inputs_fall_back_to_blocks() -> None:
    """FlexAttention does not compile float64 on CPU, and an empty call has no extremes to
    size the offset table: None, and ``Attention`` runs the blocks path."""
    pe = posenc.build("alibi", n_heads=4)
    q = torch.randn(1, 4, 8, 8, dtype=torch.float64)
    pos = torch.arange(8)
    empty = torch.randn(2, 4, 0, 8)
    with torch.no_grad():
        assert _flex(q, q, q, pe, pos, pos, causal=True) is None
        assert _flex(empty, empty, empty, pe, pos[:0], pos[:0], causal=True) is None
    blocks, flex = _pair("alibi", True)
    blocks, flex = blocks.double(), flex.double()
    x = torch.randn(2, 20, 32, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(flex(x), blocks(x))
        assert flex(x[:, :0]).shape == (2, 0, 32)
        assert flex(x[:0]).shape == (0, 20, 32)


def test_bad_inputs_raise_clear_errors() -> None:
    pe = posenc.build("alibi", n_heads=4)
    q = torch.randn(1, 4, 8, 8)
    pos = torch.arange(8)
    with pytest.raises(ValueError, match=r"k_pos must have shape \(8,\)"):
        _flex(q, q, q, pe, pos, torch.arange(5), causal=True)
    with pytest.raises(TypeError, match="q, k, v must share a dtype"):
        _flex(q, q.half(), q, pe, pos, pos, causal=True)
