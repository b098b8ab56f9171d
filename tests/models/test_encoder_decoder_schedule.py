"""Per-layer schedules of ``EncoderDecoder``: a list or ``LayerSchedule`` for both stacks or a
pair of them, each distinct encoding built once per stack (the encoder's in its encoder form)
with one position context per forward, sliding windows in both stacks and a decoder cache
keeping only what its local layers see, cached decoding equal to the full forward, and the
refusals."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import posenc
from posenc.encodings.bias import T5Bias
from posenc.encodings.nope import NoPE, NoPETemperature
from posenc.encodings.rotary import RoPE
from posenc.models import EncoderDecoder, LayerSchedule, irope, rnope_swa

SV, TV = 11, 13


def model(pe: Any, *, enc: int = 3, dec: int = 4, **kw: Any) -> EncoderDecoder:
    torch.manual_seed(0)
    m = EncoderDecoder(
        src_vocab_size=SV,
        tgt_vocab_size=TV,
        pe=pe,
        d_model=16,
        n_heads=4,
        n_kv_heads=2,
        n_encoder_layers=enc,
        n_decoder_layers=dec,
        max_len=32,
        **kw,
    ).double()
    return m.eval()


def tokens(B: int, T: int, V: int, seed: int) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_a_list_repeats_to_each_stack_in_its_own_form() -> None:
    m = model(["t5", "rope"])
    enc = [b.attn.pe for b in m.encoder]
    dec = [b.attn.pe for b in m.decoder]
    assert [type(p) for p in enc] == [T5Bias, RoPE, T5Bias]
    assert [type(p) for p in dec] == [T5Bias, RoPE, T5Bias, RoPE]
    assert enc[0] is enc[2] and dec[0] is dec[2] and dec[1] is dec[3]  # built once per stack
    assert enc[0].bidirectional and not dec[0].bidirectional  # T5's encoder buckets
    assert enc[0] is not dec[0] and m.encoder_pe is enc[0] and m.decoder_pe is dec[0]
    assert all(isinstance(b.cross_attn.pe, NoPE) for b in m.decoder)


def test_a_pair_of_schedules_with_windows_and_the_decoder_cache() -> None:
    m = model((rnope_swa(window=3), irope(chunk=4, floor_scale=2)))
    assert [b.attn.window for b in m.encoder] == [3, 3, 3]
    assert [isinstance(b.attn.pe, RoPE) for b in m.encoder] == [True] * 3
    assert [b.attn.chunk for b in m.decoder] == [4, 4, 4, None]
    assert isinstance(m.decoder[3].attn.pe, NoPETemperature)
    assert [c.keep for c in m.new_cache()] == [3, 3, 3, None]


SCHEDULES = {
    "list": ["alibi", "rope", "nope"],
    "windows": LayerSchedule(pe=("t5", "rope"), window=(3, None), chunk=(None, None, 4)),
    "pair": (rnope_swa(window=3), irope(chunk=3, floor_scale=2)),
    "data": ("rope", ["rope", "fox", "path"]),  # the decoder's data-dependent layers
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_cached_decoding_equals_the_full_forward(name: str) -> None:
    m = model(SCHEDULES[name])
    src, tgt = tokens(2, 8, SV, 1), tokens(2, 9, TV, 2)
    src_mask = torch.ones(2, 8, dtype=torch.bool)
    src_mask[1, 6:] = False  # right padding
    src_pos = posenc.positions_from_padding(src_mask)
    with torch.no_grad():
        full = m(src, tgt, src_pos, src_padding_mask=src_mask)
        memory = m.memory(src, src_pos, src_padding_mask=src_mask)
        cache = m.new_cache()
        steps = [m.decode(tgt[:, :4], memory, cache=cache)]
        steps += [m.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(4, 9)]
        padded = m(
            torch.cat([src[:1, :6], torch.zeros(1, 2, dtype=torch.long)], 1),
            tgt[:1],
            src_padding_mask=torch.tensor([[True] * 6 + [False] * 2]),
        )
        alone = m(src[:1, :6], tgt[:1])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(padded, alone, rtol=1e-10, atol=1e-10)  # padding: as absent


def test_each_distinct_encoding_prepares_once_per_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    m = model(["t5", "rope"])
    calls: list[str] = []
    for pe in {id(p): p for p in (*m.encoder_pes, *m.decoder_pes)}.values():
        original = pe.prepare

        def counting(*args: Any, _f: Any = original, _n: str = pe.name, **kw: Any) -> Any:
            calls.append(_n)
            return _f(*args, **kw)

        monkeypatch.setattr(pe, "prepare", counting)
    with torch.no_grad():
        m(tokens(1, 5, SV, 3), tokens(1, 4, TV, 4))
    assert sorted(calls) == ["rope", "rope", "t5", "t5"]  # each stack's two, once


def test_gradients_reach_every_layer_encoding() -> None:
    m = model(["t5", ("t5", {"num_buckets": 8})]).train()
    m.loss(tokens(2, 6, SV, 5), tokens(2, 5, TV, 6), tokens(2, 5, TV, 7)).backward()
    for key, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, key


@pytest.mark.parametrize(
    ("pe", "kw", "error", "match"),
    [
        (["rope", "sinusoidal"], {}, ValueError, "no per-layer form"),
        (["rope", "xpos"], {"cross_rotation": True}, ValueError, "has 2"),
        (("rope",), {}, TypeError, "a tuple is the pair, got one of 1"),
        (("rope", ("rope", "nope")), {}, TypeError, "got tuple for a stack"),
        ([1.5], {}, TypeError, "a list or LayerSchedule"),
        (["fox"], {}, ValueError, "computes attention itself.*causal"),
        (["rope", "rope_2d"], {}, ValueError, "same position axes"),
    ],
)
def test_what_a_schedule_cannot_be_is_refused(
    pe: Any, kw: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        model(pe, **kw)
