"""``patch(model)``: posenc's RoPE inside a loaded transformers model; ``unpatch`` undoes it.

What is replaced, per instance (the modeling modules and other models stay untouched):

1. each rotary embedding module (``*RotaryEmbedding`` with a config, ``forward(x,
   position_ids[, layer_type])``) by a ``RotaryEmbedding`` built from ``rope_from_hf`` of its
   own config: the same form of cos and sin, from float64 angles, with ``scaling`` if given;
   M-RoPE modules (an ``mrope_section``: Qwen-VL text models, 3-D position ids) by posenc's
   ``MRoPE`` with the module's own sections, contiguous or interleaved as it computes them;
   two-axis M-RoPE without sections (NeoMME: (2, B, T) ids, row and column alternating) by
   ``TwoAxisMRoPE``; vision towers' axial RoPE (``rope_type: "axial"``, (N, 2) or (B, N, 2)
   grid ids) by ``RoPE2D`` or another arrangement of ``axial_config``; layer types whose
   ``rope_parameters`` are None (no position) get none, as in the module;
2. in the attention modules under the same parent, the function that rotates q and k by
   posenc's ``kernel`` (``rotate.verified``), unless ``kernel=None``;
3. under a new ``scaling``, the softmax scale of attention modules whose architecture ties it
   to YaRN's ``mscale_all_dim`` (DeepSeek-V2/V3: ``attention_from_hf``);
4. GPT-J and CodeGen, which have no rotary module: each attention's sin/cos table.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from ..encodings.grid_rotary import RoPE2D
from ..encodings.mrope import MRoPE
from ..encodings.rotary import RoPE
from ..extension.config import ScalingConfig
from ..hf.attention_config import MSCALE_SOFTMAX_MODEL_TYPES, attention_from_hf
from ..hf.axial_config import ColumnsFirstRoPE2D, PixtralRoPE2D
from ..hf.mrope_config import ErnieMRoPE, TwoAxisMRoPE
from ..hf.rope_config import rope_from_hf
from ..kernels.rope import Kernel, check_kernel
from . import rotate
from .rotary import (
    FORMS,
    Rope,
    RotaryEmbedding,
    detect_form,
    detect_output,
    keeps_float32,
    sample_positions,
    takes_layer_type,
)

__all__ = ["is_patched", "patch", "unpatch"]

_RECORD = "_posenc_patch"
#: Architectures whose attention layers hold their own sin/cos table (``embed_positions``).
_TABLE_MODEL_TYPES = frozenset({"gptj", "codegen"})


@dataclass
class _Patch:
    """What ``patch`` changed, for ``unpatch``: replaced submodules (parent, name, original),
    modules given their own forward, replaced tables (module, original) and softmax scales."""

    modules: list[tuple[nn.Module, str, nn.Module]] = field(default_factory=list)
    forwards: list[nn.Module] = field(default_factory=list)
    buffers: list[tuple[nn.Module, Tensor]] = field(default_factory=list)
    scalings: list[tuple[nn.Module, float]] = field(default_factory=list)


def is_patched(model: nn.Module) -> bool:
    """Whether ``patch`` was applied to ``model`` (and not undone)."""
    return getattr(model, _RECORD, None) is not None


def patch(
    model: nn.Module,
    *,
    scaling: ScalingConfig | Mapping[str, Any] | None = None,
    kernel: Kernel | None = "auto",
) -> nn.Module:
    """Replace a loaded transformers model's rotary handling with posenc's.

    Replace the rotary position handling of a loaded transformers model with posenc's, in
    place; returns the model.

    Unchanged settings give the model's logits within transformers' float32 rounding of the
    angles pos·θ (posenc's are float64), in forward, ``generate()`` and with left padding.
    ``scaling`` (a ``rope_scaling`` dict such as ``{"rope_type": "yarn", "factor": 4.0,
    "original_max_position_embeddings": 4096}``, or a ScalingConfig) applies a context-extension
    method at inference: the logits of the same model built with that ``rope_scaling`` (as in
    ``rope_from_hf``: theta and partial rotary kept; per-layer models scale their
    "full_attention" layers). Query temperatures a model reads from its config at each forward
    (Llama 4, Ministral 3) stay its own.
    ``kernel``: the posenc RoPE kernel that rotates q and k ("auto", "eager", "cpp",
    "inductor", "triton"; see ``posenc.kernels.rope``), or None to keep the model's own rotation
    function and replace only the angles. GPT-J and CodeGen keep their angles in a fixed table
    (rebuilt at the model's length times the scaling's factor: static methods only) and rotate
    q and k in separate calls, by posenc's eager kernel. Before using them, patch compares its
    embeddings and its rotation with the model's own, and refuses what it cannot reproduce.

    Raises: ValueError for a model already patched, one without a rotary embedding posenc can
    replace, or a config ``rope_from_hf`` refuses (each error names why); TypeError for a bad
    ``scaling``; RuntimeError for a kernel that cannot run here; TypeError for a ``model``
    that is not a torch module (None: a load that returned nothing).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be a loaded transformers model (a torch.nn.Module), got "
            f"{type(model).__name__}"
        )
    if is_patched(model):
        raise ValueError("model is already patched by posenc.hf.patch; call unpatch(model) first")
    if kernel is not None:
        check_kernel(kernel)
    record = _Patch()
    try:
        for owner, name, original in _rotaries(model):
            _patch_rotary(record, owner, name, original, scaling, kernel)
        for module in _table_attentions(model):
            _patch_table(record, model.config, module, scaling, kernel)
    except BaseException:
        _undo(record)
        raise
    if not record.modules and not record.buffers:
        skipped = "; ".join(sorted(set(_unreplaceable(model))))
        raise ValueError(
            f"{type(model).__name__} has no rotary embedding posenc can replace (a module "
            "'*RotaryEmbedding' with a config and forward(x, position_ids), or GPT-J's "
            f"per-layer table){': it has ' + skipped if skipped else ''}"
        )
    setattr(model, _RECORD, record)
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo ``patch``, exactly.

    Undo ``patch``: the original modules, forwards and softmax scales, exactly; returns the
    model. Raises: ValueError for a model ``patch`` did not change."""
    record = getattr(model, _RECORD, None)
    if record is None:
        raise ValueError("model is not patched by posenc.hf.patch")
    _undo(record)
    delattr(model, _RECORD)
    return model


def _undo(record: _Patch) -> None:
    for owner, name, original in reversed(record.modules):
        current = getattr(owner, name)
        device = next((b.device for b in current.buffers()), None)
        setattr(owner, name, original if device is None else original.to(device))
    for module in record.forwards:
        rotate.uninstall(module)
    for module, table in record.buffers:
        module.register_buffer("embed_positions", table.to(_device(module)), persistent=False)
    for module, scale in record.scalings:
        setattr(module, "scaling", scale)  # noqa: B010 (an attribute of transformers' module)


def _rotaries(model: nn.Module) -> Iterator[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, module) of each text rotary embedding: a ``*RotaryEmbedding`` with a
    ``config`` whose forward takes ``position_ids`` (vision towers' rotaries take none)."""
    for path, module in list(model.named_modules()):
        if not type(module).__name__.endswith("RotaryEmbedding") or isinstance(
            module, RotaryEmbedding
        ):
            continue
        if getattr(module, "config", None) is None:
            continue
        if "position_ids" not in inspect.signature(module.forward).parameters:
            continue
        parent, _, name = path.rpartition(".")
        yield model.get_submodule(parent), name, module


