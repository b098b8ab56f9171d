"""posenc.functional: the one implementation of each positional-encoding formula.

Pure functions, keyword-only hyperparameters, written against the Python array API so the
same call computes on NumPy arrays and torch tensors.
"""

from ._xp import namespace, np_xp, torch_xp
from .alibi import alibi_bias, alibi_slopes
from .fire import fire_distance, fire_psi
from .frequencies import angles, rope_inv_freq, wavelengths
from .kerple import KERPLE_VARIANTS, KerpleVariant, kerple_bias, kerple_log, kerple_power
from .relative import relative_offsets
from .rotary import LAYOUTS, Layout, apply_rope, rope_cos_sin, rotary_dim
from .sinusoidal import sinusoidal_table
from .t5 import check_t5_buckets, t5_relative_bucket

__all__ = [
    "KERPLE_VARIANTS",
    "LAYOUTS",
    "KerpleVariant",
    "Layout",
    "alibi_bias",
    "alibi_slopes",
    "angles",
    "apply_rope",
    "check_t5_buckets",
    "fire_distance",
    "fire_psi",
    "kerple_bias",
    "kerple_log",
    "kerple_power",
    "namespace",
    "np_xp",
    "relative_offsets",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotary_dim",
    "sinusoidal_table",
    "t5_relative_bucket",
    "torch_xp",
    "wavelengths",
]
