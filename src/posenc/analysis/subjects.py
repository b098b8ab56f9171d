"""What checks and plots run on: small encodings of one geometry, predicates that pick the
checks an encoding gets (from its family and the hooks it overrides), and attention weights.

Shapes: B batch, H heads, T length (Tq, Tk), D head dim, C model width.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from typing import Any, TypeVar

import torch
from torch import Tensor

from ..attention import Attention
from ..encodings.base import PositionalEncoding
from ..models import EncoderDecoder, TinyTransformer
from ..registry import build_for_model, names

#: The geometry every check and plot builds its encodings with.
D_MODEL, N_HEADS, MAX_LEN, VOCAB = 32, 4, 256, 32
HEAD_DIM = D_MODEL // N_HEADS

#: Training length L of the context-extension examples, extended SCALE times.
TRAIN_LEN, SCALE = 64, 4.0
#: One example configuration per context-extension method (``posenc.extension``), for the
#: subjects "rope:<method>" (rotated width 8: pairs i = 2, 3 make < 1 turn in L = 64).
EXAMPLE_SCALINGS: dict[str, dict[str, object]] = {
    "linear": {"factor": SCALE},
    "ntk": {"factor": SCALE},
    "dynamic": {"factor": SCALE, "original_max_position_embeddings": TRAIN_LEN},
    "yarn": {"factor": SCALE, "original_max_position_embeddings": TRAIN_LEN},
    "llama3": {
        "factor": SCALE,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": TRAIN_LEN,
    },
    "longrope": {
        "factor": SCALE,
        "original_max_position_embeddings": TRAIN_LEN,
        "short_factor": [1.0, 1.0, 1.0, 1.0],
        "long_factor": [1.0, 1.5, 3.0, SCALE],
    },
}


def subject(name: str, **config: object) -> PositionalEncoding:
    """Encoding ``name`` built for the shared geometry (extra ``config`` keys passed through;
    ``dim``, ``n_heads`` or ``max_len`` there replace the geometry's; a ``dim`` without
    ``n_heads`` gets H = gcd(dim, 4) heads, so that a table of any width builds: seed 000's
    ``dim=9`` has one head), in eval mode (randomized positions sample only in training).
    "rope:<method>" is RoPE with the example ``EXAMPLE_SCALINGS[method]`` context extension.
    """
    base, _, method = name.partition(":")
    if method:
        if method not in EXAMPLE_SCALINGS:
            raise ValueError(
                f"unknown context extension {method!r} in {name!r}; choose one of "
                f"{sorted(EXAMPLE_SCALINGS)}"
            )
        config = {"scaling": {"rope_type": method, **EXAMPLE_SCALINGS[method]}, **config}
    geometry: dict[str, object] = {"dim": D_MODEL, "n_heads": N_HEADS, "max_len": MAX_LEN}
    dim = config.get("dim")
    if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 and "n_heads" not in config:
        geometry["n_heads"] = math.gcd(dim, N_HEADS)  # H divides C (an odd C: one head)
    pe = build_for_model(base, **(geometry | config))  # type: ignore[arg-type]
    pe = pe.eval()
    if method:
        pe.name = name  # type: ignore[misc]  # an instance label, the class keeps "rope"
    return pe


def subject_names() -> list[str]:
    """Every registered encoding, then "rope:<method>" for each context extension."""
    return [*names(), *(f"rope:{m}" for m in EXAMPLE_SCALINGS)]


def resolve(pe: PositionalEncoding | str) -> PositionalEncoding:
    """An encoding instance from an instance or a subject name (see ``subject``)."""
    if isinstance(pe, str):
        return subject(pe)
    if not isinstance(pe, PositionalEncoding):
        raise TypeError(
            f"expected a PositionalEncoding or a registered name, got {type(pe).__name__}"
        )
    return pe


def geometry_attr(pe: PositionalEncoding, name: str, default: Any) -> Any:
    """Attribute ``name`` of ``pe``, else of the encoding a wrapper forwards its hooks to
    (randomized positions keep ``dim``, ``head_dim``, ``layout`` on their ``base`` encoding),
    else ``default``."""
    if hasattr(pe, name):
        return getattr(pe, name)
    inner = getattr(pe, "base", None)
    if isinstance(inner, PositionalEncoding) and hasattr(inner, name):
        return getattr(inner, name)
    return default


@contextlib.contextmanager
def evaluating(pe: PositionalEncoding) -> Iterator[PositionalEncoding]:
    """``pe`` in eval mode for the block, its mode restored after (randomized positions sample
    only in training, so a probe at positions 0..N-1 must not run in training mode)."""
    was_training = pe.training
    pe.eval()
    try:
        yield pe
    finally:
        pe.train(was_training)


def overrides(pe: PositionalEncoding, hook: str) -> bool:
    """True when ``pe``'s class replaces the identity ``hook`` of the base class."""
    return getattr(type(pe), hook) is not getattr(PositionalEncoding, hook)


