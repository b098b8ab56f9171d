"""Score-bias encodings: a function of query and key positions added to the attention logits.

Each builds ``bias(q_pos, k_pos)`` (B or 1, H, Tq, Tk) in float32 (or wider) from positions
alone, finite on every pair; causal attention masks future keys itself. The formulas live in
``posenc.functional`` (alibi, t5, kerple, fire); these modules hold their parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import functional as PF
from .._validate import as_4d, check_position_batches, check_positions
from ..functional._xp import at_least_float32
from ..registry import register
from .base import PositionalEncoding
from .capabilities import Capabilities
from .configs import ALiBiConfig, FIREConfig, KerpleConfig, T5Config
from .state import PositionState

#: A bias formula of checked int64 positions: (H, Tq, Tk) or (B, H, Tq, Tk).
Formula = Callable[[Tensor, Tensor], Tensor]


def position_bias(
    formula: Formula, q_pos: Tensor, k_pos: Tensor, ctx: PositionState | None
) -> Tensor:
    """``formula(q_pos, k_pos)`` as (B|1, H, Tq, Tk), the positions checked unless a state comes
    with them (whoever built it checked them) and as int64 (i - j cannot wrap: uint8 0 - 1 =
    255).

    Raises: ValueError/TypeError for positions that are not (T,) | (B, T) integers of one
    batch (without ``ctx``)."""
    if ctx is None:
        q_pos = check_positions(q_pos, "q_pos")
        k_pos = check_positions(k_pos, "k_pos")
        check_position_batches(q_pos, k_pos)
    wide = torch.int64
    return as_4d(formula(q_pos.to(wide), k_pos.to(wide)))  # (B|1, H, Tq, Tk)


def _exact(like: Tensor) -> AbstractContextManager[object]:
    """Autocast off on ``like``'s device: bias arithmetic stays in its work dtype."""
    device = like.device.type
    if not torch.amp.is_autocast_available(device):  # meta: no autocast to turn off
        return nullcontext()
    return torch.autocast(device, enabled=False)


