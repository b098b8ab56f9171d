"""Review of the torch modules under the ways PyTorch users run models: meta-device init,
torch.compile, activation checkpointing (randomized positions drawn once per forward)."""

from __future__ import annotations

import copy
import io
import pickle
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

import posenc
from posenc.encodings.randomized import Randomized

V = 11


def tiny(name: str, **pe_config: Any) -> posenc.TinyTransformer:
    torch.manual_seed(0)
    return posenc.TinyTransformer(
        vocab_size=V, pe=name, d_model=16, n_heads=2, n_layers=2, max_len=64, pe_config=pe_config
    )


# ------------------------------------------------- sweeps: autocast, state dict, copies (no bug)


@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_autocast_bf16_forward_backward(name: str) -> None:
    model = tiny(name).eval()
    idx = torch.randint(0, V, (2, 9))
    want = model(idx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(idx)
        got.float().square().mean().backward()
    torch.testing.assert_close(got.float(), want, rtol=0.05, atol=0.05)
    for n, p in model.named_parameters():
        assert p.grad is None or bool(torch.isfinite(p.grad).all()), n


@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_state_dict_round_trip_and_copies_after_a_forward(name: str) -> None:
    """Memos (cos/sin, drawn positions) stay out of the state dict and survive deepcopy and
    pickle; a fresh model loading ``torch.load(weights_only=True)`` is the same model."""
    model = tiny(name).eval()
    idx = torch.randint(0, V, (2, 9))
    want = model(idx)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(1)
    fresh = posenc.TinyTransformer(
        vocab_size=V, pe=name, d_model=16, n_heads=2, n_layers=2, max_len=64
    )
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    for other in (fresh.eval(), copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        torch.testing.assert_close(other(idx), want, rtol=0, atol=0)


# ------------------------------------------------------------------ meta device, to_empty


@pytest.mark.parametrize("name", posenc.names(axes=1))
def test_meta_init_then_to_empty_and_load_gives_the_model(name: str) -> None:
    """Build on the meta device, ``to_empty`` then load a checkpoint (the usual large-model init):
    ``to_empty`` crashed ("Cannot copy out of meta tensor") for every encoding with float64
    buffers kept out of dtype casts (rope, xpos, pope, alibi, randomized); non-persistent
    buffers (frequencies, slopes) are not in the state dict, so they must come back on their
    own."""
    model = tiny(name).eval()
    idx = torch.randint(0, V, (2, 9))
    want = model(idx)
    with torch.device("meta"):
        empty = tiny(name)
    empty.to_empty(device="cpu")
    empty.load_state_dict(model.state_dict())
    torch.testing.assert_close(empty.eval()(idx), want, rtol=0, atol=0)
    for module in empty.modules():
        for n in getattr(module, "keep_dtype_buffers", ()):
            assert getattr(module, n).dtype == torch.float64, n


def test_model_to_meta_then_to_empty_bf16() -> None:
    """``.to("meta")`` of a built model, then ``to_empty``: buffers come back with their values
    and dtypes (float64 frequencies, the module-dtype ALiBi slopes)."""
    for name in ("rope", "alibi"):
        model = tiny(name)
        ref = copy.deepcopy(model).to(torch.bfloat16)
        moved = model.to("meta").to(torch.bfloat16).to_empty(device="cpu")
        for (n, got), (_, want) in zip(
            moved.pe.named_buffers(), ref.pe.named_buffers(), strict=True
        ):
            assert got.dtype == want.dtype, n
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_rope_with_scaling_builds_on_meta() -> None:
    """YaRN reads its frequencies on the host: building under ``torch.device("meta")`` raised
    "Tensor.item() cannot be called on meta tensors". The frequencies are computed on the CPU
    and placed on the meta device; ``to_empty`` computes them again."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    want = posenc.build("rope", head_dim=8, scaling=scaling)
    with torch.device("meta"):
        rope = posenc.build("rope", head_dim=8, scaling=scaling)
    assert rope.inv_freq64.is_meta
    rope.to_empty(device="cpu")
    torch.testing.assert_close(rope.inv_freq64, want.inv_freq64, rtol=0, atol=0)
    assert rope.attention_scaling == want.attention_scaling != 1.0


# ------------------------------------------------------------- randomized: one draw per forward


def _record_base_positions(pe: Randomized, monkeypatch: pytest.MonkeyPatch) -> list[Tensor]:
    """Positions each call of the base encoding's ``rotate`` receives (copies)."""
    seen: list[Tensor] = []
    original = type(pe.base).rotate

    def recording(self: Any, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, **kw: Any) -> Any:
        seen.append(q_pos.detach().clone())
        return original(self, q, k, q_pos, k_pos, **kw)

    monkeypatch.setattr(type(pe.base), "rotate", recording)
    return seen


def test_randomized_compiled_shares_one_draw_across_layers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under torch.compile each layer drew its own positions (3 layers: 3 different samples)
    when the draw was found by a memo; the position context shares one draw per forward."""
    torch._dynamo.reset()
    model = tiny("randomized").train()
    model.blocks.append(copy.deepcopy(model.blocks[0]))
    model.blocks[-1].attn.pe = model.pe  # the copy must share the encoding
    seen = _record_base_positions(model.pe, monkeypatch)
    compiled = torch.compile(model, backend="eager")
    idx = torch.randint(0, V, (2, 6))
    for _ in range(2):
        seen.clear()
        compiled(idx)
        assert len(seen) == 3
        for other in seen[1:]:
            torch.testing.assert_close(other, seen[0], rtol=0, atol=0)


class _Checkpointed(nn.Module):
    def __init__(self, block: nn.Module, reentrant: bool) -> None:
        super().__init__()
        self.block, self.reentrant = block, reentrant

    def forward(self, x: Tensor, ctx: Any, cache: Any, **masks: Any) -> Tensor:
        if self.reentrant:
            return checkpoint(self.block, x, ctx, cache, use_reentrant=True)
        return checkpoint(self.block, x, ctx, cache, use_reentrant=False, **masks)


@pytest.mark.parametrize("seed", [None, 3])
@pytest.mark.parametrize("reentrant", [True, False])
def test_randomized_checkpoint_recomputes_the_forward_draw(
    monkeypatch: pytest.MonkeyPatch, reentrant: bool, seed: int | None
) -> None:
    """Activation checkpointing reruns each block in the backward: it must see the positions
    its forward drew (the recompute gets the forward's position context, which holds the draw),
    also with two forwards before one backward (a memo of draws held only the latest one)."""
    model = tiny("randomized", seed=seed).train()
    model.blocks = nn.ModuleList(_Checkpointed(b, reentrant) for b in model.blocks)
    seen = _record_base_positions(model.pe, monkeypatch)
    a, b = torch.randint(0, V, (2, 2, 7))
    loss = model(a).square().mean() + model(b).square().mean()
    forward = [p.clone() for p in seen]
    assert len(forward) == 4  # two forwards, two layers each
    assert not torch.equal(forward[0], forward[2])  # each forward draws anew
    seen.clear()
    loss.backward()
    assert len(seen) == 4
    drawn = {tuple(p.flatten().tolist()) for p in forward}
    for p in seen:
        assert tuple(p.flatten().tolist()) in drawn
    counts = [sum(torch.equal(p, f) for p in seen) for f in (forward[0], forward[2])]
    assert counts == [2, 2]  # each forward's two layers recomputed at its own draw


def test_randomized_int32_positions_one_draw_per_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """int32 positions are converted to int64 once, at the model: every layer shares one draw
    (a memo keyed on the converted tensors missed, 3 layers drew 3 samples)."""
    model = tiny("randomized").train()
    model.blocks.append(copy.deepcopy(model.blocks[0]))
    model.blocks[-1].attn.pe = model.pe
    seen = _record_base_positions(model.pe, monkeypatch)
    model(torch.randint(0, V, (2, 6)), torch.arange(6, dtype=torch.int32))
    assert len(seen) == 3
    for other in seen[1:]:
        torch.testing.assert_close(other, seen[0], rtol=0, atol=0)


# ------------------------------------------------------------------------------ torch.compile


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_rope_model_compiles_to_one_graph(backend: str) -> None:
    """One graph for a RoPE model (memos that asked ``tensor.is_inference()`` while traced broke
    it in every layer, and ``fullgraph=True`` raised). Forward and backward match eager."""
    torch._dynamo.reset()
    model = tiny("rope").train()
    idx = torch.randint(0, V, (2, 9))
    want = model(idx)
    want.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    got = compiled(idx)
    got.square().mean().backward()
    torch.testing.assert_close(got, want)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], msg=n)


@pytest.mark.parametrize("name", ["rope", "randomized", "pope", "alibi"])
def test_eval_model_compiles_once_per_shape(name: str) -> None:
    """One graph for the whole model in evaluation (randomized: positions pass through; it
    broke the graph in each layer), and no recompilation when the same shape comes again."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = tiny(name).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    idx = torch.randint(0, V, (2, 9))
    want = model(idx)
    for _ in range(3):
        torch.testing.assert_close(compiled(idx), want)
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_inductor_forward_and_backward_match_eager(name: str) -> None:
    torch._dynamo.reset()
    model = tiny(name).train()
    idx = torch.randint(0, V, (2, 9))
    want = model(idx)
    want.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    got = torch.compile(model, fullgraph=True)(idx)
    got.square().mean().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for n, p in model.named_parameters():
        if n in grads:
            scale = grads[n].abs().max().item()
            torch.testing.assert_close(p.grad, grads[n], rtol=1e-3, atol=1e-4 * scale, msg=n)
