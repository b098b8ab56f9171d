"""Long-context evaluation of causal LMs: perplexity by position, passkey retrieval.

``perplexity(model, tokens, lengths=...)`` and ``passkey(model, tokenizer, lengths=...)`` take a
transformers causal LM, a ``TinyTransformer`` or a lab model; ``load_model(path, scaling=...)``
loads a transformers model directory or a lab checkpoint; ``save(result, out)`` writes the JSON
and the figure. ``posenc eval ppl`` / ``posenc eval passkey`` are the commands.
"""

from .figures import passkey_figure, perplexity_figure, save
from .loading import load_model, scaled_config
from .models import CausalLM, CharTokenizer, as_causal_lm
from .passkey import PasskeyResult, TokenVocab, passkey
from .perplexity import PerplexityResult, perplexity

__all__ = [
    "CausalLM",
    "CharTokenizer",
    "PasskeyResult",
    "PerplexityResult",
    "TokenVocab",
    "as_causal_lm",
    "load_model",
    "passkey",
    "passkey_figure",
    "perplexity",
    "perplexity_figure",
    "save",
    "scaled_config",
]
