"""What the evaluations need from a model and its vocabulary, for any model they take.

``CausalLM`` wraps a transformers causal LM, a posenc ``TinyTransformer`` or a lab model behind
two calls: next-token logits and a greedy continuation. ``Tokenizer`` is text <-> token ids
(a transformers tokenizer, or the lab's character alphabet: ``CharTokenizer``).

Shapes: B batch, T tokens, V vocabulary.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

from ..lab.model import LabModel
from ..models import TinyTransformer


class Tokenizer(Protocol):
    """Text to token ids and back."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class CausalLM:
    """A causal LM as the evaluations call it: ``logits(ids)`` and ``greedy(ids, n)``.

    ``model``: a transformers ``*ForCausalLM`` (anything with ``generate`` and ``config``), a
    ``TinyTransformer`` decoder or a lab ``LabModel`` of a decoder task. ``tokenizer``: its
    text vocabulary, if it has one. Build it with ``as_causal_lm`` or ``load_model``.
    """

    def __init__(self, model: nn.Module, *, tokenizer: Tokenizer | None = None, name: str = ""):
        self.model: Any = model.eval()
        self.tokenizer = tokenizer
        self.name = name or type(model).__name__
        self._net = _posenc_net(model)
        if self._net is None and not (hasattr(model, "generate") and hasattr(model, "config")):
            raise TypeError(
                "model must be a transformers causal LM, a TinyTransformer or a lab model, got "
                f"{type(model).__name__}"
            )
        if self._net is not None and not self._net.causal:
            raise ValueError("model is an encoder (causal=False); the evaluations need a decoder")

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        if self._net is not None:
            return int(self._net.head.out_features)
        return int(self.model.config.get_text_config(decoder=True).vocab_size)

    @torch.no_grad()
    def logits(self, ids: Tensor) -> Tensor:
        """Next-token logits (B, T, V) of token ids (B, T)."""
        ids = ids.to(self.device)
        if self._net is not None:
            return self._net(ids)
        return self.model(input_ids=ids, use_cache=False).logits

    @torch.no_grad()
    def greedy(self, ids: Tensor, n: int) -> Tensor:
        """The ``n`` most likely next tokens (B, n) after ids (B, T), one at a time with a KV
        cache (``generate``; transformers' may stop early at its end-of-text token)."""
        ids = ids.to(self.device)
        if self._net is None:
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                do_sample=False,
                pad_token_id=_pad_id(self.model),
            )
            return out[:, ids.shape[1] :]
        return self._net.generate(ids, n, progress=False)  # (B, n)


def as_causal_lm(model: Any, tokenizer: Any = None) -> CausalLM:
    """``model`` as a ``CausalLM`` (returned as is if it already is one); ``tokenizer``: a
    transformers tokenizer or anything with ``encode``/``decode`` (``Tokenizer``)."""
    if isinstance(model, CausalLM):
        return model
    return CausalLM(model, tokenizer=None if tokenizer is None else as_tokenizer(tokenizer))


def as_tokenizer(tokenizer: Any) -> Tokenizer:
    """A transformers tokenizer (special tokens added as the model was trained: BOS first),
    or an object with ``encode(text)`` and ``decode(ids)``, as a ``Tokenizer``."""
    if hasattr(tokenizer, "batch_decode") and hasattr(tokenizer, "convert_ids_to_tokens"):
        return HFTokenizer(tokenizer)
    if callable(getattr(tokenizer, "encode", None)) and callable(
        getattr(tokenizer, "decode", None)
    ):
        return tokenizer
    raise TypeError(f"tokenizer must have encode() and decode(), got {type(tokenizer).__name__}")


class HFTokenizer:
    """A transformers tokenizer: ``encode`` adds its special tokens, ``decode`` skips them."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))


class CharTokenizer:
    """The lab's character vocabulary (``posenc.lab.tasks.lm``): id ``first + i`` is character
    ``alphabet[i]``, any other character the id after the alphabet."""

    def __init__(self, alphabet: str, first: int) -> None:
        self.alphabet, self.first = alphabet, first
        self._index = {c: first + i for i, c in enumerate(alphabet)}

    def encode(self, text: str) -> list[int]:
        other = self.first + len(self.alphabet)
        return [self._index.get(c, other) for c in text]

    def decode(self, ids: list[int]) -> str:
        n = len(self.alphabet)
        return "".join(self.alphabet[i - self.first] for i in ids if 0 <= i - self.first < n)


def _posenc_net(model: nn.Module) -> TinyTransformer | None:
    if isinstance(model, TinyTransformer):
        return model
    if isinstance(model, LabModel):
        if model.head is not None:
            raise ValueError("lab model of a classification task: the evaluations need a decoder")
        if not isinstance(model.net, TinyTransformer):
            raise ValueError("lab encoder-decoder model: the evaluations need a decoder-only one")
        return model.net
    return None


def _pad_id(model: Any) -> int:
    """generate()'s padding id: the model's pad, else its end-of-text token, else 0."""
    config = model.generation_config
    for value in (config.pad_token_id, config.eos_token_id):
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return 0
