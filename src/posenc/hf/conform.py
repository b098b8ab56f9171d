"""One model's RoPE as three runtimes compute it: transformers, posenc and llama.cpp.

The same config gives different numbers in different runtimes (YaRN's attention factor
dropped or recomputed, dynamic NTK served static, LongRoPE's short/long switch). ``conform``
puts side by side, for one ``config.json`` or GGUF file: the inverse frequencies θ_i, the
attention factor (the magnitude of cos and sin, so q·k scales by its square) and cos/sin at
chosen positions, computed

- by transformers: the model type's own ``*RotaryEmbedding`` module (``ROPE_INIT_FUNCTIONS``
  and its dynamic update), float32 as it runs;
- by posenc: ``rope_from_hf`` (float64);
- by llama.cpp: ggml's ``rope_yarn`` (ggml-cpu ``rope_yarn``, ``rope_yarn_ramp``,
  ``ggml_rope_yarn_corr_dims``) on the parameters llama.cpp's context derives from GGUF
  metadata (src/llama-context.cpp: ``yarn_ext_factor``, ``yarn_attn_factor``), written here in
  float64 from that source. A config.json is first translated as llama.cpp's
  ``convert_hf_to_gguf.py`` writes it (``llamacpp_from_config``); a GGUF file is read as is.
  For a GGUF file, transformers' column is its own GGUF loader's config
  (``from_pretrained(gguf_file=...)``) and posenc's the one ``posenc.hf.load_gguf`` builds.

Shapes: P = rotary pairs, T = positions.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "Column",
    "Conformance",
    "LlamaCppRope",
    "conform",
    "llamacpp_attn_factor",
    "llamacpp_cos_sin",
    "llamacpp_from_config",
    "llamacpp_from_gguf",
    "rope_yarn",
    "rope_yarn_corr_dims",
    "rope_yarn_ramp",
]

_F32 = float(np.finfo(np.float32).eps)


# -- ggml's rope, float64 ------------------------------------------------------------------------


def rope_yarn_corr_dims(
    n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float
) -> tuple[float, float]:
    """ggml's YaRN correction range [low, high] in pair indices.

    corr_dim(β) = n_dims·ln(n_ctx_orig / (2π·β)) / (2·ln base), the pair that turns β times over
    the original context; low = max(0, floor(corr_dim(beta_fast))), high = min(n_dims - 1,
    ceil(corr_dim(beta_slow))) (ggml.c ``ggml_rope_yarn_corr_dims``; YaRN, Peng et al. 2023,
    arXiv:2309.00071, eq. 17-18).
    """

    def corr_dim(n_rot: float) -> float:
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(freq_base))

    low = math.floor(corr_dim(beta_fast))
    high = math.ceil(corr_dim(beta_slow))
    return max(0.0, float(low)), min(float(n_dims - 1), float(high))


def rope_yarn_ramp(low: float, high: float, i0: int) -> float:
    """ggml's ramp at feature index i0 (even; pair i0/2): 1 - clamp((i0/2 - low) /
    max(0.001, high - low), 0, 1): 1 below ``low`` (extrapolate), 0 above ``high``."""
    y = (i0 // 2 - low) / max(0.001, high - low)
    return 1.0 - min(1.0, max(0.0, y))


def rope_yarn(
    theta_extrap: float,
    freq_scale: float,
    corr_dims: tuple[float, float],
    i0: int,
    ext_factor: float,
    mscale: float,
) -> tuple[float, float]:
    """ggml's ``rope_yarn``: cos and sin of one angle, times the magnitude.

    θ_interp = freq_scale·θ_extrap; with ext_factor ≠ 0, θ = θ_interp·(1 - r) + θ_extrap·r
    for r = ramp(i0)·ext_factor, and mscale *= 1 + 0.1·ln(1/freq_scale); returns
    (cos θ·mscale, sin θ·mscale).
    """
    theta = freq_scale * theta_extrap
    if ext_factor != 0.0:
        mix = rope_yarn_ramp(corr_dims[0], corr_dims[1], i0) * ext_factor
        theta = theta * (1 - mix) + theta_extrap * mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    return math.cos(theta) * mscale, math.sin(theta) * mscale


def _get_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1.0 else 0.1 * mscale * math.log(scale) + 1.0


def llamacpp_attn_factor(
    kind: str,
    factor: float,
    *,
    log_mul: float = 0.0,
    rope_attn_factor: float = 1.0,
    deepseek2: bool = False,
    ext_factor: float | None = None,
) -> float:
    """The magnitude llama.cpp gives cos and sin: the ``attn_factor`` its context passes to
    ggml's rope times the op's own 1 + 0.1·ln(s) (src/llama-context.cpp).

    With YaRN's ramp on (ext_factor ≠ 0, the default for ``kind`` "yarn"): get_mscale(s, 1)
    (= 0.1·ln s + 1), or get_mscale(s, m)/get_mscale(s, m_all) when ``log_mul`` (the GGUF
    ``yarn_log_multiplier`` / 0.1 = mscale_all_dim) is set (m = 1; m = m_all for DeepSeek-V2,
    whose softmax scale carries the rest); times ``rope_attn_factor`` (``rope.scaling.attn_
    factor``). Otherwise ``rope_attn_factor``. ``rope.scaling.yarn_attn_factor`` is not read:
    llama.cpp recomputes it.
    """
    ext = (1.0 if kind == "yarn" else 0.0) if ext_factor is None or ext_factor < 0 else ext_factor
    if ext == 0.0:
        return rope_attn_factor
    if log_mul != 0.0:
        mscale = log_mul if deepseek2 and log_mul != 1.0 else 1.0
        attn = _get_mscale(factor, mscale) / _get_mscale(factor, log_mul)
    else:
        attn = _get_mscale(factor, 1.0)
    # the context divides attn by 1 + 0.1 ln(s), which the op multiplies back in
    return attn * rope_attn_factor


@dataclass(frozen=True)
class LlamaCppRope:
    """The arguments of ggml's rope op in llama.cpp for one model: rotated dims, base,
    freq_scale = 1/factor, YaRN's ext_factor and correction betas, the original context,
    per-pair frequency divisors (Llama 3's ``rope_freqs``, LongRoPE's factors) and the
    magnitude of cos/sin (``llamacpp_attn_factor``); ``notes``: what llama.cpp leaves out."""

    n_dims: int
    freq_base: float
    freq_scale: float = 1.0
    ext_factor: float = 0.0
    magnitude: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    n_ctx_orig: int = 0
    freq_factors: tuple[float, ...] | None = None
    notes: tuple[str, ...] = ()


def llamacpp_cos_sin(rope: LlamaCppRope, positions: Sequence[int]) -> tuple[np.ndarray, ...]:
    """(θ' (P,), cos (T, P), sin (T, P)) float64 as ggml's rope computes them: θ_extrap =
    p·base^(-2i/n_dims)/ff_i, then ``rope_yarn``; θ' is the angle at p = 1 (angles are linear
    in p)."""
    P = rope.n_dims // 2
    corr = rope_yarn_corr_dims(
        rope.n_dims, rope.n_ctx_orig or 1, rope.freq_base, rope.beta_fast, rope.beta_slow
    )
    # the op applies 1 + 0.1 ln(1/freq_scale) itself: hand it the magnitude without it
    mscale = rope.magnitude
    if rope.ext_factor != 0.0:
        mscale /= 1.0 + 0.1 * math.log(1.0 / rope.freq_scale)
    ff = rope.freq_factors or (1.0,) * P
    theta_scale = rope.freq_base ** (-2.0 / rope.n_dims)

    def angle(p: float, i: int) -> tuple[float, float]:
        return rope_yarn(
            p * theta_scale**i / ff[i], rope.freq_scale, corr, 2 * i, rope.ext_factor, mscale
        )

    freqs = np.empty(P)
    for i in range(P):
        c, s = angle(1.0, i)
        freqs[i] = math.atan2(s, c)
    cos, sin = np.empty((len(positions), P)), np.empty((len(positions), P))
    for t, p in enumerate(positions):
        for i in range(P):
            cos[t, i], sin[t, i] = angle(float(p), i)
    return freqs, cos, sin


def _llama3_freq_factors(theta: np.ndarray, spec: Mapping[str, Any]) -> tuple[float, ...]:
    """The ``rope_freqs`` tensor convert_hf_to_gguf.py writes for Llama 3's scaling: per pair
    1 (wavelength < L/high), ``factor`` (> L/low), else 1/((1 - σ)/factor + σ) with
    σ = (L/λ - low)/(high - low), λ = 2π/θ_i."""
    factor, low = float(spec["factor"]), float(spec.get("low_freq_factor", 1.0))
    high, L = (
        float(spec.get("high_freq_factor", 4.0)),
        float(spec["original_max_position_embeddings"]),
    )
    out = []
    for freq in theta:
        wavelen = 2 * math.pi / freq
        if wavelen < L / high:
            out.append(1.0)
        elif wavelen > L / low:
            out.append(factor)
        else:
            smooth = (L / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return tuple(out)


def llamacpp_from_config(
    cfg: Mapping[str, Any], n_ctx: int, layer_type: str | None = None
) -> LlamaCppRope:
    """llama.cpp's rope for a config.json (flat dict), as convert_hf_to_gguf.py writes it to
    GGUF and llama.cpp reads it back, with a context of ``n_ctx`` tokens.

    linear: freq_scale 1/s. yarn: freq_scale 1/s, ext_factor 1, betas, original context;
    ``attention_factor``/``mscale``/``mscale_all_dim``/``truncate`` are not used (recorded in
    ``notes``; DeepSeek-V2/V3's mscale_all_dim is, as ``yarn_log_multiplier``). llama3: the
    ``rope_freqs`` factors. longrope: the long factors when n_ctx > the original context, else
    the short ones, magnitude √(1 + ln(s)/ln L) for s = max/original as the converter writes
    it for Phi-3. dynamic: none (llama.cpp has no dynamic NTK: plain RoPE). ``layer_type``:
    one entry of per-layer rope parameters (Gemma 3's sliding layers: ``rope.freq_base_swa``).
    """
    from .rope_config import _as_dict, _head_dim, _rope_params

    flat = _as_dict(cfg)
    params = _rope_params(flat, layer_type)
    head_dim = _head_dim(flat)
    n_dims = int(head_dim * float(params["partial_rotary_factor"]))
    base, kind = float(params["rope_theta"]), params["rope_type"]
    max_len = int(flat.get("max_position_embeddings") or 0)
    original = int(
        flat.get("original_max_position_embeddings")
        or params.get("original_max_position_embeddings")
        or max_len
    )
    notes: list[str] = []
    if kind == "linear":
        return LlamaCppRope(n_dims, base, freq_scale=1.0 / float(params["factor"]))
    if kind == "yarn":
        factor = float(params.get("factor") or max_len / original)
        deepseek = flat.get("model_type") in ("deepseek_v2", "deepseek_v3")
        unused = ("attention_factor", "truncate") + (() if deepseek else ("mscale",))
        for key in unused:
            if params.get(key) is not None:
                notes.append(f"llama.cpp does not use rope_parameters[{key!r}] = {params[key]!r}")
        if deepseek:
            notes.append("DeepSeek's softmax scale (mscale_all_dim²) is not compared")
        log_mul = float(params.get("mscale_all_dim") or 0.0) if deepseek else 0.0
        if params.get("mscale_all_dim") and not deepseek:
            notes.append(
                f"llama.cpp does not use rope_parameters['mscale_all_dim'] = "
                f"{params['mscale_all_dim']!r} for model_type {flat.get('model_type')!r}"
            )
        magnitude = llamacpp_attn_factor("yarn", factor, log_mul=log_mul, deepseek2=deepseek)
        return LlamaCppRope(
            n_dims,
            base,
            freq_scale=1.0 / factor,
            ext_factor=1.0,
            magnitude=magnitude,
            beta_fast=float(params.get("beta_fast") or 32.0),
            beta_slow=float(params.get("beta_slow") or 1.0),
            n_ctx_orig=original,
            notes=tuple(notes),
        )
    if kind == "llama3":
        theta = base ** (-np.arange(0, n_dims, 2) / n_dims)
        spec = {**params, "original_max_position_embeddings": original}
        return LlamaCppRope(n_dims, base, freq_factors=_llama3_freq_factors(theta, spec))
    if kind == "longrope":
        scale = max_len / original if original else 1.0
        magnitude = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0
        if params.get("attention_factor") is not None:
            notes.append(
                f"convert_hf_to_gguf.py writes attn_factor √(1 + ln(s)/ln L) = {magnitude:.6g}, "
                f"not rope_parameters['attention_factor'] = {params['attention_factor']!r}"
            )
        long = n_ctx > original
        factors = params["long_factor" if long else "short_factor"]
        return LlamaCppRope(
            n_dims,
            base,
            magnitude=magnitude,
            n_ctx_orig=original,
            freq_factors=tuple(float(f) for f in factors),
            notes=(*notes, f"{'long' if long else 'short'} factors: n_ctx {n_ctx} vs {original}"),
        )
    if kind == "dynamic":
        notes.append("llama.cpp has no dynamic NTK: plain RoPE at rope_theta")
    elif kind != "default":
        notes.append(f"llama.cpp's converter does not write rope_type {kind!r}: plain RoPE")
    return LlamaCppRope(n_dims, base, notes=tuple(notes))


def llamacpp_from_gguf(file: Any, n_ctx: int) -> LlamaCppRope:
    """llama.cpp's rope for a GGUF file (``posenc.hf.gguf.read_gguf``) with a context of
    ``n_ctx`` tokens: ``rope.freq_base``, ``rope.dimension_count``, ``rope.scaling.type`` /
    ``factor`` / ``original_context_length`` / ``yarn_*`` / ``attn_factor``.

    Raises: ValueError for per-frequency factor tensors (not read here) or a scaling type
    posenc does not know.
    """
    kind = str(file.get("rope.scaling.type", "none"))
    factor = float(file.get("rope.scaling.factor", 0.0) or 0.0)
    freq_scale = 1.0 / factor if kind != "none" and factor not in (0.0,) else 1.0
    head_dim = int(
        file.get("attention.key_length")
        or int(file.get("embedding_length")) // int(file.get("attention.head_count"))
    )
    factors = sorted(n for n in file.tensors if n.startswith(("rope_freqs", "rope_factors")))
    if factors:
        raise ValueError(f"per-frequency factor tensors {factors} are not read by conform")
    if kind not in ("none", "linear", "yarn"):
        raise ValueError(f"rope.scaling.type {kind!r} is not read (none, linear, yarn)")
    ext_key = file.get("rope.scaling.yarn_ext_factor")
    ext = float(ext_key) if ext_key is not None and float(ext_key) >= 0 else None
    ext_factor = (1.0 if kind == "yarn" else 0.0) if ext is None else ext
    notes = []
    if file.get("rope.scaling.yarn_attn_factor") is not None and ext_factor != 0.0:
        notes.append(
            "llama.cpp does not use rope.scaling.yarn_attn_factor = "
            f"{file.get('rope.scaling.yarn_attn_factor')!r}: it recomputes it"
        )
    log_mul = float(file.get("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1  # as stored
    if log_mul != 0.0 and file.architecture != "deepseek2":
        notes.append(
            f"llama.cpp's {file.architecture} loader does not read rope.scaling.yarn_log_multiplier"
        )
        log_mul = 0.0
    magnitude = llamacpp_attn_factor(
        kind,
        1.0 / freq_scale,
        log_mul=log_mul,
        rope_attn_factor=float(file.get("rope.scaling.attn_factor", 1.0)),
        deepseek2=file.architecture == "deepseek2",
        ext_factor=ext,
    )
    original = int(
        file.get("rope.scaling.original_context_length") or file.get("context_length") or n_ctx
    )
    return LlamaCppRope(
        int(file.get("rope.dimension_count", head_dim)),
        float(file.get("rope.freq_base", 10000.0)),
        freq_scale=freq_scale,
        ext_factor=ext_factor,
        magnitude=magnitude,
        beta_fast=float(file.get("rope.scaling.yarn_beta_fast", 32.0)),
        beta_slow=float(file.get("rope.scaling.yarn_beta_slow", 1.0)),
        n_ctx_orig=original,
        notes=tuple(notes),
    )


# -- transformers and posenc ------------------------------------------------------------------


@dataclass
class Column:
    """One runtime's numbers: θ (P,), the attention factor, cos and sin (T, P), notes."""

    name: str
    inv_freq: np.ndarray
    attention_factor: float
    cos: np.ndarray
    sin: np.ndarray
    notes: tuple[str, ...] = ()


def _rotary_class(model_type: str) -> Any:
    """The ``*RotaryEmbedding`` class of a transformers model type (the text one first)."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    module_name = model_type_to_module_name(model_type)
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    names = [n for n in dir(module) if n.endswith("RotaryEmbedding")]
    text = [n for n in names if "Vision" not in n and "Audio" not in n]
    if not text:
        raise ValueError(f"transformers' {model_type!r} has no rotary embedding class")
    prefix = type(_hf_config(model_type, {})).__name__.removesuffix("Config")
    text.sort(key=lambda n: (not n.startswith(prefix), len(n)))
    return getattr(module, text[0])


def _hf_config(model_type: str, cfg: Mapping[str, Any]) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **{k: v for k, v in cfg.items() if k != "model_type"})


def _compact(out: Any, P: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (..., P) of a rotary module's output (a complex tensor or a pair)."""
    if isinstance(out, torch.Tensor):
        return out.real, out.imag
    cos, sin = out
    if cos.shape[-1] == P:
        return cos, sin
    if torch.equal(cos[..., :P], cos[..., P:]):
        return cos[..., :P], sin[..., :P]
    return cos[..., ::2], sin[..., ::2]


def transformers_column(
    config: Any, positions: Sequence[int], seq_len: int, layer_type: str | None = None
) -> Column:
    """transformers' numbers: the model type's rotary module called at positions 0..seq_len-1
    (its dynamic update sees that length), float32."""
    cls = _rotary_class(config.model_type)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    module = cls(config=text)
    pos = torch.arange(seq_len)[None]  # (1, L)
    x = torch.zeros(1, 1, dtype=torch.float32)
    out = module(x, pos) if layer_type is None else module(x, pos, layer_type)
    prefix = "" if layer_type is None else f"{layer_type}_"
    inv_freq = getattr(module, f"{prefix}inv_freq").double().numpy()
    scale = float(
        getattr(module, f"{prefix}attention_scaling", getattr(module, "attention_scaling", 1.0))
    )
    cos, sin = _compact(out, inv_freq.shape[-1])
    index = torch.tensor(list(positions))
    return Column(
        "transformers",
        inv_freq,
        scale,
        cos[0, index].double().numpy(),
        sin[0, index].double().numpy(),
    )


def posenc_column(
    config: Any, positions: Sequence[int], seq_len: int, layer_type: str | None = None
) -> Column:
    """posenc's numbers: ``rope_from_hf`` (float64 angles) at the length ``seq_len``."""
    from ..encodings.rotary import RoPE
    from .rope_config import rope_from_hf

    rope = rope_from_hf(config, layer_type=layer_type)
    if not isinstance(rope, RoPE):
        raise ValueError(f"conform compares 1-D RoPE; this config is {rope.name!r}")
    inv_freq, scale = rope.frequencies(seq_len)
    cos, sin = rope.cos_sin(torch.tensor(list(positions)), torch.float64, seq_len)
    return Column(
        "posenc", np.asarray(inv_freq, dtype=np.float64), float(scale), cos.numpy(), sin.numpy()
    )


def llamacpp_column(rope: LlamaCppRope, positions: Sequence[int]) -> Column:
    """llama.cpp's numbers (``llamacpp_cos_sin``), float64."""
    freqs, cos, sin = llamacpp_cos_sin(rope, positions)
    return Column("llama.cpp", freqs, rope.magnitude, cos, sin, rope.notes)


# -- the comparison ------------------------------------------------------------------------------


@dataclass
class Conformance:
    """The columns of one model and where they differ from the first (transformers)."""

    source: str
    positions: tuple[int, ...]
    seq_len: int
    columns: list[Column]
    differences: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        """JSON form: per column θ, attention factor, cos/sin and notes; the differences."""
        return {
            "source": self.source,
            "positions": list(self.positions),
            "seq_len": self.seq_len,
            "agree": self.agree,
            "differences": self.differences,
            "columns": {
                c.name: {
                    "inv_freq": c.inv_freq.tolist(),
                    "attention_factor": c.attention_factor,
                    "cos": c.cos.tolist(),
                    "sin": c.sin.tolist(),
                    "notes": list(c.notes),
                }
                for c in self.columns
            },
        }

    def render(self) -> str:
        """A text table: θ_i at five pairs, the attention factor, the largest cos/sin gap per
        position, each column's notes, and the differences (marked ``!=``)."""
        ref = self.columns[0]
        P = ref.inv_freq.shape[-1]
        picks = sorted({0, P // 4, P // 2, (3 * P) // 4, P - 1})
        width = 16
        head = f"{'':<22}" + "".join(f"{c.name:>{width}}" for c in self.columns)
        lines = [f"conform {self.source} (length {self.seq_len})", head]
        for i in picks:
            cells = "".join(f"{c.inv_freq[i]:>{width}.9g}" for c in self.columns)
            lines.append(f"{f'inv_freq[{i}]':<22}{cells}")
        cells = "".join(f"{c.attention_factor:>{width}.9g}" for c in self.columns)
        lines.append(f"{'attention factor':<22}{cells}")
        for t, p in enumerate(self.positions):
            cells = "".join(
                f"{_gap(c, ref, t):>{width}.3g}" if c is not ref else f"{'(reference)':>{width}}"
                for c in self.columns
            )
            lines.append(f"{f'max |Δcos,sin| @ {p}':<22}{cells}")
        for c in self.columns:
            lines.extend(f"note ({c.name}): {n}" for n in c.notes)
        lines.extend(f"!= {d}" for d in self.differences)
        lines.append("agree" if self.agree else f"disagree ({len(self.differences)})")
        return "\n".join(lines)


def _gap(c: Column, ref: Column, t: int) -> float:
    return float(max(np.abs(c.cos[t] - ref.cos[t]).max(), np.abs(c.sin[t] - ref.sin[t]).max()))


def _differences(columns: list[Column], positions: Sequence[int]) -> list[str]:
    """What differs from the first column beyond float32 rounding: θ by > 1e-5 relative, the
    attention factor by > 1e-6 relative, cos/sin by > 1e-5 + 4·eps32·p·max θ at position p."""
    ref, out = columns[0], []
    for c in columns[1:]:
        if c.inv_freq.shape != ref.inv_freq.shape:
            out.append(
                f"{c.name}: {c.inv_freq.shape[-1]} pairs, {ref.name} {ref.inv_freq.shape[-1]}"
            )
            continue
        rel = np.abs(c.inv_freq - ref.inv_freq) / np.abs(ref.inv_freq)
        if rel.max() > 1e-5:
            i = int(rel.argmax())
            out.append(
                f"{c.name} inv_freq differs at {int((rel > 1e-5).sum())} of {rel.size} pairs "
                f"(most at pair {i}: {c.inv_freq[i]:.9g} vs {ref.name} {ref.inv_freq[i]:.9g})"
            )
        if abs(c.attention_factor - ref.attention_factor) > 1e-6 * abs(ref.attention_factor):
            out.append(
                f"{c.name} attention factor {c.attention_factor:.9g} vs {ref.name} "
                f"{ref.attention_factor:.9g}"
            )
        top = float(np.abs(ref.inv_freq).max())
        for t, p in enumerate(positions):
            tol = 1e-5 + 4 * _F32 * p * top
            gap = _gap(c, ref, t)
            if gap > tol:
                out.append(f"{c.name} cos/sin at position {p} differ by {gap:.3g} (> {tol:.2g})")
    return out


def conform(
    path: str | Path,
    positions: Sequence[int] = (0, 1, 100, 1000),
    *,
    seq_len: int | None = None,
    layer_type: str | None = None,
) -> Conformance:
    """transformers, posenc and llama.cpp's RoPE for a config.json or a .gguf file at
    ``positions`` with a context (llama.cpp's n_ctx, transformers' current length) of
    ``seq_len`` tokens (default max(positions) + 1).

    Raises: ValueError for a file that is neither, a negative position, or a config one of the
    runtimes cannot read (the message names which).
    """
    import json

    path = Path(path)
    positions = tuple(int(p) for p in positions)
    if not positions or min(positions) < 0:
        raise ValueError(f"positions must be non-negative integers, got {list(positions)}")
    length = max(positions) + 1 if seq_len is None else int(seq_len)
    if length <= max(positions):
        raise ValueError(f"seq_len {length} must exceed the largest position {max(positions)}")
    if path.suffix == ".gguf":
        from transformers import AutoConfig

        from .gguf import gguf_config, read_gguf

        file = read_gguf(path)
        ours = gguf_config(file)  # as posenc.hf.load_gguf builds the model
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        llama = llamacpp_from_gguf(file, length)
    elif path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not JSON: {err.msg}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
            raise ValueError(f"{path} is not a config.json with a 'model_type'")
        config = ours = _hf_config(raw["model_type"], raw)
        llama = llamacpp_from_config(config.to_dict(), length, layer_type)
    else:
        raise ValueError(f"expected a config.json or a .gguf file, got {str(path)!r}")
    columns = [
        transformers_column(config, positions, length, layer_type),
        posenc_column(ours, positions, length, layer_type),
        llamacpp_column(llama, positions),
    ]
    return Conformance(str(path), positions, length, columns, _differences(columns, positions))
