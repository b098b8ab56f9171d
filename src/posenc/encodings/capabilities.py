"""What an encoding does, declared: attention picks its backend from this, never from the
encoding's type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BiasKind = Literal["none", "offset", "positions"]


@dataclass(frozen=True)
class Capabilities:
    """The hooks an encoding implements and what attention may assume about them.

    ``embeds``: adds to token embeddings (``embed``). ``rotates``: rotates q and k
    (``rotate``). ``bias``: "offset" when ``bias(q_pos, k_pos)`` depends on q_pos - k_pos alone
    (ALiBi, T5, Kerple: attention may read it from a per-offset table, the Toeplitz view or
    FlexAttention), "positions" for any other score bias (FIRE), "none" without one.
    ``relative_terms``: rewrites logits or values (``relative_logits``/``relative_values``:
    Shaw, Transformer-XL, CoPE), so attention needs the weights (explicit path). ``fused``: the
    name of a fused attention kernel computing this encoding's attention whole
    (``posenc.attention.backends.FUSED``), or None. ``axes``: the position axes A it reads:
    1 for sequences (positions (T,) | (B, T)), 2 for images (row, column), 3 for video and
    M-RoPE (t, h, w), whose positions are (T, A) | (B, T, A) (its config's ``axes``).
    ``attention_form``: computes the whole causal attention itself from the layer's input, its
    q, k and v (``PositionalEncoding.attention_form``: FoX's forget gates, PaTH's Householder
    transforms, stick-breaking in place of softmax), so attention hands it the call and runs
    no softmax of its own.
    """

    embeds: bool = False
    rotates: bool = False
    bias: BiasKind = "none"
    relative_terms: bool = False
    fused: str | None = None
    axes: int = 1
    attention_form: bool = False

    @property
    def only_rotates(self) -> bool:
        """Rotates q and k and does nothing else (RoPE, xPos, PoPE): a rotation that can serve
        cross-attention (queries and keys at positions of two sequences)."""
        return (
            self.rotates
            and not self.embeds
            and self.bias == "none"
            and not self.relative_terms
            and not self.attention_form
        )