def is_additive(pe: PositionalEncoding) -> bool:
    """True when ``embed`` adds something at four positions (``probe_positions``: 0..3, or
    the cells of a 2x2 grid; probed, so wrappers such as randomized positions count only when
    their base encoding adds)."""
    if not overrides(pe, "embed"):
        return False
    zeros = torch.zeros(1, 4, int(geometry_attr(pe, "dim", D_MODEL)), dtype=torch.float64)
    try:
        with torch.no_grad():
            return bool(pe.embed(zeros, probe_positions(pe, 4)).abs().max() > 0)
    except (ValueError, TypeError):
        return False


def is_rotary(pe: PositionalEncoding) -> bool:
    """True when ``rotate`` changes queries or keys at four positions (1..4, or a 2x2 grid
    from (1, 1); probed)."""
    if not overrides(pe, "rotate"):
        return False
    H, D = head_shape(pe)  # its own head_dim when built for another geometry
    x = torch.ones(1, H, 4, D, dtype=torch.float64)  # (B, H, T, D)
    pos = probe_positions(pe, 4, offset=1)
    try:
        with torch.no_grad():
            q, k = pe.rotate(x, x, pos, pos)
    except (ValueError, TypeError):
        return False
    reshaped = q.shape != x.shape or k.shape != x.shape  # e.g. PoPE's (magnitude, phase) features
    return reshaped or bool((q - x).abs().max() > 0 or (k - x).abs().max() > 0)


def is_sequence(pe: PositionalEncoding) -> bool:
    """True for an encoding of 1-D positions (not a grid encoding)."""
    return position_axes(pe) == 1


def has_bias(pe: PositionalEncoding) -> bool:
    """True when ``bias`` returns a tensor for positions 0..3."""
    if not overrides(pe, "bias"):
        return False
    with torch.no_grad():
        return pe.bias(torch.arange(4), torch.arange(4)) is not None


def head_shape(pe: PositionalEncoding) -> tuple[int, int]:
    """(H, D) to feed ``pe.rotate``: the encoding's own head count and head dim when it has
    them (or its wrapped base encoding has), else the shared geometry's."""
    H, D = geometry_attr(pe, "n_heads", N_HEADS), geometry_attr(pe, "head_dim", HEAD_DIM)
    return int(H), int(D)


def model_geometry(pe: PositionalEncoding) -> tuple[int, int]:
    """(C, H) of a model around ``pe``: its own width ``dim``, ``n_heads`` and ``head_dim``
    where it has them (C = H·head_dim without ``dim``), else the shared geometry's, so an
    encoding built for another model (``build("rope", head_dim=64)``) is checked as built.
    Without its own ``n_heads``, H = gcd(C, 4) so that H divides C (``sinusoidal`` dim 6)."""
    H, D = head_shape(pe)
    C = int(geometry_attr(pe, "dim", H * D))
    if geometry_attr(pe, "n_heads", None) is None:
        H = math.gcd(C, H)
    return C, H


def length_dependent(pe: PositionalEncoding) -> bool:
    """True for dynamic context extension: frequencies follow the current length max(pos) + 1,
    so scores at one offset differ between lengths (dynamic NTK, LongRoPE)."""
    return bool(getattr(getattr(pe, "scaling", None), "dynamic", False))


def position_axes(pe: PositionalEncoding) -> int:
    """The position axes A ``pe`` reads (``capabilities.axes``): 1 for sequences."""
    return int(pe.capabilities.axes)