def _unreplaceable(model: nn.Module) -> Iterator[str]:
    """Each ``*RotaryEmbedding`` that ``_rotaries`` skips, with the form it computes by:
    no config (a vision tower's or ESM's, sized by its arguments) or a forward without
    position ids (a sequence length, a grid)."""
    for module in model.modules():
        name = type(module).__name__
        if not name.endswith("RotaryEmbedding") or isinstance(module, RotaryEmbedding):
            continue
        args = ", ".join(list(inspect.signature(module.forward).parameters)[:3])
        no_config = getattr(module, "config", None) is None
        yield f"{name} (forward({args}){', no config' if no_config else ''})"


def _ropes(original: nn.Module, scaling: Any) -> dict[str | None, Rope]:
    """posenc RoPE per layer type (None without types) for a rotary module's config; M-RoPE or
    axial RoPE (one, without layer types) for the modules that compute those."""
    config: Any = original.config
    sections = getattr(original, "mrope_section", None)
    if isinstance(sections, Mapping):  # Cohere Compass: M-RoPE sections per layer type
        return {t: _mrope(original, s, scaling, layer_type=t) for t, s in sections.items()}
    if sections is not None:
        return {None: _mrope(original, sections, scaling)}
    if (getattr(config, "rope_parameters", None) or {}).get("rope_type") == "axial":
        return {None: _axial(original, scaling)}
    nested = any(
        isinstance(v, Mapping) for v in (getattr(config, "rope_parameters", None) or {}).values()
    )
    if not takes_layer_type(original) or not (getattr(config, "layer_types", None) or nested):
        # Evolla's SaProt rotary takes a layer_type its config has none of: one RoPE
        return {None: _one_axis(rope_from_hf(config, scaling=scaling), config)}
    layer_types = getattr(original, "layer_types", None) or sorted(set(config.layer_types))
    params = getattr(config, "rope_parameters", None) or {}
    # rope_parameters[t] None: layers of type t take no position embeddings (Beam's NoPE
    # full-attention layers); the rotary module skips them, and so does its replacement
    rotated = [t for t in layer_types if not (t in params and params[t] is None)]
    if not rotated:
        raise ValueError(
            f"{type(original).__name__}: every layer type {list(layer_types)} has "
            "rope_parameters None (no position embeddings), so there is no RoPE to replace"
        )
    return {
        t: _one_axis(rope_from_hf(config, layer_type=t, scaling=scaling), config) for t in rotated
    }


