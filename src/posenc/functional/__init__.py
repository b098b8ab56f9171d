"""posenc.functional: the one implementation of each positional-encoding formula.

Pure functions, keyword-only hyperparameters, written against the Python array API so the
same call computes on NumPy arrays and torch tensors. Fast implementations of these formulas
(caches, compiled and hand-written kernels) live in ``posenc.kernels``, which imports this
package, never the other way round.
"""

from ._xp import namespace, np_xp, torch_xp
from .alibi import alibi_bias, alibi_slopes
from .cope import cope_interpolate, cope_positions
from .fire import fire_distance, fire_mlp, fire_mlp_pieces, fire_normaliser, fire_psi
from .forgetting import forgetting_attention
from .frequencies import angles, inv_freq_series, p_rope_inv_freq, rope_inv_freq, wavelengths
from .kerple import (
    KERPLE_VARIANTS,
    KerpleVariant,
    check_kerple,
    kerple_bias,
    kerple_log,
    kerple_power,
)
from .path import path_attention, path_attention_cached
from .pope import pope_features, pope_polar, softplus
from .relative import relative_offsets
from .resample import RESAMPLE_MODES, ResampleMode, check_grid, resample_table
from .rotary import LAYOUTS, Layout, apply_rope, apply_rope_pair, rope_cos_sin, rotary_dim
from .rotary_nd import (
    axial_inv_freq,
    axis_angles,
    check_sections,
    mixed_angles,
    mixed_inv_freq,
    pair_axes,
)
from .shaw import (
    gather_relative,
    relative_key_logits,
    relative_value_output,
    shaw_relative_index,
)
from .sincos_2d import sincos_2d_table
from .sinks import attention_with_sinks, softmax_with_sinks
from .sinusoidal import shift_matrix, sinusoidal_table
from .stick_breaking import stick_breaking_attention
from .t5 import check_t5_buckets, t5_relative_bucket
from .temperature import query_temperature
from .transformer_xl import transformer_xl_position_rows, transformer_xl_terms
from .xpos import check_xpos_range, xpos_max_position, xpos_scale

__all__ = [
    "KERPLE_VARIANTS",
    "LAYOUTS",
    "RESAMPLE_MODES",
    "KerpleVariant",
    "Layout",
    "ResampleMode",
    "alibi_bias",
    "alibi_slopes",
    "angles",
    "apply_rope",
    "apply_rope_pair",
    "attention_with_sinks",
    "axial_inv_freq",
    "axis_angles",
    "check_grid",
    "check_kerple",
    "check_sections",
    "check_t5_buckets",
    "check_xpos_range",
    "cope_interpolate",
    "cope_positions",
    "fire_distance",
    "fire_mlp",
    "fire_mlp_pieces",
    "fire_normaliser",
    "fire_psi",
    "forgetting_attention",
    "gather_relative",
    "inv_freq_series",
    "kerple_bias",
    "kerple_log",
    "kerple_power",
    "mixed_angles",
    "mixed_inv_freq",
    "namespace",
    "np_xp",
    "p_rope_inv_freq",
    "pair_axes",
    "path_attention",
    "path_attention_cached",
    "pope_features",
    "pope_polar",
    "query_temperature",
    "relative_key_logits",
    "relative_offsets",
    "relative_value_output",
    "resample_table",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotary_dim",
    "shaw_relative_index",
    "shift_matrix",
    "sincos_2d_table",
    "sinusoidal_table",
    "softmax_with_sinks",
    "softplus",
    "stick_breaking_attention",
    "t5_relative_bucket",
    "torch_xp",
    "transformer_xl_position_rows",
    "transformer_xl_terms",
    "wavelengths",
    "xpos_max_position",
    "xpos_scale",
]
