"""posenc.extlab: the context-extension lab.

Train small language models at a context L on text every Python ships, then measure what each
RoPE context-extension method (posenc's own: PI, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE)
does to the loss by position and to passkey retrieval at 2x, 4x and 8x L, training-free and
after a short fine-tune; ALiBi, NoPE, FIRE and RoPE with attention sinks for comparison; the
published findings checked by rules stated in ``findings``. ``posenc lab --preset extend`` or
``posenc lab extend`` runs it; ``run_extend`` and ``write_report`` are the library twins.

Layer: above ``posenc.eval`` (it evaluates with ``perplexity`` and ``passkey``) and the lab
(whose corpus and schedule it reuses), below the CLI.
"""

from .config import PRESETS, ExtendConfig, preset
from .run import Outcome, run_extend

__all__ = ["PRESETS", "ExtendConfig", "Outcome", "preset", "run_extend"]
