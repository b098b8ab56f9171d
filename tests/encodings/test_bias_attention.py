"""Every score-bias encoding inside attention: explicit softmax, KV cache, gradients, compile."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import posenc

NAMES = ["alibi", "t5", "kerple", "fire"]
#: encoder (bidirectional) configuration of each encoding (Kerple's kernels are of |i - j|)
ENCODER = {"alibi": {"bidirectional": True}, "t5": {"bidirectional": True}, "kerple": {}}
ENCODER["fire"] = {"bidirectional": True}


def _model(name: str, **kw: Any) -> posenc.TinyTransformer:
    torch.manual_seed(0)
    model = posenc.TinyTransformer(vocab_size=29, pe=name, d_model=32, n_heads=4, **kw).double()
    with torch.no_grad():  # weights larger than the 0.02 init: position effects well above rounding
        for n, p in model.named_parameters():
            if p.ndim > 1 and not n.startswith("pe."):
                p.mul_(10.0)
        if name == "t5":
            torch.nn.init.normal_(model.pe.weight)
    return model.eval()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("causal", [True, False])
def test_attention_equals_explicit_softmax(name: str, causal: bool) -> None:
    pe = posenc.build(name, n_heads=4, **({} if causal else ENCODER[name])).double()
    attn = posenc.Attention(32, 4, pe=pe, causal=causal).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [5, 6, 7, 8, 9, 10, 11, 12, 13]])
    q, k, v = attn.qkv(x).split(32, dim=-1)
    q, k, v = (t.view(2, 9, 4, 8).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + pe.bias(pos, pos)  # (B, H, T, T)
    if causal:
        scores = scores.masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), -math.inf)
    out = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(2, 9, 32)
    torch.testing.assert_close(attn(x, pos), attn.proj(out))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n_kv_heads", [None, 2])
def test_kv_cache_decoding_equals_full_forward(name: str, n_kv_heads: int | None) -> None:
    model = _model(name, n_kv_heads=n_kv_heads)
    idx = torch.randint(0, 29, (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        steps = [model(idx[:, :4], cache=cache)]  # a prefix, then one token at a time
        steps += [model(idx[:, t : t + 1], cache=cache) for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_bias_changes_the_output(name: str) -> None:
    model, nope = _model(name), _model("nope")
    nope.load_state_dict({k: v for k, v in model.state_dict().items() if "pe." not in k})
    idx = torch.randint(0, 29, (1, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert (model(idx) - nope(idx)).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["t5", "kerple", "fire"])
def test_gradients_reach_every_learned_parameter(name: str) -> None:
    model = _model(name).train()
    idx = torch.randint(0, 29, (2, 16), generator=torch.Generator().manual_seed(5))
    model.loss(idx[:, :-1], idx[:, 1:]).backward()
    params = dict(model.pe.named_parameters())
    assert params, f"{name} has no learned parameters"
    for n, p in params.items():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, f"{name}.{n} got no gradient"


@pytest.mark.parametrize("name", NAMES)
def test_bias_is_finite_everywhere_and_float32(name: str) -> None:
    pe = posenc.build(name, n_heads=4)
    q_pos = torch.tensor([0, 1, 10**6])
    k_pos = torch.tensor([0, 5, 10**6 - 1, 10**6, 10**6 + 7])  # past, present and future keys
    bias = pe.bias(q_pos, k_pos)
    assert bias.shape == (1, 4, 3, 5) and bias.dtype == torch.float32
    assert torch.isfinite(bias).all()


@pytest.mark.parametrize("name", NAMES)
def test_cache_shaped_positions_broadcast(name: str) -> None:
    """Queries (T,) against cached keys (B, L), as attention passes them while decoding."""
    pe = posenc.build(name, n_heads=4)
    q_pos, k_pos = torch.tensor([7]), torch.arange(8).expand(3, 8)
    bias = pe.bias(q_pos, k_pos)
    assert bias.shape == (3, 4, 1, 8)
    torch.testing.assert_close(bias, pe.bias(torch.tensor([7]), torch.arange(8)).expand(3, 4, 1, 8))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_torch_compile_runs_and_matches_eager(name: str) -> None:
    model = posenc.TinyTransformer(vocab_size=29, pe=name, d_model=32, n_heads=4).eval()
    idx = torch.randint(0, 29, (2, 10), generator=torch.Generator().manual_seed(6))
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi", "fire"])
def test_torch_compile_at_fused_path_lengths(name: str) -> None:
    """At T = 300 eager attention takes the Toeplitz view (ALiBi) or FIRE's kernel, which read
    positions on the host; a full-graph compile traces the blocks path instead."""
    model = posenc.TinyTransformer(vocab_size=29, pe=name, d_model=32, n_heads=4).eval()
    idx = torch.randint(0, 29, (1, 300), generator=torch.Generator().manual_seed(7))
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-4, atol=1e-4)
