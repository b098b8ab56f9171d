"""posenc.lab.extension: the runs of the lab's ``extend`` suite (context extension).

Train small language models at a context L on text every Python ships, then measure what each
RoPE context-extension method (posenc's own: PI, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE)
does to the loss by position and to passkey retrieval at 2x, 4x and 8x L, training-free and
after a short fine-tune; ALiBi, NoPE, FIRE and RoPE with attention sinks for comparison.
``posenc lab --preset extend`` or ``posenc lab extend`` runs it; ``run_extend`` is the library
twin. Modules: ``corpus`` (text, vocabulary, training rows), ``methods`` (the scaling each
method puts on a trained model, LongRoPE's search), ``pretrain`` (pre-training at L and the
fine-tune), ``measure`` (loss by position, passkey, streaming), ``units`` (the units of work),
``run`` (run or resume them). The rest is the lab's own machinery: its configuration and
presets (``ExtendConfig``, ``EXTEND_PRESETS``), store (``ExtendStore``), results, findings,
figures, report and summary live in ``posenc.lab``'s modules of those names.

Layer: above ``posenc.eval`` (it evaluates with ``perplexity`` and ``passkey``) and the rest of
the lab, below the CLI.
"""

from ..config import ExtendConfig
from ..presets import EXTEND_PRESETS, extend_preset
from .run import Outcome, run_extend

__all__ = ["EXTEND_PRESETS", "ExtendConfig", "Outcome", "extend_preset", "run_extend"]