def _grid_inputs(
    original: nn.Module, what: str, scaling: Any, layer_type: str | None = None
) -> tuple[float, int]:
    """(rope_theta, number of frequencies) of an M-RoPE or axial rotary module, read from its
    config and its ``inv_freq`` buffer (the comparison in ``detect_form`` checks both); of
    ``layer_type``'s ``rope_parameters`` and ``{layer_type}_inv_freq`` when given.
    Raises: ValueError for a context-extension ``scaling`` or a module without them."""
    name = type(original).__name__
    if scaling is not None:
        raise ValueError(
            f"{name} computes {what}; patch applies no context-extension scaling to it "
            f"(got {dict(scaling) if isinstance(scaling, Mapping) else scaling!r})"
        )
    params = getattr(original.config, "rope_parameters", None) or {}
    buffer = "inv_freq" if layer_type is None else f"{layer_type}_inv_freq"
    if layer_type is not None:
        params = params.get(layer_type) or {}
    inv_freq = getattr(original, buffer, None)
    if "rope_theta" not in params or not isinstance(inv_freq, Tensor):
        raise ValueError(
            f"{name} computes {what} without rope_parameters['rope_theta'] and an {buffer}"
        )
    return float(params["rope_theta"]), int(inv_freq.numel())


def _mrope(
    original: nn.Module, sections: Any, scaling: Any, layer_type: str | None = None
) -> MRoPE:
    """posenc's M-RoPE that gives ``original``'s cos and sin (of ``layer_type``, when given):
    its ``mrope_section`` (what it uses, the built-in default when the config has none),
    contiguous or interleaved, or ERNIE 4.5 VL's arrangement (``ErnieMRoPE``), whichever
    equals its output at 3-D positions whose axes differ.
    Raises: ValueError when neither does (another recomposition of the axes)."""
    base, pairs = _grid_inputs(original, "M-RoPE (3-D position ids)", scaling, layer_type)
    if not isinstance(sections, list | tuple) or len(sections) != 3:
        raise ValueError(
            f"{type(original).__name__} has mrope_section {sections!r}; posenc's M-RoPE takes "
            "three sections (t, h, w)"
        )
    ordered = tuple(int(n) for n in sections)
    h, w, t = ordered
    candidates: list[tuple[str, Callable[..., MRoPE]]] = [
        ("contiguous", partial(MRoPE, mrope_section=ordered, interleaved=False)),
        ("interleaved", partial(MRoPE, mrope_section=ordered, interleaved=True)),
        # ERNIE 4.5 VL lists its sections (h, w, t) and alternates h and w (ErnieMRoPE)
        ("ERNIE's", partial(ErnieMRoPE, mrope_section=(t, h, w))),
    ]
    tried = []
    for label, make in candidates:
        try:
            mrope = make(head_dim=2 * pairs, base=base)
            detect_form(original, {layer_type: mrope})
        except ValueError as err:
            tried.append(f"{label}: {err}")
            continue
        return mrope
    raise ValueError(
        f"{type(original).__name__} recombines M-RoPE's axes (mrope_section {list(sections)}) "
        "in a way posenc's MRoPE does not (contiguous or interleaved sections, or ERNIE 4.5 "
        f"VL's h/w alternation): {tried[0]}"
    )


