"""The per-forward position state: built once per forward, handed to every layer, checked once,
its shared work made once, and no host read of position values on a compiled forward."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

import posenc
import posenc._validate as V
from posenc import functional as PF
from posenc.attention import CachedKeys
from posenc.attention.inputs import new_context
from posenc.encodings.state import PositionState, position_state
from posenc.models import KVCache

V_SIZE = 50


def _model(name: str, layers: int = 3) -> posenc.TinyTransformer:
    torch.manual_seed(0)
    return posenc.TinyTransformer(
        vocab_size=V_SIZE, pe=name, d_model=32, n_heads=4, n_layers=layers
    )


@pytest.fixture
def position_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of ``check_positions`` from any posenc module that imported it."""
    calls = [0]
    original = V.check_positions
    for name in posenc.names():  # import every module a forward can reach (posenc is lazy)
        _model(name, layers=1)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "") or ""
        if name.startswith("posenc") and getattr(module, "check_positions", None) is original:
            monkeypatch.setattr(module, "check_positions", counting)
    return calls


@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_positions_are_checked_once_per_forward(name: str, position_checks: list[int]) -> None:
    """3 layers, a forward and a cached decode step: one check each, at the model."""
    model = _model(name).eval()
    idx = torch.randint(0, V_SIZE, (2, 12))
    with torch.no_grad():
        position_checks[0] = 0
        model(idx)
        assert position_checks[0] == 1
        cache = model.new_cache()
        model(idx[:, :8], cache=cache)
        position_checks[0] = 0
        model(idx[:, 8:9], cache=cache)
        assert position_checks[0] == 1


def test_state_holds_positions_and_its_fresh_keys_state() -> None:
    q_pos, k_pos = torch.arange(3, 6), torch.arange(6)
    state = position_state(q_pos, k_pos)
    assert isinstance(state, PositionState) and not state.keys_are_queries
    assert state.q_pos is q_pos and state.k_pos is k_pos
    fresh = state.new_keys()
    assert fresh.k_pos is q_pos and fresh.keys_are_queries and fresh.new_keys() is fresh
    same = position_state(q_pos)
    assert same.k_pos is q_pos and same.keys_are_queries


@pytest.mark.parametrize("name", ["rope", "xpos", "pope", "rope_mixed"])
def test_state_makes_tables_once_per_forward(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three layers' rotations with one state (fresh keys, then all keys as rerotation does):
    the queries' tables once, the keys' once; without a state each call makes its own."""
    calls: list[int] = []
    for fn in ("rope_cos_sin", "mixed_angles"):
        real = getattr(PF, fn)
        monkeypatch.setattr(PF, fn, lambda *a, _real=real, **kw: calls.append(1) or _real(*a, **kw))
    grid = name == "rope_mixed"
    config = {"head_dim": 8, "n_heads": 2} if name in ("pope", "rope_mixed") else {"head_dim": 8}
    pe = posenc.build(name, **config)
    q = torch.randn(1, 2, 3, 8)
    k = torch.randn(1, 2, 5, 8)
    pos = torch.stack([torch.arange(3), torch.arange(3)], -1) if grid else torch.arange(2, 5)
    keys = torch.stack([torch.arange(5), torch.arange(5)], -1) if grid else torch.arange(5)
    state = pe.prepare(pos, keys)
    calls.clear()
    for _ in range(3):
        pe.rotate(q, q, pos, pos, ctx=state.new_keys())
        pe.rotate(q, k, pos, keys, ctx=state)
    xpos_fresh = 1 if name == "xpos" else 0  # (its fresh keys' scale differs from the queries')
    assert len(calls) == 2 + xpos_fresh
    calls.clear()
    pe.rotate(q, k, pos, keys)
    pe.rotate(q, k, pos, keys)
    assert len(calls) == 4


def test_context_must_fit_the_call() -> None:
    attn = posenc.Attention(32, 4, pe=posenc.build("rope", head_dim=8), causal=True)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="ctx holds 4 query and 4 key positions"):
        attn(x, ctx=attn.pe.prepare(torch.arange(4)))
    with pytest.raises(ValueError, match="either as pos or in ctx"):
        attn(x, torch.arange(5), ctx=attn.pe.prepare(torch.arange(5)))
    pos = torch.arange(5)
    torch.testing.assert_close(attn(x, ctx=attn.pe.prepare(pos)), attn(x, pos))


def test_absolute_position_values_are_checked_at_prepare() -> None:
    """Value checks moved from every embed call to the forward's context: still a clear error."""
    with pytest.raises(ValueError, match="past the learned table"):
        _model("learned")(torch.randint(0, V_SIZE, (1, 4)), torch.tensor([0, 1, 2, 2000]))
    with pytest.raises(ValueError, match="must be >= 0"):
        _model("sinusoidal")(torch.randint(0, V_SIZE, (1, 3)), torch.tensor([-1, 0, 1]))


@pytest.mark.slow
@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_model_compiles_to_one_graph_forward_backward_and_decode(name: str) -> None:
    """torch.compile(fullgraph=True) of a 2-layer model's forward and backward, and of a cached
    decode step: no host read of position values breaks the graph (value checks run in eager
    mode only, ``posenc._validate.values_checked``). Randomized runs in evaluation here, where
    positions pass through (its training draw compiles too, from the same RNG state:
    ``tests/encodings/test_randomized.py``)."""
    torch._dynamo.reset()
    model = _model(name, layers=2)
    if name == "randomized":
        model.eval()
    idx = torch.randint(0, V_SIZE, (2, 12))
    want = model(idx)
    want.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    got = torch.compile(model, backend="eager", fullgraph=True)(idx)
    got.square().mean().backward()
    torch.testing.assert_close(got, want)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], msg=n)
    with torch.no_grad():
        cache = model.new_cache()
        model(idx[:, :8], cache=cache)
        step = torch.compile(lambda t: model(t, cache=cache), backend="eager", fullgraph=True)
        compiled_step = step(idx[:, 8:9])
        reference = model(idx[:, :9])  # (randomized: in evaluation, positions pass through)
    torch.testing.assert_close(compiled_step[:, 0], reference[:, 8], rtol=1e-4, atol=1e-5)


def test_default_positions_give_offset_bounds_without_a_host_read() -> None:
    """The models' default positions (prefill, then decode steps) come with host-known offset
    bounds equal to the true extremes of q_pos - k_pos; explicit positions come without."""
    pe = posenc.build("transformer_xl", dim=32, n_heads=4)
    cache = KVCache()
    for T in (5, 1, 3):  # prefill, then steps; the keys are appended as a layer would
        ctx = new_context(pe, None, 2, T, cache, torch.device("cpu"))
        offsets = ctx.q_pos[..., :, None] - ctx.k_pos[..., None, :]
        assert ctx.offset_bounds == (int(offsets.min()), int(offsets.max()))
        assert isinstance(ctx, PositionState)
        q = torch.zeros(2, 4, T, 8)
        pos = ctx.q_pos.expand(2, T)
        cache.append(_entry(q, pos))
    explicit = new_context(pe, torch.arange(7, 10), 2, 3, cache, torch.device("cpu"))
    assert explicit.offset_bounds is None and not cache.consecutive


def _entry(k: torch.Tensor, pos: torch.Tensor) -> CachedKeys:
    B, T = pos.shape
    return CachedKeys(
        k, k, pos, torch.ones(B, T, dtype=torch.bool), torch.zeros(B, T, dtype=torch.long)
    )
