"""The position context: built once per forward, handed to every layer, checked once, and no
host read of position values on a compiled forward (the redesign issue's "validate once")."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

import posenc
import posenc._validate as V
from posenc.attention import CachedKeys
from posenc.attention.inputs import new_context
from posenc.encodings.context import PositionContext, shared_for
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


def test_context_shares_work_by_role_and_nothing_else() -> None:
    q_pos, k_pos = torch.arange(3, 6), torch.arange(6)
    ctx = PositionContext(q_pos, k_pos)
    assert ctx.role(q_pos) == "q" and ctx.role(k_pos) == "k"
    assert ctx.role(torch.arange(3, 6)) is None  # equal values, another tensor: not the context's
    made: list[int] = []
    for _ in range(3):
        shared_for(ctx, q_pos, "table", lambda: made.append(1) or len(made))
    assert made == [1]
    assert shared_for(ctx, k_pos, "table", lambda: 7) == 7  # the keys' own entry
    assert shared_for(ctx, torch.arange(3), "table", lambda: 9) == 9  # unknown positions: afresh
    assert shared_for(None, q_pos, "table", lambda: 11) == 11
    same = PositionContext(q_pos)
    assert same.k_pos is q_pos and same.role(q_pos) == "q"


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
