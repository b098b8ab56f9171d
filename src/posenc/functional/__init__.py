"""posenc.functional: the one implementation of each positional-encoding formula.

Pure functions, keyword-only hyperparameters, written against the Python array API so the
same call computes on NumPy arrays and torch tensors.
"""

from ._xp import namespace, np_xp, torch_xp
from .frequencies import angles, rope_inv_freq, wavelengths
from .relative import relative_offsets
from .rotary import LAYOUTS, Layout, apply_rope, rope_cos_sin, rotary_dim
from .sinusoidal import sinusoidal_table

__all__ = [
    "LAYOUTS",
    "Layout",
    "angles",
    "apply_rope",
    "namespace",
    "np_xp",
    "relative_offsets",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotary_dim",
    "sinusoidal_table",
    "torch_xp",
    "wavelengths",
]
