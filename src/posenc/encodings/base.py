"""The one interface every positional encoding implements, with identity defaults.

An attention layer calls the hooks in this order (see ``posenc.attention.Attention``):

1. ``embed(x, pos)`` on token embeddings, before the first layer (additive encodings);
2. ``rotate(q, k, q_pos, k_pos)`` on projected heads (rotary encodings);
3. ``bias(q_pos, k_pos)`` added to the scaled logits (score-bias encodings). A function of
   positions only, so a kernel can build it one query block at a time and never hold
   (B, H, Tq, Tk); attention with only this hook runs through SDPA (bias as ``attn_mask``);
4. ``relative_logits(scores, q, k, q_pos, k_pos)`` rewrites the masked, scaled logits with
   content-dependent terms (Shaw keys, Transformer-XL, CoPE);
5. ``relative_values(probs, q_pos, k_pos)`` adds a term to the attention output (Shaw values);
6. ``attention_form(inputs)`` (``capabilities.attention_form``) replaces hooks 2-5 and the
   softmax: the encoding computes the whole causal attention from the layer's input x and its
   q, k, v (FoX, stick-breaking, PaTH: position from the data).

Hooks 4-5 force the explicit attention path. Positions are always explicit int64 tensors of
shape (T,) or (B, T), so KV-cache decoding, offsets, left padding and packing are right; an
encoding of grids (``capabilities.axes`` = A > 1: images, video, M-RoPE) takes (T, A) or
(B, T, A), one coordinate per axis, and refuses 1-D positions (and a 1-D one refuses these).

A subclass declares its ``config_class`` (``posenc.encodings.configs``, shared with
``posenc.flax``): the constructor takes that config's fields as keywords (plus any torch-only
ones it names itself) and keeps the validated ``self.config``, whose fields and properties read
as attributes (``pe.head_dim``).

``prepare(q_pos, k_pos, dtype=...)`` runs once per forward (the model calls it) and returns the
encoding's ``PositionState`` (``posenc.encodings.state``), which every layer receives as
``ctx``: work the layers share (cos/sin tables, randomized draws, Transformer-XL's rows) is
done once, in it. Given a ``ctx``, a hook reads positions and that work from it; called without
one, it checks its inputs and computes what it needs from the positions it is given.

Shapes: B batch, H query heads, Hkv key/value heads, T length (Tq, Tk), D head dim, C width.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NamedTuple, TypeVar, cast

import torch
from torch import Tensor, nn

from .._validate import check_qk as check_qk_inputs
from .._validate import check_scores
from .capabilities import Capabilities
from .configs import EncodingConfig
from .state import PositionState, position_state

#: An encoding's per-forward state type (``PositionState`` or its own subclass).
StateT = TypeVar("StateT", bound=PositionState)


class AttentionInputs(NamedTuple):
    """One causal self-attention call as ``PositionalEncoding.attention_form`` receives it.

    The T new tokens are the last T of the L keys (L = T without a cache).
    x (B, T, C): the layer's input at the new tokens; q (B, H, T, D): their queries; k, v
    (B, Hkv, L, D): every key and value, cached ones first; q_pos (T,) | (B, T) and k_pos
    (L,) | (B, L) int64; valid (B, L) bool, False for padding; segment_ids (B, L) int64, one id
    per packed sequence, padding in a segment of its own (no real query sees it); past
    (B, L - T, E): the terms the hook returned for the cached keys (None when nothing is
    cached); scale: the logits' 1/sqrt(D).
    """

    x: Tensor
    q: Tensor
    k: Tensor
    v: Tensor
    q_pos: Tensor
    k_pos: Tensor
    valid: Tensor
    segment_ids: Tensor
    past: Tensor | None
    scale: float


class PositionalEncoding(nn.Module, Generic[StateT]):
    """Base class: every hook is the identity (no position information), as in NoPE.

    Generic over the encoding's per-forward state ``StateT`` (what ``prepare`` returns and
    every hook receives as ``ctx``).
    Shapes: see the module docstring (B, H, Hkv, T, D, C).
    """

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    #: float buffers that ``model.to(torch.bfloat16)`` / ``.half()`` must move but never cast:
    #: low-precision frequencies ruin rotations at large positions (HF #25681).
    keep_dtype_buffers: ClassVar[tuple[str, ...]] = ()
    #: What the encoding does (``Capabilities``): attention chooses its backend from it. A
    #: subclass that does not declare its own gets its parent's, widened by the hooks it
    #: overrides: its own ``bias`` is "positions" with no fused kernel (an inherited claim
    #: does not cover a new formula).
    capabilities: ClassVar[Capabilities] = Capabilities()
    config_class: ClassVar[type[EncodingConfig]] = EncodingConfig
    #: KV-cache policy read by ``Attention``: "reference" caches keys as ``rotate`` left them;
    #: "rerotate" caches unrotated keys and rotates all of them at every step (dynamic RoPE).
    kv_policy: str = "reference"
    #: Whether ``rotate`` takes ``inplace=True`` (rotation by cos/sin tables: attention
    #: overwrites its fresh projections in inference).
    rotates_in_place: ClassVar[bool] = False
    #: The config's values each module holds as attributes (``pe.head_dim``); by default all
    #: fields and properties but the names the class uses itself (``_config_attributes``).
    config_attributes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **config: object) -> None:
        super().__init__()
        self.config = self.config_class(**config)
        self.__dict__.update({n: getattr(self.config, n) for n in self.config_attributes})

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "capabilities" not in cls.__dict__:
            cls.capabilities = _widened(cls.capabilities, cls.__dict__)
        if cls.capabilities.axes != cls.config_class.axes:  # the config says how many axes
            cls.capabilities = replace(cls.capabilities, axes=cls.config_class.axes)
        if "config_attributes" not in cls.__dict__:
            cls.config_attributes = _config_attributes(cls)
        cls.__signature__ = _signature(cls)  # type: ignore[attr-defined]

    if TYPE_CHECKING:  # the configuration's values (``pe.head_dim``), set by __init__

        def __getattr__(self, name: str) -> Any: ...

    def prepare(
        self,
        q_pos: Tensor,
        k_pos: Tensor | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        offset_bounds: tuple[int, int] | None = None,
    ) -> StateT:
        """The state of one forward: this forward's positions q_pos (T,) | (B, T) and every
        key's k_pos (L,) | (B, L) (default q_pos; with A > 1 axes (T, A) | (B, T, A)), int64
        and already validated; ``dtype`` the model's activation dtype (tables are made in
        float32, or float64 for float64 activations); ``offset_bounds`` host-known bounds of
        q_pos - k_pos, or None. Here the base ``PositionState``: an encoding sharing work
        overrides it with its own state.

        Shapes: q_pos (T,) | (B, T), k_pos (L,) | (B, L) -> the state.
        """
        state = position_state(
            q_pos, k_pos, axes=self.capabilities.axes, offset_bounds=offset_bounds
        )
        return cast(StateT, state)  # (an encoding with its own state overrides ``prepare``)

    def embed(self, x: Tensor, pos: Tensor, *, ctx: StateT | None = None) -> Tensor:
        """Add position information to token embeddings. x (B, T, C), pos (B, T) or (T,)."""
        return x

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: StateT | None = None
    ) -> tuple[Tensor, Tensor]:
        """Rotate queries (B, H, Tq, D) and keys (B, Hkv, Tk, D) by their positions."""
        return q, k

    def bias(self, q_pos: Tensor, k_pos: Tensor, *, ctx: StateT | None = None) -> Tensor | None:
        """Additive logit bias (B or 1, H or 1, Tq, Tk) from positions alone, or None.

        The result must be a tensor the caller owns (attention may mask it in place), finite
        everywhere; causal masking is the attention layer's job. With query blocks, q_pos/k_pos
        are the block's and ``ctx`` the whole call's.
        """
        return None

    def relative_logits(
        self,
        scores: Tensor,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        *,
        ctx: StateT | None = None,
    ) -> Tensor:
        """Rewrite scaled logits (B, H, Tq, Tk), masked entries already -inf. q (B, H, Tq, D),
        k (B, H, Tk, D) with key heads repeated to H. With query blocks, q_pos/k_pos are the
        block's and ``ctx`` the whole call's."""
        return scores

    def relative_values(
        self, probs: Tensor, q_pos: Tensor, k_pos: Tensor, *, ctx: StateT | None = None
    ) -> Tensor | None:
        """Term added to the attention output (B, H, Tq, D) from probs (B, H, Tq, Tk), or None."""
        return None

    def attention_form(self, inputs: AttentionInputs) -> tuple[Tensor, Tensor]:
        """The whole causal attention of one call, from the layer's input and q, k, v.

        For an encoding whose position comes from the data (``capabilities.attention_form``;
        attention calls it in place of rotate, bias, the relative terms and its softmax).
        Shapes: ``inputs`` as ``AttentionInputs`` -> (B, H, T, D) and (B, L, E).

        Returns the output (B, H, T, D), before the output projection, and the terms
        (B, L, E) of every key that the encoding derived from the layer's input (FoX's gates,
        PaTH's w_t and β_t; E = 0 for none), which the KV cache keeps and hands back as
        ``past`` at the next step, so cached decoding equals the full forward.

        Raises: NotImplementedError here: only encodings declaring ``attention_form`` have
        one (see ``posenc.encodings.data_dependent``).
        """
        raise NotImplementedError(
            f"encoding {self.name!r} does not compute attention itself "
            "(capabilities.attention_form is False)"
        )

    def fixed_buffers(self) -> dict[str, Tensor]:
        """The buffers computed from the configuration (frequencies, slopes). Not in the state
        dict (non-persistent), so they are computed again when the module leaves the meta
        device (``to_empty``). Default: none."""
        return {}

    def _fixed_values(self) -> dict[str, Tensor]:
        with torch.device("cpu"):  # host arithmetic, also under torch.device("meta")
            return self.fixed_buffers()

    def register_fixed_buffers(self) -> None:
        """Register ``fixed_buffers()`` (non-persistent) on the default device."""
        device = torch.get_default_device()
        for n, value in self._fixed_values().items():
            self.register_buffer(n, value.to(device), persistent=False)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> PositionalEncoding:
        # Move ``keep_dtype_buffers`` with the module but keep their dtype: casting them to
        # bf16 and back would already have lost the digits.
        saved = {n: self._buffers[n] for n in self.keep_dtype_buffers if n in self._buffers}
        on_meta = [n for n, b in self._buffers.items() if b is not None and b.is_meta]
        super()._apply(fn, recurse)
        for n, original in saved.items():
            moved = self._buffers[n]
            if original is None or moved is None or (original.is_meta and not moved.is_meta):
                continue  # (from meta to a device: computed again below)
            self._buffers[n] = original.to(device=moved.device)
        values = self._fixed_values() if on_meta else {}
        for n in on_meta:  # ``to_empty`` from meta: uninitialised memory, compute them again
            moved = self._buffers[n]
            if n in values and moved is not None and not moved.is_meta:
                dtype = values[n].dtype if n in self.keep_dtype_buffers else moved.dtype
                self._buffers[n] = values[n].to(device=moved.device, dtype=dtype)
        return self

    def extra_repr(self) -> str:
        args = self.config.arguments()
        if not args:
            return f"name={self.name!r}, family={self.family!r}"
        return ", ".join(f"{k}={v!r}" for k, v in args.items())


def _config_attributes(cls: type[PositionalEncoding]) -> tuple[str, ...]:
    """The fields and properties of ``cls.config_class`` that its modules hold as attributes: all
    but the names ``cls`` uses itself, for a method or property or for a buffer it declares
    (annotated without a value, as ``ALiBi.slopes``)."""
    config = cls.config_class
    declared = {n for c in cls.__mro__ for n in vars(c).get("__annotations__", {})}
    names = [*config.keys(), *(n for n, v in inspect.getmembers(config) if isinstance(v, property))]

    def taken(name: str) -> bool:
        value = inspect.getattr_static(cls, name, None)
        buffer = name in declared and not hasattr(cls, name)
        return callable(value) or isinstance(value, property) or buffer

    return tuple(n for n in names if not taken(n))


def _signature(cls: type[PositionalEncoding]) -> inspect.Signature | None:
    """The constructor's signature with ``**config`` spelled out as the config's fields (before
    the torch-only keywords), or None (inspect reads ``__init__``) for another constructor."""
    own = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
    if not own or own[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return None
    fields = inspect.signature(cls.config_class).parameters.values()
    return inspect.Signature([*fields, *own[:-1]])


def _widened(caps: Capabilities, own: Mapping[str, object]) -> Capabilities:
    """``caps`` of a parent, with the hooks a subclass's namespace ``own`` defines."""
    new_bias = "bias" in own or "formula" in own  # (the score biases' ``bias`` calls formula)
    return replace(
        caps,
        embeds=caps.embeds or "embed" in own,
        rotates=caps.rotates or "rotate" in own,
        bias="positions" if new_bias else caps.bias,
        relative_terms=caps.relative_terms or "relative_logits" in own or "relative_values" in own,
        fused=None if new_bias else caps.fused,
        attention_form=caps.attention_form or "attention_form" in own,
    )