@register("alibi", family="bias", paper="Press et al., arXiv:2108.12409", year=2022)
class ALiBi(PositionalEncoding[PositionState]):
    """Attention with linear biases (Press et al. 2022): logits_ij - m_h·(i - j), no embedding.

    Slopes m_h = 2^(-8h/H) (``PF.alibi_slopes``, the official rule for H not a power of two) or
    custom positive ``slopes``. ``bidirectional=True`` is the encoder form -m_h·|i - j| (as
    bidirectional ALiBi models use it); the default causal form in an encoder would add
    +m_h·j per row, a bias toward later keys. On future keys (j > i) the causal form's
    -m_h·(i - j) is positive: causal attention masks them, so no output depends on it, but a
    printed matrix differs there from the tutorials' m·max(i - j, 0)-style 0;
    ``posenc.plots.bias_matrix(pe, masked=0.0)`` gives that form. The
    float64 ``slopes64`` stay out of ``model.to(bf16)``; ``slopes`` follows the module dtype
    and sets the bias dtype: float32, or float64 after ``.double()``.
    Shapes: ``bias(q_pos, k_pos)``: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) int64 ->
    (1|B, H, Tq, Tk), added to the scaled logits.
    """

    capabilities = Capabilities(bias="offset")
    config_class = ALiBiConfig
    config: ALiBiConfig

    keep_dtype_buffers = ("slopes64",)
    slopes: Tensor
    slopes64: Tensor

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.register_fixed_buffers()  # slopes64 (H,) float64
        self.register_buffer("slopes", self.slopes64.float(), persistent=False)  # (H,)

    def fixed_buffers(self) -> dict[str, Tensor]:
        return {"slopes64": self.config.slope_values(PF.torch_xp)}

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> ALiBi:
        super()._apply(fn, recurse)
        # ``slopes`` is slopes64 in the module dtype: derived again, as ``to_empty`` leaves it
        # uninitialised (also when it reaches a shared encoding twice)
        self.slopes = self.slopes64.to(self.slopes.dtype)
        return self

    def formula(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """-m_h·(i - j) (or -m_h·|i - j|) of checked positions -> (H, Tq, Tk) | (B, H, Tq, Tk),
        in the slopes' dtype (float32 or wider)."""
        slopes = self.slopes64.to(at_least_float32(self.slopes))
        return PF.alibi_bias(q_pos, k_pos, slopes, bidirectional=self.config.bidirectional)

    def bias(self, q_pos: Tensor, k_pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """The bias of q_pos and k_pos (``formula``; checked without ``ctx``).

        Shapes: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) -> (1|B, H, Tq, Tk).
        Raises: ValueError/TypeError for positions that do not fit (without ``ctx``).
        """
        return position_bias(self.formula, q_pos, k_pos, ctx)


@register("t5", family="bias", paper="Raffel et al., arXiv:1910.10683", year=2020)
class T5Bias(PositionalEncoding[PositionState]):
    """T5 relative attention bias (Raffel et al. 2020): logits_ij + W[bucket(j - i), h].

    ``PF.t5_relative_bucket`` maps key-minus-query offsets to ``num_buckets`` buckets, exact
    below num_buckets/2 (/4 each way if ``bidirectional``), logarithmic up to ``max_distance``,
    one shared bucket beyond. W (num_buckets, H) is laid out as Hugging Face's
    ``relative_attention_bias.weight``. Init N(0, init_std²), small like the reference code
    (HF: d_model^-0.5): buckets never reached in training stay near zero instead of adding
    noise at long range (x-transformers' N(0, 1) default does).
    Shapes: ``bias(q_pos, k_pos)``: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) int64 ->
    (1|B, H, Tq, Tk), added to the scaled logits.
    """

    capabilities = Capabilities(bias="offset")
    config_class = T5Config
    config: T5Config

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.weight = nn.Parameter(torch.empty(self.num_buckets, self.n_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: W ~ N(0, init_std²)."""
        nn.init.normal_(self.weight, std=self.init_std)

    def buckets(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Integer bucket (..., Tq, Tk) of each key-minus-query offset."""
        c = self.config
        return PF.t5_relative_bucket(
            -PF.relative_offsets(q_pos, k_pos),  # key - query, T5's sign
            bidirectional=c.bidirectional,
            num_buckets=c.num_buckets,
            max_distance=c.max_distance,
        )

    def formula(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """W[bucket(j - i), h] of checked positions -> (H, Tq, Tk) | (B, H, Tq, Tk), W read in
        float32 or wider by ``F.embedding`` (its backward accumulates rows densely)."""
        table = self.weight
        values = F.embedding(self.buckets(q_pos, k_pos), table.to(at_least_float32(table)))
        return values.movedim(-1, -3)  # (..., Tq, Tk, H) -> (H, Tq, Tk) | (B, H, Tq, Tk)

    def bias(self, q_pos: Tensor, k_pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """The bias of q_pos and k_pos (``formula``; checked without ``ctx``).

        Shapes: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) -> (1|B, H, Tq, Tk).
        Raises: ValueError/TypeError for positions that do not fit (without ``ctx``).
        """
        return position_bias(self.formula, q_pos, k_pos, ctx)


@register("kerple", family="bias", paper="Chi et al., arXiv:2205.09921", year=2022)
class Kerple(PositionalEncoding[PositionState]):
    """Kernelized relative positional bias (Chi et al. 2022), d = |i - j|, per head h:

    "log":   -r1·log(1 + r2·d),  r1, r2 >= eps;      "power": -r1·d^r2,  r1 >= eps, eps <= r2 <= 2.
    As in the official code (chijames/KERPLE, gpt-neox): r1, r2 learned per head, initialised
    uniform (log: r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2)) and clamped
    to the ranges above with eps = 0.01. The official code clamps ``.data`` in place at every
    forward; here the clamp is applied in the forward with a straight-through gradient
    (same values, compile-friendly). ``init_r1``/``init_r2`` set every head to one value.
    Shapes: ``bias(q_pos, k_pos)``: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) int64 ->
    (1|B, H, Tq, Tk), added to the scaled logits.
    """

    capabilities = Capabilities(bias="offset")
    config_class = KerpleConfig
    config: KerpleConfig

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.r1 = nn.Parameter(torch.empty(self.n_heads))
        self.r2 = nn.Parameter(torch.empty(self.n_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: r1, r2 uniform, or ``init_r1``/``init_r2``."""
        inits = (self.init_r1, self.init_r2)
        with torch.no_grad():
            for p, init, scale in zip((self.r1, self.r2), inits, self.init_scales, strict=True):
                if init is None:
                    p.uniform_(0.0, scale)
                else:
                    p.fill_(init)

    def kernel_parameters(self) -> tuple[Tensor, Tensor]:
        """r1, r2 (H,) clamped to their ranges, in float32 or wider: clamp in value, identity in
        gradient (straight-through), so a clamped parameter can recover."""
        c = self.config
        dtype = at_least_float32(self.r1)
        r1 = _clamp_straight_through(self.r1.to(dtype), c.eps)
        r2 = _clamp_straight_through(self.r2.to(dtype), c.eps, c.r2_max)
        return r1, r2

    def formula(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Kerple's -r1·log(1 + r2·d) or -r1·d^r2 of checked positions -> (H, Tq, Tk) |
        (B, H, Tq, Tk)."""
        r1, r2 = self.kernel_parameters()
        return PF.kerple_bias(q_pos, k_pos, r1, r2, variant=self.config.variant)

    def bias(self, q_pos: Tensor, k_pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """The bias of q_pos and k_pos (``formula``; checked without ``ctx``).

        Shapes: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) -> (1|B, H, Tq, Tk).
        Raises: ValueError/TypeError for positions that do not fit (without ``ctx``).
        """
        return position_bias(self.formula, q_pos, k_pos, ctx)


def _clamp_straight_through(x: Tensor, low: float, high: float | None = None) -> Tensor:
    """clamp(x, low, high) in value, identity in gradient."""
    return x + (torch.clamp(x, low, high) - x).detach()


@register("fire", family="bias", paper="Li et al., arXiv:2310.04418", year=2023)
class FIRE(PositionalEncoding[PositionState]):
    """Functional interpolation for relative positions (Li et al. 2023):

    b_h(i, j) = f_θ(ψ(i - j) / ψ(max(L, i)))_h,  ψ(x) = log(c·|x| + 1),
    ``bidirectional=True`` (the encoder form; the paper defines only the causal one):
    f_θ(ψ(|i - j|) / ψ(max(L, i, j)))_h, equal on keys j <= i, symmetric, every input in [0, 1].
    f_θ an MLP 1 -> ``hidden`` (ReLU) -> H (``mlp_in``, ``mlp_out``). As in the paper's
    pseudocode: c learned (init ``init_c`` = 0.1), L = |s·``init_threshold``| with s learned
    (init 1, so L starts at 512), eps = 1e-6 added to the normaliser, PyTorch's default Linear
    init. i is the query's own position, so a decoded token is normalised exactly as in the
    full forward. The MLP runs in float32 (or wider) whatever the module dtype, evaluated as the
    piecewise-linear function it is (``functional.fire_mlp_pieces``: two gathers per score,
    not a ``hidden``-wide activation).
    Shapes: ``bias(q_pos, k_pos)``: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) int64 ->
    (1|B, H, Tq, Tk), added to the scaled logits.
    """

    capabilities = Capabilities(bias="positions", fused="fire")
    config_class = FIREConfig
    config: FIREConfig

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.mlp_in, self.mlp_out = nn.Linear(1, self.hidden), nn.Linear(self.hidden, self.n_heads)
        self.c = nn.Parameter(torch.tensor(self.init_c))
        self.threshold_scale = nn.Parameter(torch.tensor(1.0))

    def reset_parameters(self) -> None:
        """Re-draw the parameters as at construction: c = ``init_c``, threshold scale 1, and
        the MLP's Linear init."""
        with torch.no_grad():
            self.c.fill_(self.init_c)
            self.threshold_scale.fill_(1.0)
        self.mlp_in.reset_parameters()
        self.mlp_out.reset_parameters()

    @property
    def threshold(self) -> Tensor:
        """The learned threshold L = |s·init_threshold| (0-d), in float32 or wider (float16
        would overflow at init_threshold > 65504, bfloat16 round 1001 to 1000)."""
        scale = self.threshold_scale
        return (scale.to(at_least_float32(scale)) * self.init_threshold).abs()

    def formula(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """f_θ(ψ(i - j) / ψ(max(L, i)))_h of checked positions -> (H, Tq, Tk) | (B, H, Tq, Tk),
        in float32 or wider (autocast off)."""
        with _exact(self.c):  # float32 or wider under autocast too
            c, threshold = self._c_threshold()
            x = PF.fire_distance(
                q_pos, k_pos, c, threshold, eps=self.eps, bidirectional=self.bidirectional
            )  # (..., Tq, Tk)
            out = PF.fire_mlp(x, *self.mlp_pieces())  # (H, ..., Tq, Tk)
        return out.movedim(0, -3)  # (H, Tq, Tk) | (B, H, Tq, Tk)

    def bias(self, q_pos: Tensor, k_pos: Tensor, *, ctx: PositionState | None = None) -> Tensor:
        """The bias of q_pos and k_pos (``formula``; checked without ``ctx``).

        Shapes: q_pos (Tq,) | (B, Tq), k_pos (Tk,) | (B, Tk) -> (1|B, H, Tq, Tk).
        Raises: ValueError/TypeError for positions that do not fit (without ``ctx``).
        """
        return position_bias(self.formula, q_pos, k_pos, ctx)

    def _c_threshold(self) -> tuple[Tensor, Tensor]:
        dtype = at_least_float32(self.c, self.mlp_in.weight)
        return self.c.to(dtype), self.threshold.to(dtype)

    def mlp_pieces(self) -> tuple[Tensor, Tensor, Tensor]:
        """The MLP as kinks (hidden,), slopes and intercepts (H, hidden + 1): f_h(x) =
        slopes[h, m] x + intercepts[h, m] on piece m = #kinks below x (``PF.fire_mlp_pieces``)."""
        dtype = at_least_float32(self.c, self.mlp_in.weight)
        w1, b1 = self.mlp_in.weight[:, 0].to(dtype), self.mlp_in.bias.to(dtype)
        w2, b2 = self.mlp_out.weight.to(dtype), self.mlp_out.bias.to(dtype)
        with _exact(w1):  # autocast would run the products in bf16 (0.04 off at bias 13)
            return PF.fire_mlp_pieces(w1, b1, w2, b2)

    def distance_terms(self, q_pos: Tensor, max_offset: int) -> tuple[Tensor, Tensor]:
        """ψ(0), ..., ψ(max_offset) and the normaliser per query: x = ψ(|i - j|) / normaliser_i,
        the MLP's input factored for fused kernels (``kernels.fire_fused``).
        Shapes: q_pos (..., Tq) -> psi (max_offset + 1,), normaliser (..., Tq)."""
        c, threshold = self._c_threshold()
        psi = PF.fire_psi(torch.arange(max_offset + 1, device=c.device, dtype=c.dtype), c)
        return psi, PF.fire_normaliser(q_pos, c, threshold, eps=self.eps)