def _axial(original: nn.Module, scaling: Any) -> RoPE2D:
    """posenc's axial 2-D RoPE for a vision tower's ``rope_type: "axial"`` module: whichever
    of the arrangements of ``axial_config`` equals its output at grid positions whose rows and
    columns differ: rows first (``RoPE2D``, θ_j = theta^(-4j/D) on both axes: transformers'
    ``compute_axial_rope_parameters``, D/4 frequencies), columns first (Step3p7), or
    Pixtral's (D/2 frequencies, the even ones for rows and the odd ones for columns).
    Raises: ValueError when none does."""
    base, n = _grid_inputs(original, "axial RoPE (2-D grid positions)", scaling)
    candidates: list[tuple[str, Callable[[], RoPE2D]]] = [
        ("rows first", lambda: RoPE2D(head_dim=4 * n, base=base, sections=(n, n))),
        ("columns first", lambda: ColumnsFirstRoPE2D(head_dim=4 * n, base=base, sections=(n, n))),
        ("Pixtral's", lambda: PixtralRoPE2D(head_dim=2 * n, base=base)),
    ]
    tried = []
    for label, make in candidates:
        try:
            rope = make()
            detect_output(original, {None: rope})
        except ValueError as err:
            tried.append(f"{label}: {err}")
            continue
        return rope
    raise ValueError(
        f"{type(original).__name__} (rope_type 'axial') computes 2-D position embeddings "
        "posenc's axial RoPE does not (rows first, columns first or Pixtral's frequencies, in "
        f"the {'/'.join(FORMS)} forms, at (N, 2) or (B, N, 2) ids): {tried[0]}"
    )


def _one_axis(pe: Any, config: Any) -> RoPE:
    """``pe`` when it rotates by 1-D positions. M-RoPE is patched from the rotary module's own
    ``mrope_section`` (``_mrope``); a config that reads as M-RoPE in a module without one is
    refused (which sections it computes is unknown)."""
    if not isinstance(pe, RoPE):
        raise ValueError(
            f"model_type {getattr(config, 'model_type', None)!r} reads as {pe.name!r} (3-D "
            "position ids) but its rotary module has no mrope_section, so patch cannot tell the "
            "sections it computes: build it with posenc.rope_from_hf and posenc.mrope_positions"
        )
    return pe


def _position_axes(original: nn.Module, layer_type: str | None) -> int:
    """The number of position axes A (2 or 3) of a rotary module read as 1-D RoPE whose
    (A, B, T) ids give other embeddings than their first axis's (M-RoPE without an
    ``mrope_section``: NeoMME's two axes), else 0."""
    t = torch.arange(8, device=_device(original))
    x = torch.zeros(1, 8, 1, device=t.device)
    for axes in (2, 3):
        pos = torch.stack([(a + 1) * t % (5 + 2 * a) for a in range(axes)])[:, None]  # (A, 1, T)
        args = () if layer_type is None else (layer_type,)
        try:
            theirs, first = original(x, pos, *args), original(x, pos[0], *args)
        except Exception:  # a 1-D rotary: (A, B, T) ids do not fit it
            continue
        pairs = list(zip(theirs, first, strict=False)) if isinstance(theirs, tuple) else []
        same_shape = bool(pairs) and all(a.shape == b.shape for a, b in pairs)
        if same_shape and not all(torch.allclose(a, b) for a, b in pairs):
            return axes
    return 0


