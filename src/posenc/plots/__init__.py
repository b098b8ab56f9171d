"""posenc.plots: the pictures people draw of positional encodings, for every encoding.

Each function takes an encoding (instance or registered name) and an optional ``ax`` and
returns the matplotlib ``Figure`` (never ``plt.show()``); all share one style. ``PLOTS`` maps
the kind names of ``posenc plot KIND`` to functions and the encodings they apply to.
"""

from .attention import (
    attention_by_distance,
    attention_decay,
    attention_entropy,
    attention_grid,
    attention_heatmap,
    attention_weights,
    model_attention,
    weights_of,
)
from .bias import bias_heatmaps, bias_matrix, in_encoder_form
from .compare import comparable, compare, compare_kinds
from .extension import alibi_slopes, extension_scales, frequency_scales
from .grid import grid_similarity, pair_sections, patch_similarity
from .kinds import PLOTS, PlotKind, plot_kinds_for
from .rotary import (
    inv_freq_of,
    qk_by_distance,
    qk_vs_distance,
    rotation_pair,
    shift_matrix_blocks,
    wavelengths,
)
from .tables import (
    contamination,
    contamination_dims,
    contamination_stats,
    cosine_similarity,
    dimension_waveforms,
    dot_vs_distance,
    encoding_heatmap,
    feature_roles,
    position_features,
    similarity_matrix,
)

__all__ = [
    "PLOTS",
    "PlotKind",
    "alibi_slopes",
    "attention_by_distance",
    "attention_decay",
    "attention_entropy",
    "attention_grid",
    "attention_heatmap",
    "attention_weights",
    "bias_heatmaps",
    "bias_matrix",
    "comparable",
    "compare",
    "compare_kinds",
    "contamination",
    "contamination_dims",
    "contamination_stats",
    "cosine_similarity",
    "dimension_waveforms",
    "dot_vs_distance",
    "encoding_heatmap",
    "extension_scales",
    "feature_roles",
    "frequency_scales",
    "grid_similarity",
    "in_encoder_form",
    "inv_freq_of",
    "model_attention",
    "pair_sections",
    "patch_similarity",
    "plot_kinds_for",
    "position_features",
    "qk_by_distance",
    "qk_vs_distance",
    "rotation_pair",
    "shift_matrix_blocks",
    "similarity_matrix",
    "wavelengths",
    "weights_of",
]