def check_qk(
    q: Tensor,
    k: Tensor,
    q_pos: Tensor,
    k_pos: Tensor,
    head_dim: int,
    scores: Tensor | None = None,
    *,
    axes: int = 1,
) -> tuple[Tensor, Tensor]:
    """Validate q (B, H, Tq, D), k (B, Hkv, Tk, D) with D = ``head_dim``, their positions (with
    ``axes`` coordinates each) and the logits ``scores`` (B, H, Tq, Tk) if given; return int64
    positions. Hooks call it without a context only: whoever built a context checked its
    inputs."""
    q_pos, k_pos = check_qk_inputs(q, k, q_pos, k_pos, head_dim, axes=axes)
    if scores is not None:
        check_scores(scores, q, k)
    return q_pos, k_pos


def batch_positions(pos: Tensor, batch: int, axes: int = 1) -> Tensor:
    """Positions (T,) or (1|B, T) as (B, T); with ``axes`` A > 1, (T, A) or (1|B, T, A) as
    (B, T, A) (a view, no copy)."""
    if axes > 1:
        return pos.expand(batch, *pos.shape[-2:])
    return pos.expand(batch, pos.shape[-1]) if pos.ndim == 1 or pos.shape[0] == 1 else pos


def default_positions(
    length: int, *, offset: int = 0, device: torch.device | None = None
) -> Tensor:
    """0-based positions offset .. offset + length - 1, int64, shape (T,)."""
    return torch.arange(offset, offset + length, dtype=torch.long, device=device)
