"""``SinkCache`` streams a transformers causal LM through ``generate()`` (StreamingLLM).

transformers 5.23 ships no SinkCache to compare with (removed in 4.53), so the reference is the
formula itself: a one-layer model's keys and values depend on their token alone, so the logits
of each generated token equal those of a fresh forward, without a cache, on the tokens it
attends to (the first S and the last W) at positions 0..L-1.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posenc.hf import SinkCache  # noqa: E402

W, S, PROMPT = 5, 2, 3
NEW = 4 * W  # generate 4x the window


def kept(t: int) -> list[int]:
    """Tokens token t attends to: the first S and the last W up to t, in order."""
    return sorted(set(range(min(S, t + 1))) | set(range(max(0, t - W + 1), t + 1)))


def _model(kind: str = "llama", layers: int = 1, **extra: Any) -> Any:
    torch.manual_seed(0)
    if kind == "llama":
        config = transformers.LlamaConfig(
            vocab_size=37,
            hidden_size=32,
            intermediate_size=48,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            **extra,
        )
        model = transformers.LlamaForCausalLM(config)
    else:  # partial rotary (first 8 of 16 features) in interleaved pairs
        config = transformers.GPTJConfig(
            vocab_size=37, n_embd=32, n_layer=layers, n_head=2, rotary_dim=8, n_positions=64
        )
        model = transformers.GPTJForCausalLM(config)
    with torch.no_grad():  # larger weights: position effects well above rounding
        for p in model.parameters():
            p.mul_(6.0 if p.ndim > 1 else 1.0)
    return model.double().eval()


def _generate(model: Any, ids: torch.Tensor, cache: Any) -> Any:
    return model.generate(
        ids,
        past_key_values=cache,
        max_new_tokens=NEW,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )


@pytest.mark.parametrize("kind", ["llama", "gptj"])
def test_generate_4x_the_window_equals_fresh_forwards_on_the_kept_tokens(kind: str) -> None:
    model = _model(kind)
    ids = torch.randint(1, 37, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), SinkCache(model, window=W, sinks=S) as cache:
        out = _generate(model, ids, cache)
        seq = out.sequences  # (B, PROMPT + NEW)
        fresh = [model(seq[:, kept(t)]).logits[:, -1] for t in range(PROMPT - 1, seq.shape[1] - 1)]
    logits = torch.stack(out.logits, dim=1)  # (B, NEW, V)
    assert torch.isfinite(logits).all()
    assert cache.get_seq_length() == PROMPT + NEW - 1 and cache.kept() == S + W - 1
    # generate() returns float32 logits of the float64 model
    torch.testing.assert_close(logits, torch.stack(fresh, dim=1).float(), atol=2e-5, rtol=1e-5)


def test_a_deep_model_streams_and_matches_the_dynamic_cache_within_the_window() -> None:
    model = _model(layers=3)
    ids = torch.randint(1, 37, (1, PROMPT), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), SinkCache(model, window=W, sinks=S) as cache:
        sink = torch.stack(_generate(model, ids, cache).logits, dim=1)
    with torch.no_grad():
        plain = torch.stack(_generate(model, ids, None).logits, dim=1)
    assert torch.isfinite(sink).all()
    within = S + W - PROMPT + 1  # generated tokens whose query still sees every token
    torch.testing.assert_close(sink[:, :within], plain[:, :within], atol=2e-5, rtol=1e-5)
    assert not torch.allclose(sink[:, -1], plain[:, -1])


def test_yarn_keys_keep_their_attention_factor_when_shifted() -> None:
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    model = _model(rope_parameters={"rope_theta": 10000.0, **yarn})
    ids = torch.randint(1, 37, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), SinkCache(model, window=W, sinks=S) as cache:
        out = _generate(model, ids, cache)
        seq = out.sequences
        fresh = [model(seq[:, kept(t)]).logits[:, -1] for t in range(PROMPT - 1, seq.shape[1] - 1)]
    torch.testing.assert_close(
        torch.stack(out.logits, 1), torch.stack(fresh, 1).float(), atol=2e-5, rtol=1e-5
    )


def test_misuse_is_refused() -> None:
    model = _model()
    ids = torch.ones(1, 3, dtype=torch.long)
    cache = SinkCache(model, window=W, sinks=S)
    with pytest.raises(ValueError, match="inside `with SinkCache"):
        model(ids, past_key_values=cache)
    mask = torch.tensor([[0, 1, 1]])
    with SinkCache(model, window=W) as entered, pytest.raises(ValueError, match="unpadded"):
        model(ids, attention_mask=mask, past_key_values=entered)
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        SinkCache(model, window=0)
    dynamic = _model(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4})
    with pytest.raises(ValueError, match="fixed RoPE frequencies; rope_type 'dynamic'"):
        SinkCache(dynamic, window=W)
