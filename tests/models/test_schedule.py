"""Per-layer schedules of ``TinyTransformer``: presets against transformers' rules (configs and
attention layers of tiny models of each family), one position context per distinct encoding,
cached decoding equal to the full forward for every schedule, left padding and packing, and
the refusals."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from posenc.attention.positions import packed_positions, positions_from_padding
from posenc.encodings.nope import NoPE, NoPETemperature
from posenc.encodings.rotary import RoPE
from posenc.models import (
    LayerSchedule,
    TinyTransformer,
    gemma2,
    gemma3,
    irope,
    rnope_swa,
    smollm3,
)
from posenc.registry import build_for_model

V, C, H = 40, 16, 2
tf = pytest.importorskip("transformers")
SIZE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 50,
}


def _layers(model: TinyTransformer) -> list[tuple[bool, float | None, int | None, int | None]]:
    """(rotates, RoPE base, window, chunk) of each layer."""
    out = []
    for block in model.blocks:
        pe, attn = block.attn.pe, block.attn
        rope = isinstance(pe, RoPE)
        assert rope or isinstance(pe, NoPE | NoPETemperature)
        out.append((rope, float(pe.base) if rope else None, attn.window, attn.chunk))
    return out


def _model(pe: Any, n_layers: int, **kw: Any) -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(vocab_size=V, pe=pe, d_model=C, n_heads=H, n_layers=n_layers, **kw)


@pytest.mark.parametrize("n", [3, 5, 8])
def test_irope_and_smollm3_rotate_where_transformers_does(n: int) -> None:
    from transformers.models.llama4.modeling_llama4 import Llama4TextAttention
    from transformers.models.smollm3.modeling_smollm3 import SmolLM3Attention

    llama = tf.Llama4TextConfig(num_hidden_layers=n, head_dim=16, intermediate_size_mlp=64, **SIZE)
    base = llama.rope_parameters["rope_theta"]
    expected = [(bool(Llama4TextAttention(llama, i).use_rope), None, None, None) for i in range(n)]
    expected = [
        (r, base if r else None, None, llama.attention_chunk_size if r else None)
        for r, *_ in expected
    ]
    assert [t == "chunked_attention" for t in llama.layer_types] == [e[0] for e in expected]
    model = _model(irope(), n)
    assert _layers(model) == expected
    assert all(b.attn.pe.layout == "interleaved" for b in model.blocks if b.attn.chunk)
    assert llama.attn_temperature_tuning  # the NoPE layers' queries take the temperature
    nope = [b.attn.pe for b in model.blocks if not b.attn.chunk]
    assert all(isinstance(pe, NoPETemperature) for pe in nope)
    assert all(
        (pe.floor_scale, pe.attn_scale) == (llama.floor_scale, llama.attn_scale) for pe in nope
    )
    plain = _model(irope(temperature=False), n)
    assert all(type(b.attn.pe) is NoPE for b in plain.blocks if not b.attn.chunk)

    smol = tf.SmolLM3Config(num_hidden_layers=n, **SIZE)
    base = smol.rope_parameters["rope_theta"]
    rotates = [bool(SmolLM3Attention(smol, i).use_rope) for i in range(n)]
    assert _layers(_model(smollm3(), n)) == [(r, base if r else None, None, None) for r in rotates]


@pytest.mark.parametrize("n", [3, 7])
def test_rnope_swa_and_gemma_windows_and_bases_equal_transformers(n: int) -> None:
    from transformers.models.cohere2.modeling_cohere2 import Cohere2Attention
    from transformers.models.gemma2.modeling_gemma2 import Gemma2Attention

    cohere = tf.Cohere2Config(num_hidden_layers=n, **SIZE)
    windows = [Cohere2Attention(cohere, i).sliding_window for i in range(n)]  # rope iff window
    base = cohere.rope_parameters["rope_theta"]
    expected = [(w is not None, base if w else None, w, None) for w in windows]
    assert _layers(_model(rnope_swa(), n)) == expected

    g2 = tf.Gemma2Config(num_hidden_layers=n, head_dim=16, **SIZE)
    windows = [Gemma2Attention(g2, i).sliding_window for i in range(n)]
    base = g2.rope_parameters["rope_theta"]
    assert _layers(_model(gemma2(), n)) == [(True, base, w, None) for w in windows]

    g3 = tf.Gemma3TextConfig(num_hidden_layers=n, head_dim=16, **SIZE)
    rope = g3.rope_parameters  # by layer type
    expected = [
        (True, rope[t]["rope_theta"], g3.sliding_window if t == "sliding_attention" else None, None)
        for t in g3.layer_types
    ]
    assert _layers(_model(gemma3(), n)) == expected


#: Every preset at CPU scale (windows and chunks of a few tokens), and hand-written schedules.
SCHEDULES = {
    "irope": irope(chunk=4, floor_scale=3),  # the temperature from position 2 on
    "rnope_swa": rnope_swa(window=3),
    "smollm3": smollm3(),
    "gemma2": gemma2(window=4),
    "gemma3": gemma3(window=3, interval=3),
    "mixed": LayerSchedule(pe=("alibi", "rope", "nope"), window=(None, 5), chunk=(4, None, None)),
}


def _prepares(model: TinyTransformer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    for pe in {id(p): p for p in model.encodings()}.values():
        original = pe.prepare

        def counting(*args: Any, _pe: Any = pe, _f: Any = original, **kw: Any) -> Any:
            calls.append(id(_pe))
            return _f(*args, **kw)

        monkeypatch.setattr(pe, "prepare", counting)
    return calls


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_cached_decoding_equals_the_full_forward(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(SCHEDULES[name], 6).eval()
    distinct = {id(p) for p in model.encodings()}
    idx = torch.randint(0, V, (2, 14), generator=torch.Generator().manual_seed(1))
    calls = _prepares(model, monkeypatch)
    with torch.no_grad():
        full = model(idx)
        assert sorted(calls) == sorted(distinct)  # one context per distinct encoding
        cache = model.new_cache()
        steps = [model(idx[:, :5], cache=cache), model(idx[:, 5:8], cache=cache)]
        steps += [model(idx[:, t : t + 1], cache=cache) for t in range(8, 14)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-5)
    for block, layer_cache in zip(model.blocks, cache, strict=True):
        limits = [n - 1 for n in (block.attn.window, block.attn.chunk) if n is not None]
        assert len(layer_cache) == (min(limits) if limits else 14)


@pytest.mark.parametrize("name", ["rnope_swa", "irope", "mixed"])
def test_left_padding_and_packing_equal_each_sequence_alone(name: str) -> None:
    model = _model(SCHEDULES[name], 4).eval()
    g = torch.Generator().manual_seed(2)
    a, b = torch.randint(0, V, (1, 9), generator=g), torch.randint(0, V, (1, 6), generator=g)
    with torch.no_grad():
        alone_a, alone_b = model(a), model(b)
        # left padding: b padded to 9, at positions counting real tokens only
        padded = torch.cat([a, torch.cat([torch.zeros(1, 3, dtype=torch.long), b], 1)])
        mask = torch.ones(2, 9, dtype=torch.bool)
        mask[1, :3] = False
        out = model(padded, positions_from_padding(mask), padding_mask=mask)
        torch.testing.assert_close(out[0], alone_a[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out[1, 3:], alone_b[0], rtol=1e-4, atol=1e-5)
        # cached: the padded prompt, then one step
        cache = model.new_cache()
        model(
            padded[:, :8],
            positions_from_padding(mask[:, :8]),
            padding_mask=mask[:, :8],
            cache=cache,
        )
        pos = positions_from_padding(mask)[:, 8:]
        step = model(padded[:, 8:], pos, cache=cache)
        torch.testing.assert_close(step[:, 0], out[:, 8], rtol=1e-4, atol=1e-5)
        # packing: a then b in one row, positions restarting, segments masking each other
        segments = torch.tensor([[0] * 9 + [1] * 6])
        packed = model(torch.cat([a, b], 1), packed_positions(segments), segment_ids=segments)
        torch.testing.assert_close(packed[0, :9], alone_a[0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(packed[0, 9:], alone_b[0], rtol=1e-4, atol=1e-5)


def test_generate_with_a_schedule_equals_greedy_full_forwards() -> None:
    model = _model(SCHEDULES["gemma3"], 3).eval()
    prompt = torch.randint(0, V, (2, 5), generator=torch.Generator().manual_seed(3))
    new = model.generate(prompt, 6)
    seq = prompt
    with torch.no_grad():
        for _ in range(6):
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(new, seq[:, 5:])


def test_names_share_one_encoding_and_built_ones_are_kept() -> None:
    rope = build_for_model("rope", dim=C, n_heads=H, max_len=1024)
    model = _model([rope, "nope", ("rope", {"base": 500.0}), "nope"], 4, window=[2, None])
    pes = model.encodings()
    assert pes[0] is rope and pes[1] is pes[3] and isinstance(pes[2], RoPE)
    assert float(pes[2].base) == 500.0 and model.pe is rope
    assert [b.attn.window for b in model.blocks] == [2, None, 2, None]
    yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16}
    scaled = _model([("rope", {"scaling": yarn}), ("rope", {"scaling": dict(yarn)})], 2)
    assert scaled.encodings()[0] is scaled.encodings()[1]  # equal configs: built once
    one = _model("rope", 3, window=4, pe_config={"base": 100.0})  # one encoding, every layer
    assert len({id(p) for p in one.encodings()}) == 1 and float(one.pe.base) == 100.0
    assert [b.attn.window for b in one.blocks] == [4, 4, 4]


def test_refusals_name_what_was_expected() -> None:
    with pytest.raises(ValueError, match=r"token embeddings.*one pe"):
        _model(["rope", "sinusoidal"], 2)
    with pytest.raises(ValueError, match="LayerSchedule carries"):
        _model(smollm3(), 2, window=3)
    with pytest.raises(ValueError, match="each window"):
        _model(["rope"], 2, window=[0])
    with pytest.raises(ValueError, match="empty"):
        LayerSchedule(pe=())
    with pytest.raises(TypeError, match="sequence"):
        LayerSchedule(pe="rope")  # type: ignore[arg-type]
