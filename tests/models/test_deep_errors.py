"""Bad inputs to the models are refused at the door with posenc's own TypeError/ValueError,
naming what was expected and what came, not a torch error from deep inside; NaN and inf
pass through as IEEE arithmetic carries them (documented, tested here)."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.models import EncoderDecoder, TinyTransformer


def _model(**kw: object) -> TinyTransformer:
    return TinyTransformer(vocab_size=10, pe="rope", d_model=16, n_heads=2, n_layers=1, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [10, 99, -1])
def test_token_ids_outside_the_vocabulary(bad: int) -> None:
    model = _model()
    with pytest.raises(ValueError, match=rf"token ids in 0..9 \(vocab_size 10\), got {bad}"):
        model(torch.tensor([[1, 2, bad]]))
    with pytest.raises(ValueError, match="vocab_size 10"):
        model.generate(torch.tensor([[1, bad]]), 2)


def test_encoder_decoder_token_ids_are_checked_per_side() -> None:
    model = EncoderDecoder(src_vocab_size=7, tgt_vocab_size=5, pe="rope", d_model=16, n_heads=2)
    with pytest.raises(ValueError, match=r"src must hold token ids in 0..6"):
        model(torch.tensor([[7]]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match=r"tgt must hold token ids in 0..4"):
        model(torch.tensor([[6]]), torch.tensor([[5]]))


def test_attention_on_integer_input_is_a_type_error() -> None:
    attn = posenc.Attention(16, 2, pe=posenc.build("rope", head_dim=8), causal=True)
    with pytest.raises(TypeError, match=r"x must have a real floating dtype, got torch\.int64"):
        attn(torch.ones(1, 3, 16, dtype=torch.long))


def test_pe_config_repeating_a_model_argument_is_named() -> None:
    with pytest.raises(ValueError, match=r"pe_config must not set .max_len.*max_len=1024"):
        TinyTransformer(vocab_size=10, pe="learned", pe_config={"max_len": 8})
    with pytest.raises(ValueError, match="pe_config must not set 'dim'"):
        TinyTransformer(vocab_size=10, pe="sinusoidal", pe_config={"dim": 8})


def test_patch_none_is_a_type_error() -> None:
    from posenc.hf import patch

    with pytest.raises(TypeError, match="got NoneType"):
        patch(None)  # type: ignore[arg-type]


def test_nan_and_inf_pass_through_as_arithmetic_carries_them() -> None:
    """The documented choice: values are not checked. A NaN or inf in one token's embedding
    reaches every position's logits, earlier ones too: a masked key still has a value row,
    and attention's P·V multiplies it by 0 (0·NaN and 0·inf are NaN). Another batch row is
    untouched."""
    model = _model().eval()
    for bad in (float("nan"), float("inf")):
        with torch.no_grad():
            model.tok.weight[3] = bad
            logits = model(torch.tensor([[1, 2, 3, 4], [1, 2, 4, 5]]))
        assert torch.isnan(logits[0]).all()
        assert torch.isfinite(logits[1]).all()
