"""Attention sinks for a transformers model's ``generate()``: ``SinkCache`` (StreamingLLM).

transformers >= 4.53 no longer ships a ``SinkCache`` (5.23 has none). This one keeps, per layer,
the first S tokens and the latest W - 1 (a step attends to those plus its own tokens), and
assigns positions inside the cache as Xiao et al. 2023 (arXiv:2309.17453) do: while the cache
is entered (``with cache:``) a hook on the model replaces ``position_ids`` by cache positions,
so queries and new keys are rotated there by the model itself; when W - 1 latest keys move
down by δ slots on eviction they are rotated back by δ positions (RoPE composes:
R(-δ)R(p) = R(p - δ)), in float64. Needs transformers (imported with this module).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache, DynamicLayer

from .. import functional as PF
from .._validate import check_positive_int
from ..encodings.rotary import RoPE
from ..hf.rope_config import rope_from_hf

#: Config keys of rotary layouts this cache cannot shift: multi-head latent attention keeps
#: the rotated part at the end of each key (DeepSeek-V2/V3), Llama 4 has layers without RoPE.
_UNSUPPORTED_KEYS = ("qk_rope_head_dim", "no_rope_layers")


class SinkCache(Cache):
    """``SinkCache(model, window=W, sinks=S)``: stream a transformers causal LM past its window.

    Use it entered, for ``generate()`` or direct calls::

        with SinkCache(model, window=1020, sinks=4) as cache:
            out = model.generate(ids, past_key_values=cache, max_new_tokens=4096)

    Decoding one token at a time, each token attends to the first S tokens and the last W
    (itself included), at positions 0..S+W-1. Rows must be unpadded (an all-ones
    ``attention_mask`` is dropped). ``get_seq_length()`` counts every token seen (so
    ``generate()`` slices its inputs right); the mask and positions use the kept ones.

    Raises: ValueError for a bad window/sinks, a model whose rotary embedding this cache cannot
    shift (frequencies that follow the length: dynamic, longrope; rotary features that are
    not the first ones of each key: MLA; layers without RoPE: Llama 4; per-layer RoPE), or a
    forward outside ``with cache:`` (its positions would not be the cache's).
    """

    def __init__(self, model: Any, *, window: int, sinks: int = 4) -> None:
        check_positive_int(window, "window")
        check_positive_int(sinks, "sinks", minimum=0)
        config = model.config.get_text_config(decoder=True)
        rope = _shiftable_rope(config)
        layers: list[Any] = [
            _SinkLayer(window, sinks, rope) for _ in range(config.num_hidden_layers)
        ]
        super().__init__(layers=layers)
        self.model, self.window, self.sinks = model, window, sinks
        self._hooks: list[Any] = []
        self._in_forward = False

    def __enter__(self) -> SinkCache:
        pre = self.model.register_forward_pre_hook(self._positions, with_kwargs=True)
        post = self.model.register_forward_hook(self._forward_done)
        self._hooks = [pre, post]
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks, self._in_forward = [], False

    def kept(self, layer_idx: int = 0) -> int:
        """Entries of layer ``layer_idx`` the next step attends to besides its own tokens."""
        layer = self.layers[layer_idx]
        return layer.kept() if isinstance(layer, _SinkLayer) else 0

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.kept(layer_idx)

    def update(
        self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        """transformers' ``Cache.update``, allowed only inside ``with SinkCache(...)``.

        Raises: ValueError when called outside the ``with`` block (positions would be wrong)."""
        if not self._in_forward:
            raise ValueError(
                "SinkCache assigns positions inside the cache: call the model inside "
                "`with SinkCache(model, ...) as cache:`"
            )
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def _positions(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """Forward pre-hook: cache positions kept..kept+T-1 for this call's T tokens."""
        if kwargs.get("past_key_values") is not self:
            return None
        tokens = kwargs.get("input_ids")
        tokens = args[0] if tokens is None and args else tokens
        tokens = kwargs["inputs_embeds"] if tokens is None else tokens  # (B, T) or (B, T, C)
        mask = kwargs.get("attention_mask")
        if mask is not None and not bool(mask.bool().all()):
            raise ValueError("SinkCache streams unpadded rows; got an attention_mask with padding")
        start, T = self.kept(), tokens.shape[1]
        pos = torch.arange(start, start + T, device=tokens.device)[None]  # (1, T)
        self._in_forward = True
        return args, {**kwargs, "attention_mask": None, "position_ids": pos}

    def _forward_done(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self._in_forward = False


class _SinkLayer(DynamicLayer):
    """One layer's keys (B, Hkv, L, D), rotated at their cache positions, and values."""

    is_croppable = False

    def __init__(self, window: int, sinks: int, rope: RoPE) -> None:
        super().__init__()
        self.window, self.sinks, self.rope = window, sinks, rope
        self.seen = 0

    def kept(self) -> int:
        return 0 if self.keys is None or not self.is_initialized else self.keys.shape[-2]

    def update(
        self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        """Return the kept entries then the new ones (what this step attends to); keep the
        first S and the latest W - 1 of them for the next step."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.seen += key_states.shape[-2]
        assert self.keys is not None and self.values is not None  # lazy_initialization made them
        keys = torch.cat([self.keys, key_states], dim=-2)  # (B, Hkv, L, D)
        values = torch.cat([self.values, value_states], dim=-2)
        L, S, recent = keys.shape[-2], self.sinks, self.window - 1
        if L <= S + recent:
            self.keys, self.values = keys, values
            return keys, values
        shift = L - recent - S  # the latest W - 1 move down by this many slots
        moved = self._rotate(keys[..., L - recent :, :], -shift)
        self.keys = torch.cat([keys[..., :S, :], moved], dim=-2)
        self.values = torch.cat([values[..., :S, :], values[..., L - recent :, :]], dim=-2)
        return keys, values

    def _rotate(self, keys: Tensor, by: int) -> Tensor:
        """Keys rotated by ``by`` more positions: R(by) on each rotary pair (float64 angles)."""
        pos = torch.tensor([by], dtype=torch.long, device=keys.device)
        cos, sin = PF.rope_cos_sin(pos, self.rope.inv_freq64.to(keys.device))  # (1, P)
        return PF.apply_rope(keys, cos, sin, layout=self.rope.layout)

    def get_seq_length(self) -> int:
        return self.seen

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.kept() + query_length, 0

    def get_max_length(self) -> int:
        return self.sinks + self.window - 1

    def reset(self) -> None:
        super().reset()
        self.seen = 0

    def crop(self, tokens_to_remove: int) -> None:
        raise ValueError("SinkCache cannot be cropped: evicted tokens are gone")


def _shiftable_rope(config: Any) -> RoPE:
    """The model's RoPE (``rope_from_hf``) when keys can be shifted by a fixed rotation."""
    found = [k for k in _UNSUPPORTED_KEYS if getattr(config, k, None) is not None]
    if found:
        raise ValueError(
            f"SinkCache cannot shift the keys of model_type {config.model_type!r} ({found[0]}: "
            "its rotary features are not the leading ones of every layer's keys)"
        )
    try:
        rope = rope_from_hf(config)
    except ValueError as err:  # per-layer RoPE (Gemma 2/3) or a rope type posenc lacks
        raise ValueError(f"SinkCache needs one RoPE for every layer: {err}") from None
    if not isinstance(rope, RoPE):
        raise ValueError(f"SinkCache needs 1-D RoPE; model_type {config.model_type!r} uses M-RoPE")
    if rope.dynamic:
        raise ValueError(
            f"SinkCache needs fixed RoPE frequencies; rope_type "
            f"{rope.scaling.to_dict()['rope_type']!r} changes them with the sequence length"
        )
    return rope