def _two_axis(
    original: nn.Module, ropes: dict[str | None, Rope], axes: int, scaling: Any
) -> dict[str | None, Rope]:
    """posenc's two-axis M-RoPE per layer type for a rotary module that reads (``axes``, B, T)
    ids without an ``mrope_section`` (NeoMME): each type's 1-D RoPE (its base and rotated
    width) as ``TwoAxisMRoPE`` with interleaved (row0-col0-row1-col1) or contiguous sections,
    whichever equals the module's output at ids whose axes differ.

    Raises: ValueError for three axes (which sections is unknown), a context-extension
    ``scaling`` or a layer type's RoPE with scaling, or when neither arrangement matches."""
    name = type(original).__name__
    refusal = (
        f"{name} reads {axes}-axis position ids ({axes}, B, T) (M-RoPE) but has no "
        "mrope_section, so patch cannot tell the sections it computes"
    )
    if axes != 2:
        raise ValueError(
            f"{refusal}; posenc's MRoPE takes three contiguous or interleaved sections"
        )
    if scaling is not None:
        raise ValueError(
            f"{name} computes two-axis M-RoPE ((2, B, T) position ids); patch applies no "
            f"context-extension scaling to it (got "
            f"{dict(scaling) if isinstance(scaling, Mapping) else scaling!r})"
        )
    out: dict[str | None, Rope] = {}
    for layer_type, rope in ropes.items():
        if not isinstance(rope, RoPE) or rope.config.scaling is not None:
            raise ValueError(f"{refusal}: layer type {layer_type!r} has rope scaling")
        tried = []
        for interleaved in (True, False):
            two = TwoAxisMRoPE(
                head_dim=rope.rotary_dim,
                base=rope.config.base,
                interleaved=interleaved,
                layout=rope.layout,
            )
            try:
                detect_output(original, {layer_type: two})
            except ValueError as err:
                tried.append(str(err))
                continue
            out[layer_type] = two
            break
        else:
            raise ValueError(
                f"{refusal}; posenc's two-axis M-RoPE (interleaved or contiguous sections) "
                f"does not give its embeddings: {tried[0]}"
            )
    return out


def _device(module: nn.Module) -> torch.device:
    return next((b.device for b in module.buffers()), torch.device("cpu"))


def _patch_rotary(
    record: _Patch,
    owner: nn.Module,
    name: str,
    original: nn.Module,
    scaling: Any,
    kernel: Kernel | None,
) -> None:
    """Replace one rotary module; then the rotation and softmax scale of the attention
    modules under ``owner`` (the model that hands its embeddings to its layers)."""
    unscaled = _ropes(original, None)
    axes = 0
    if all(type(r) is RoPE for r in unscaled.values()):
        axes = _position_axes(original, next(iter(unscaled)))
    if axes:
        unscaled = _two_axis(original, unscaled, axes, scaling)
    form, lead = detect_output(original, unscaled)
    ropes = unscaled if axes else _ropes(original, scaling)
    float32 = form != "complex" and keeps_float32(original, unscaled)
    replacement = RotaryEmbedding(ropes, form, original.config, lead=lead, float32=float32)
    replacement = replacement.to(_device(original))
    setattr(owner, name, replacement)
    record.modules.append((owner, name, original))
    factor = _logit_factor(original.config, scaling)
    attentions = [m for m in owner.modules() if rotate.rotations_in(m)]
    for module in attentions:
        if factor != 1.0 and all(m is not module for m, _ in record.scalings):
            _rescale(record, module, factor)
    if kernel is not None:
        _install_rotations(record, attentions, replacement, kernel)


