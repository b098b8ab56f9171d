"""Per-layer schedules: the encoding and the local attention (sliding window, chunk) of each
layer of a ``TinyTransformer`` (torch's or Flax's), and presets of shipped models' rules.

A schedule's three patterns (``pe``, ``window``, ``chunk``) each repeat to the model's depth:
layer i takes entry i mod len(pattern), so ``pe=("rope", "rope", "rope", "nope")`` is a NoPE
layer every fourth layer at any depth (a model shallower than a pattern takes its first
entries, as transformers' rules do). An
encoding entry is a built encoding (shared by the layers that list that object), a
registered name, or (name, extra config): the model builds each distinct one once, so its
position context is made once per forward for all the layers that share it.

The presets (each the rule of transformers' implementation of that model family; tests
compare them with transformers' configurations and layers):

- ``irope``: Llama 4 (Meta 2025; transformers ``llama4``): chunked attention with RoPE
  (base 500000, adjacent pairs: ``layout="interleaved"``) on three layers of four, NoPE
  with full attention on every fourth (``no_rope_layers``, ``attention_chunk_size``), its
  queries scaled by Llama 4's temperature (``attn_temperature_tuning``: ``nope_temperature``).
- ``rnope_swa``: RNoPE-SWA (Yang et al. 2025, arXiv:2501.18795; Cohere's Command R7B and A,
  transformers ``cohere2``): RoPE with a sliding window on three layers of four, NoPE with
  full attention on every fourth.
- ``smollm3``: SmolLM3 (Hugging Face 2025; transformers ``smollm3``): RoPE (base 2e6) with
  full attention, NoPE on every fourth layer (``no_rope_layers``).
- ``gemma2`` and ``gemma3``: Gemma 2 (arXiv:2408.00118) alternates sliding-window and global
  layers, RoPE base 10k on both; Gemma 3 (arXiv:2503.19786) five sliding layers (base 10k,
  ``rope_local_base_freq``) to one global layer (base 1M) (``layer_types``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, Never, TypeVar

from ._validate import check_bool, check_positive_int

#: A built encoding (torch's or Flax's ``PositionalEncoding``).
E = TypeVar("E", covariant=True)
#: Extra configuration of an encoding given by name (as ``pe_config``).
Config = Mapping[str, object]
#: An encoding by name: a registered name, or (name, extra config).
Named = str | tuple[str, Config]


class Layer(NamedTuple, Generic[E]):
    """One layer's entries: its encoding (built, or by name), its sliding window W and its
    chunk C (None: none)."""

    pe: E | Named
    window: int | None
    chunk: int | None


class BuiltLayer(NamedTuple, Generic[E]):
    """One layer of a model: its built encoding, sliding window W and chunk C (None: none)."""

    pe: E
    window: int | None
    chunk: int | None


@dataclass(frozen=True)
class LayerSchedule(Generic[E]):
    """The encoding, sliding window and chunk of each layer.

    The encoding, sliding window and chunk of each layer, as patterns repeated to the
    model's depth (see the module docstring).

    Raises: TypeError for a pattern that is not a sequence; ValueError for an empty pattern or
    a window or chunk that is not None or a positive int.
    """

    pe: tuple[E | Named, ...]
    window: tuple[int | None, ...] = (None,)
    chunk: tuple[int | None, ...] = (None,)

    def __post_init__(self) -> None:
        for what in ("pe", "window", "chunk"):
            pattern = getattr(self, what)
            if isinstance(pattern, str) or not isinstance(pattern, Sequence):
                raise TypeError(
                    f"{what} must be a sequence (a pattern), got {type(pattern).__name__}"
                )
            if not pattern:
                raise ValueError(f"{what} must hold at least one entry, got an empty pattern")
            object.__setattr__(self, what, tuple(pattern))
        for what in ("window", "chunk"):
            for entry in getattr(self, what):
                if entry is not None:
                    check_positive_int(entry, f"each {what}")

    def layers(self, n_layers: int) -> list[Layer[E]]:
        """The entries of each of ``n_layers`` layers: layer i takes entry i mod len of each
        pattern.

        Raises: TypeError/ValueError unless ``n_layers`` is an int >= 1."""
        check_positive_int(n_layers, "n_layers")
        return [
            Layer(
                self.pe[i % len(self.pe)],
                self.window[i % len(self.window)],
                self.chunk[i % len(self.chunk)],
            )
            for i in range(n_layers)
        ]

    @property
    def local(self) -> bool:
        """Whether some layer has a sliding window or a chunk."""
        return any(w is not None for w in self.window) or any(c is not None for c in self.chunk)


def named_config(entry: Named) -> tuple[str, dict[str, object]]:
    """(name, extra config) of an encoding by name."""
    return (entry, {}) if isinstance(entry, str) else (entry[0], dict(entry[1]))


def named_key(entry: Named) -> tuple[str, str]:
    """A hashable key of an encoding by name (its config's items by ``repr``: values may be
    dicts, as RoPE's ``scaling``): equal entries are built once per model."""
    name, config = named_config(entry)
    return name, repr(sorted(config.items()))


def cache_keep(window: int | None, chunk: int | None) -> int | None:
    """Entries a local layer's cache must keep between steps (``KVCache(keep=...)``): the
    W - 1 keys before a query in its window, the C - 1 before it in its chunk (the fewer of
    the two); None: every entry."""
    limits = [n - 1 for n in (window, chunk) if n is not None]
    return min(limits) if limits else None


def irope(
    *,
    interval: int = 4,
    chunk: int = 8192,
    base: float = 500000.0,
    temperature: bool = True,
    floor_scale: int = 8192,
    attn_scale: float = 0.1,
) -> LayerSchedule[Never]:
    """Llama 4's iRoPE schedule: chunked RoPE layers with one NoPE layer per interval.

    Llama 4's iRoPE: RoPE (``base``) with chunked attention (``chunk``) on every layer but
    each ``interval``-th, which has NoPE and full attention (transformers ``Llama4TextConfig``:
    ``no_rope_layers[i] = int((i + 1) % no_rope_layer_interval != 0)``, ``layer_types``
    "chunked_attention" where it rotates); adjacent pairs rotate (``layout="interleaved"``:
    its ``apply_rotary_emb`` reads pairs as complex numbers). The NoPE layers scale their
    queries by τ(p) = log(⌊(p + 1) / floor_scale⌋ + 1) · attn_scale + 1
    (``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``: ``nope_temperature``);
    ``temperature=False`` leaves them plain NoPE.
    Raises: TypeError/ValueError unless ``interval`` is an int >= 2 and ``temperature`` a
    bool (``floor_scale`` and ``attn_scale`` are checked where the encoding is built).
    """
    check_positive_int(interval, "interval", minimum=2)
    check_bool(temperature, "temperature")
    rope: Named = ("rope", {"base": base, "layout": "interleaved"})
    nope: Named = (
        ("nope_temperature", {"floor_scale": floor_scale, "attn_scale": attn_scale})
        if temperature
        else "nope"
    )
    return LayerSchedule(
        pe=(rope,) * (interval - 1) + (nope,), chunk=(chunk,) * (interval - 1) + (None,)
    )


def rnope_swa(
    *, interval: int = 4, window: int = 4096, base: float = 10000.0
) -> LayerSchedule[Never]:
    """RNoPE-SWA's schedule: sliding RoPE layers with one full NoPE layer per interval.

    RNoPE-SWA (Yang et al. 2025, arXiv:2501.18795): RoPE (``base``) with a sliding window of
    ``window`` keys on every layer but each ``interval``-th, which has NoPE and full attention
    (transformers ``cohere2``: ``layer_types`` "sliding_attention" where (i + 1) %
    ``sliding_window_pattern`` != 0, rotary only on the sliding layers).
    Raises: TypeError/ValueError unless ``interval`` is an int >= 2.
    """
    check_positive_int(interval, "interval", minimum=2)
    rope: Named = ("rope", {"base": base})
    return LayerSchedule(
        pe=(rope,) * (interval - 1) + ("nope",), window=(window,) * (interval - 1) + (None,)
    )


def smollm3(*, interval: int = 4, base: float = 2_000_000.0) -> LayerSchedule[Never]:
    """SmolLM3's schedule: RoPE layers with one NoPE layer per interval.

    SmolLM3: RoPE (``base``) on every layer but each ``interval``-th, which has NoPE; full
    attention everywhere (transformers ``SmolLM3Config.no_rope_layers``).
    Raises: TypeError/ValueError unless ``interval`` is an int >= 2.
    """
    check_positive_int(interval, "interval", minimum=2)
    rope: Named = ("rope", {"base": base})
    return LayerSchedule(pe=(rope,) * (interval - 1) + ("nope",))


def gemma2(*, window: int = 4096, base: float = 10000.0) -> LayerSchedule[Never]:
    """Gemma 2's schedule: sliding-window and global layers alternating.

    Gemma 2: sliding-window layers (``window`` keys) alternating with global ones, layer 0
    sliding; RoPE ``base`` on both (transformers ``Gemma2Config.layer_types``)."""
    return LayerSchedule(pe=(("rope", {"base": base}),), window=(window, None))


def gemma3(
    *,
    interval: int = 6,
    window: int = 4096,
    local_base: float = 10000.0,
    global_base: float = 1_000_000.0,
) -> LayerSchedule[Never]:
    """Gemma 3's schedule: local RoPE layers with one global layer per interval.

    Gemma 3: RoPE ``local_base`` with a sliding window of ``window`` keys on every layer but
    each ``interval``-th, global with RoPE ``global_base`` (transformers
    ``Gemma3TextConfig``: ``sliding_window_pattern`` 6, ``rope_local_base_freq`` 10k,
    ``rope_theta`` 1M).
    Raises: TypeError/ValueError unless ``interval`` is an int >= 2.
    """
    check_positive_int(interval, "interval", minimum=2)
    local: Named = ("rope", {"base": local_base})
    return LayerSchedule(
        pe=(local,) * (interval - 1) + (("rope", {"base": global_base}),),
        window=(window,) * (interval - 1) + (None,),
    )


#: The presets by name.
PRESETS = {
    "irope": irope,
    "rnope_swa": rnope_swa,
    "smollm3": smollm3,
    "gemma2": gemma2,
    "gemma3": gemma3,
}
