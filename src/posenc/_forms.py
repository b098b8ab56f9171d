"""The encoder form of an encoding, shared by the torch and Flax models."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

#: Constructor keys whose value gives an encoding's encoder (bidirectional) form: T5's
#: bidirectional buckets, which tell left from right offsets (Raffel et al. 2020 use them in
#: the encoder). A symmetric bias such as ALiBi's -m|i - j| is not forced: it cannot tell
#: order apart.
ENCODER_FORM: dict[str, Any] = {"bidirectional": True}


def encoder_form(accepted: Collection[str], pe_config: dict[str, Any]) -> dict[str, Any]:
    """``pe_config`` plus the ``ENCODER_FORM`` keys among ``accepted`` that it does not set."""
    return {k: v for k, v in ENCODER_FORM.items() if k in accepted} | pe_config