def probe_positions(pe: PositionalEncoding, length: int, *, offset: int = 0) -> Tensor:
    """Positions of ``length`` tokens for ``pe``: offset..offset + T - 1 for a sequence (T,);
    for A > 1 axes, the cells of a grid ceil(sqrt(T)) columns wide in raster order, leading
    axes at 0 ((row, column) or (0, row, column)), every coordinate plus ``offset`` (T, A)."""
    A = position_axes(pe)
    t = torch.arange(length)
    if A == 1:
        return t + offset
    width = math.isqrt(max(length - 1, 0)) + 1  # ceil(sqrt(T))
    lead = torch.zeros(length, A - 2, dtype=torch.long)
    return torch.cat([lead, (t // width)[:, None], (t % width)[:, None]], dim=1) + offset


def is_parameter_free(pe: PositionalEncoding) -> bool:
    return not any(True for _ in pe.parameters())


M = TypeVar("M", Attention, TinyTransformer)


def _tiny(cls: type[M], pe: PositionalEncoding, seed: int, **kwargs: Any) -> M:
    """``cls`` around a private copy of ``pe`` (the caller's is untouched), seeded, in float64
    eval mode, with every non-encoding weight re-drawn at a scale where attention is far from
    uniform, so a position effect is visible in float64 outputs (GPT-2's 0.02 std hides it)."""
    C, H = model_geometry(pe)
    pe = copy.deepcopy(pe)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        module = cls(d_model=C, n_heads=H, pe=pe, **kwargs).double().eval()
    owned = {id(p) for p in pe.parameters()}
    gen = torch.Generator().manual_seed(seed)
    for p in module.parameters():
        if id(p) not in owned and p.ndim == 2:
            p.data.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) / p.shape[-1] ** 0.25)
    return module


def tiny_model(pe: PositionalEncoding, *, causal: bool, seed: int = 0) -> TinyTransformer:
    """A float64 TinyTransformer around a private copy of ``pe`` (see ``_tiny``)."""
    return _tiny(TinyTransformer, pe, seed, vocab_size=VOCAB, causal=causal, max_len=MAX_LEN)


def tiny_attention(pe: PositionalEncoding, *, causal: bool = True, seed: int = 0) -> Attention:
    """A float64 attention layer around a private copy of ``pe`` (see ``_tiny``), built
    ``embedded``: what it is given is taken as already holding an additive encoding's
    ``embed`` (the checks probe the layer's own hooks)."""
    return _tiny(Attention, pe, seed, causal=causal, embedded=True)


def attention_weights(attn: Attention, x: Tensor, pos: Tensor) -> Tensor:
    """Softmax weights (B, H, T, T) that ``attn`` gives x (B, T, C) at positions pos: the
    layer's own ``return_weights=True`` (its explicit path); ``tests/analysis`` checks
    probs @ v against ``attn``'s output."""
    _, weights = attn(x, pos, return_weights=True)
    return weights


def layer_weights(
    net: TinyTransformer | EncoderDecoder, tokens: Tensor, pos: Tensor | None = None
) -> list[Tensor]:
    """Per layer, the weights (B, H, T, T) of ``net`` reading ``tokens`` (B, T) at ``pos`` (the
    default positions when None; (T, A) on a grid); of an ``EncoderDecoder``, its encoder's
    self-attention reading source tokens ``tokens``. Each layer's input and position context
    are captured by a forward pre-hook during one forward, then the layer is called again on
    them with ``return_weights=True``."""
    captured: list[tuple[Attention, Tensor, Any]] = []

    def grab(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        captured.append((module, args[0], kwargs["ctx"]))  # the forward's position context

    blocks: Any = net.encoder if isinstance(net, EncoderDecoder) else net.blocks
    layers = [block.attn for block in blocks]
    hooks = [attn.register_forward_pre_hook(grab, with_kwargs=True) for attn in layers]
    try:
        with torch.no_grad():
            net.encode(tokens) if isinstance(net, EncoderDecoder) else net(tokens, pos)
    finally:
        for h in hooks:
            h.remove()
    with torch.no_grad():
        return [attn(x, ctx=ctx, return_weights=True)[1] for attn, x, ctx in captured]
