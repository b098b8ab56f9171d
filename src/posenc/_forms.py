"""The encoder form of an encoding, shared by the torch and Flax models and the lab.

An encoder (bidirectional attention) sees keys on both sides of each query, where a causal
bias is not what its paper or the models that use it bidirectionally define: ALiBi's
-m·(i - j) becomes +m·j per row, a bias toward later keys (bidirectional ALiBi models use
-m·|i - j|); T5's decoder buckets put every later key in one bucket (T5's encoder uses
bidirectional buckets); FIRE's causal normaliser ψ(max(L, i)) lets inputs pass 1 (posenc's
encoder form normalises by ψ(max(L, i, j))). Kerple's kernels are of |i - j| in both forms.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

#: Constructor keys whose value gives an encoding's encoder (bidirectional) form: ALiBi's
#: -m|i - j|, T5's bidirectional buckets, FIRE's ψ(max(L, i, j)) normaliser.
ENCODER_FORM: dict[str, Any] = {"bidirectional": True}
#: What an encoder run that keeps an encoding's causal form is labelled with, in results and
#: reports (ALiBi's causal form in an encoder is the one-sided bias m·(j - i)).
CAUSAL_FORM = "causal form"


def encoder_form(accepted: Collection[str], pe_config: dict[str, Any]) -> dict[str, Any]:
    """``pe_config`` plus the ``ENCODER_FORM`` keys among ``accepted`` that it does not set."""
    return {k: v for k, v in ENCODER_FORM.items() if k in accepted} | pe_config


def form_label(name: str, pe_config: Mapping[str, Any], *, causal: bool) -> str:
    """``name``, or ``"name (causal form)"`` for an encoder whose ``pe_config`` sets an
    ``ENCODER_FORM`` key to another value: the named variant, never shown as the encoding."""
    if causal or all(pe_config.get(k, v) == v for k, v in ENCODER_FORM.items()):
        return name
    return f"{name} ({CAUSAL_FORM})"