def _install_rotations(
    record: _Patch, attentions: list[nn.Module], rotary: RotaryEmbedding, kernel: Kernel
) -> None:
    """Give each attention module posenc's rotation in place of each rotation function its
    forward calls, checked once per (class, function) against the original."""
    device = _device(rotary)
    first: Any = next(iter(rotary.ropes.values()))
    pos = sample_positions(first, 5, device)
    sample = rotary(torch.zeros(1, 5, 1, device=device), pos, rotary.layer_types[0])
    if isinstance(sample, tuple) and sample[0].ndim == 2:
        # axial RoPE's (N, 2P) embeddings (Pixtral's tower unsqueezes them at 0): compare the
        # rotations on (1, N, 2P), the batched shape ``verified`` hands them in
        sample = tuple(e[None] for e in sample)
    layout = first.layout
    checked: dict[tuple[type, str], rotate.Rotation] = {}
    for module in attentions:
        names = rotate.rotations_in(module)
        for fn in names:
            if (type(module), fn) not in checked:
                original = type(module).forward.__globals__[fn]
                checked[type(module), fn] = rotate.verified(
                    fn, original, sample, rotary.form, str(layout), kernel
                )
        rotate.install(module, {fn: checked[type(module), fn] for fn in names})
        if all(m is not module for m in record.forwards):
            record.forwards.append(module)


def _logit_factor(config: Any, scaling: Any) -> float:
    """new / old softmax-scale factor under ``scaling`` (1.0 without one or for models whose
    softmax scale does not follow the rope parameters)."""
    if scaling is None or getattr(config, "model_type", None) not in MSCALE_SOFTMAX_MODEL_TYPES:
        return 1.0
    old = attention_from_hf(config).logit_scale
    return attention_from_hf(config, scaling=scaling).logit_scale / old


def _rescale(record: _Patch, module: nn.Module, factor: float) -> None:
    scale = getattr(module, "scaling", None)
    if not isinstance(scale, float):
        raise ValueError(
            f"{type(module).__name__} has no float 'scaling' to multiply by the new softmax "
            f"factor {factor} (mscale_all_dim)"
        )
    record.scalings.append((module, scale))
    setattr(module, "scaling", scale * factor)  # noqa: B010


def _table_attentions(model: nn.Module) -> Iterator[nn.Module]:
    """GPT-J / CodeGen attention modules: each holds a [sin | cos] table ``embed_positions``."""
    if getattr(getattr(model, "config", None), "model_type", None) not in _TABLE_MODEL_TYPES:
        return
    for module in model.modules():
        if isinstance(module._buffers.get("embed_positions"), Tensor):
            yield module


def _patch_table(
    record: _Patch, config: Any, module: nn.Module, scaling: Any, kernel: Kernel | None
) -> None:
    """GPT-J / CodeGen: the [sin | cos] table (L, 2P) from posenc's float64 angles, L the
    model's length (times the scaling's factor), and posenc's rotation.

    Raises: ValueError for a dynamic method (a fixed table has one length's frequencies).
    """
    rope = rope_from_hf(config, scaling=scaling)
    if rope.dynamic:
        raise ValueError(
            f"{config.model_type} looks its angles up in a fixed table: dynamic scaling "
            f"({rope.scaling.method}) needs the current length; give a static method (linear, "
            "ntk, yarn, llama3)"
        )
    old: Any = module._buffers["embed_positions"]  # (L, 2P)
    factor = getattr(rope.scaling, "factor", 1.0)
    cos, sin = rope.cos_sin(torch.arange(int(old.shape[0] * factor)))  # (L', P)
    table = torch.cat([sin, cos], dim=-1).to(old.device, old.dtype)
    record.buffers.append((module, old))
    module.register_buffer("embed_positions", table, persistent=False)
    if kernel is not None:
        original = type(module).forward.__globals__["apply_rotary_pos_emb"]
        rotate.install(module, {"apply_rotary_pos_emb": rotate.single(original)})
        record.forwards.append(module)
