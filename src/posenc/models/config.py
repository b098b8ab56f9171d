"""A model's constructor arguments besides its encodings, validated once for torch's
``posenc.models`` and Flax's ``posenc.flax`` models: ``TransformerConfig``,
``EncoderDecoderConfig``."""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import check_bool, check_positive_int
from ..attention.config import AttentionConfig
from ..encodings.capabilities import Capabilities


@dataclass(frozen=True, kw_only=True)
class TransformerConfig:
    """A TinyTransformer's arguments besides its encoding (``pe``, ``pe_config``): ``d_ff``
    None is stored as 4·d_model; the checks of torch's ``TinyTransformer``."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int | None = None
    causal: bool = True
    dropout: float = 0.0
    max_len: int = 1024

    def __post_init__(self) -> None:
        d_ff = () if self.d_ff is None else ("d_ff",)
        for what in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len", *d_ff):
            check_positive_int(getattr(self, what), what)
        self.attention()  # the checks of each layer's attention
        object.__setattr__(self, "d_ff", self.d_ff or 4 * self.d_model)

    def attention(self) -> AttentionConfig:
        """The configuration of each layer's attention."""
        names = ("d_model", "n_heads", "causal", "n_kv_heads", "dropout")
        return AttentionConfig(**{n: getattr(self, n) for n in names})


@dataclass(frozen=True, kw_only=True)
class EncoderDecoderConfig:
    """An ``EncoderDecoder``'s arguments besides its encoding: ``d_ff`` None is stored as
    4·d_model; ``share_embeddings`` needs src_vocab_size == tgt_vocab_size (one table);
    ``cross_rotation`` rotates cross-attention queries and keys (the model checks that its
    encoding only rotates)."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 64
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int | None = None
    dropout: float = 0.0
    max_len: int = 1024
    share_embeddings: bool = False
    cross_rotation: bool = False

    def __post_init__(self) -> None:
        sizes = ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "max_len")
        d_ff = () if self.d_ff is None else ("d_ff",)
        for what in (*sizes, "n_encoder_layers", "n_decoder_layers", *d_ff):
            check_positive_int(getattr(self, what), what)
        check_bool(self.share_embeddings, "share_embeddings")
        check_bool(self.cross_rotation, "cross_rotation")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "share_embeddings needs one vocabulary, src_vocab_size == tgt_vocab_size, got "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )
        self.attention(causal=True)  # the checks of each layer's attention
        object.__setattr__(self, "d_ff", self.d_ff or 4 * self.d_model)

    def check_axes(self, encoder: tuple[int, str], decoder: tuple[int, str]) -> None:
        """Raise ValueError unless the decoder's encoding reads one position axis (token
        positions), and the encoder's too with ``cross_rotation`` (one position per query and
        key); ``encoder``/``decoder``: (axes, name). An encoder of image or video grids
        (A > 1 axes) serves otherwise."""
        for role, (axes, name) in (("decoder", decoder), ("encoder", encoder)):
            if axes != 1 and (role == "decoder" or self.cross_rotation):
                why = "cross_rotation needs" if role == "encoder" else "the decoder needs"
                raise ValueError(
                    f"{why} a sequence encoding (one position axis), got {role} encoding "
                    f"{name!r} of {axes} axes"
                )

    def check_cross_rotation(self, capabilities: Capabilities, name: str) -> None:
        """Raise ValueError for ``cross_rotation`` with an encoding (``name``) that does more
        than rotate: biases, relative terms and tables have no cross-attention form."""
        if self.cross_rotation and not capabilities.only_rotates:
            raise ValueError(
                "cross_rotation needs an encoding that only rotates queries and keys (rope, "
                f"xpos, pope), got {name!r}"
            )

    def attention(self, *, causal: bool) -> AttentionConfig:
        """The configuration of each attention layer (encoder and cross: ``causal=False``)."""
        names = ("d_model", "n_heads", "n_kv_heads", "dropout")
        return AttentionConfig(causal=causal, **{n: getattr(self, n) for n in names})
