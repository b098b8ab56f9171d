"""Causal attention by chunk pairs, nearest first: what forgetting, stick-breaking, PaTH and
sink attention share (``forgetting``, ``stick_breaking``, ``path``, ``sinks``).

The L keys are cut into N chunks of C; the Tq queries are the last Tq of the L positions (a
prefill has Tq = L, a decode step Tq = 1 over the cache). Pass d = 0, 1, .., N - 1 scores every
active query chunk n against key chunk n - d at once, so a pass holds (B, H, N, R, C) scores
and memory is O(H·C·L), never (L, L); a query chunk leaves the passes once its keys run out.
A query chunk holds R = C rows, or only the Tq queries where they fall in one chunk (a decode
step scores its one row against each key chunk: O(L·D) work, not O(L·C·D)).
Any array-API namespace (torch, NumPy, JAX); nothing is written in place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .._validate import check_mask_tensor, check_positive_float, check_positive_int
from ._xp import astype, at_least_float32, clip, device_of, namespace

#: Keys per chunk when ``block_size`` is not given.
DEFAULT_BLOCK = 128


@dataclass(frozen=True)
class Chunks:
    """How L keys and the last Tq of them as queries fall into chunks of C.

    Query chunks are the key chunks n0 .. N - 1 (n0 = (L - Tq) // C), of ``rows`` rows each:
    C, where ``front`` zero rows precede the first query in chunk n0 and the last chunk ends
    with N·C - L padding rows; or, where the queries fall in one chunk (Nq = 1), just the Tq
    queries, slots ``skip`` .. ``skip`` + Tq - 1 of their key chunk (no padding).
    """

    C: int
    N: int
    n0: int
    L: int
    Tq: int

    @property
    def Nq(self) -> int:  # noqa: N802 (N, Nq as in the docstrings)
        return self.N - self.n0

    @property
    def front(self) -> int:
        return self.L - self.Tq - self.n0 * self.C

    @property
    def rows(self) -> int:
        """Query rows per query chunk."""
        return self.Tq if self.Nq == 1 else self.C

    @property
    def skip(self) -> int:
        """Slot of a query chunk's first row within its key chunk."""
        return self.front if self.Nq == 1 else 0

    def start(self, d: int) -> int:
        """First active query chunk (index into the Nq query chunks) of pass d."""
        return max(0, d - self.n0)

    def key_range(self, d: int) -> tuple[int, int]:
        """Key chunks [lo, hi) of pass d, one per active query chunk."""
        return self.start(d) + self.n0 - d, self.N - d


def chunks(Tq: int, L: int, block_size: int | None) -> Chunks:
    """The chunking of ``L`` keys (of which the last ``Tq`` are queries) into ``block_size``
    (default ``DEFAULT_BLOCK``, at most L)."""
    C = min(DEFAULT_BLOCK if block_size is None else block_size, L)
    N = -(-L // C)
    return Chunks(C=C, N=N, n0=(L - Tq) // C, L=L, Tq=Tq)


def _pad_axis(x: Any, axis: int, before: int, after: int) -> Any:
    """x with ``before``/``after`` zeros along ``axis`` (negative)."""
    if not before and not after:
        return x
    xp = namespace(x)
    parts = []
    for n in (before, after):
        shape = list(x.shape)
        shape[axis] = n
        parts.append(xp.zeros(tuple(shape), dtype=x.dtype, device=device_of(x)))
    return xp.concat([parts[0], x, parts[1]], axis=axis)


def key_chunks(x: Any, lay: Chunks, *, vector: bool = True) -> Any:
    """(B, Hk, L, D) -> (B, Hk, 1, N, C, D) (``vector``), or (B, Hk, L) -> (B, Hk, 1, N, C)."""
    xp = namespace(x)
    axis = -2 if vector else -1
    x = _pad_axis(x, axis, 0, lay.N * lay.C - lay.L)
    B, Hk = x.shape[0], x.shape[1]
    tail = (x.shape[-1],) if vector else ()
    return xp.reshape(x, (B, Hk, 1, lay.N, lay.C, *tail))


def query_chunks(q: Any, lay: Chunks, G: int) -> Any:
    """q (B, H, Tq, D), H = Hkv·G -> (B, Hkv, G, Nq, R, D) (R = ``lay.rows``), queries in
    chunks n0 .. N - 1."""
    xp = namespace(q)
    before = lay.front - lay.skip
    q = _pad_axis(q, -2, before, lay.Nq * lay.rows - lay.Tq - before)
    B, H, _, D = q.shape
    return xp.reshape(q, (B, H // G, G, lay.Nq, lay.rows, D))


def query_rows(x: Any, lay: Chunks, G: int) -> Any:
    """A per-query-head, per-key quantity (B, H, L) -> (B, Hkv, G, N, C)."""
    xp = namespace(x)
    x = _pad_axis(x, -1, 0, lay.N * lay.C - lay.L)
    B, H = x.shape[0], x.shape[1]
    return xp.reshape(x, (B, H // G, G, lay.N, lay.C))


def unchunk(out: Any, lay: Chunks) -> Any:
    """(B, Hkv, G, Nq, R, Dv) -> (B, H, Tq, Dv), the rows of the real queries."""
    xp = namespace(out)
    B, Hkv, G, _, _, Dv = out.shape
    flat = xp.reshape(out, (B, Hkv * G, lay.Nq * lay.rows, Dv))
    before = lay.front - lay.skip
    return flat[:, :, before : before + lay.Tq, :]


def segment_chunks(segment_ids: Any, lay: Chunks) -> Any:
    """(B, L) integer -> (B, 1, 1, N, C) (padding rows continue the last segment)."""
    xp = namespace(segment_ids)
    pad = lay.N * lay.C - lay.L
    if pad:
        last = xp.broadcast_to(segment_ids[:, -1:], (segment_ids.shape[0], pad))
        segment_ids = xp.concat([segment_ids, last], axis=-1)
    return xp.reshape(segment_ids, (segment_ids.shape[0], 1, 1, lay.N, lay.C))


def allowed_pairs(d: int, lay: Chunks, seg: Any, *, strict: bool, like: Any) -> Any:
    """Boolean mask of pass d, broadcastable to (B, Hkv, G, n, R, C), or None (all allowed):
    causal within the diagonal chunk pair (key index < query index if ``strict``, else <=),
    and query and key in one segment where ``seg`` (``segment_chunks``) is given."""
    xp = namespace(like)
    allowed = None
    if d == 0:
        idx = xp.arange(lay.C, device=device_of(like))
        slot = query_slots(lay, like)
        allowed = (idx[None, :] < slot[:, None]) if strict else (idx[None, :] <= slot[:, None])
    if seg is not None:
        s = lay.start(d)
        lo, hi = lay.key_range(d)
        rows = slice(lay.skip, lay.skip + lay.rows)
        q_seg = seg[:, :, :, lay.n0 + s :, rows, None]  # (B, 1, 1, n, R, 1)
        k_seg = seg[:, :, :, lo:hi, None, :]  # (B, 1, 1, n, 1, C)
        same = q_seg == k_seg
        allowed = same if allowed is None else same & allowed
    return allowed


def query_slots(lay: Chunks, like: Any) -> Any:
    """(R,) integer: each query row's slot within its key chunk (on ``like``'s device)."""
    xp = namespace(like)
    return xp.arange(lay.skip, lay.skip + lay.rows, device=device_of(like))


def check_attention(
    q: Any, k: Any, v: Any, scale: float | None, block_size: int | None
) -> tuple[int, float]:
    """Validate q (B, H, Tq, D), k (B, Hkv, L, D), v (B, Hkv, L, Dv) with Hkv dividing H and
    Tq <= L; return the head groups G = H / Hkv and the scale (default 1/sqrt(D))."""
    for name, x, layout in (
        ("q", q, "(B, H, Tq, D)"),
        ("k", k, "(B, Hkv, L, D)"),
        ("v", v, "(B, Hkv, L, Dv)"),
    ):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array {layout}, got {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{name} must have shape {layout}, got {tuple(x.shape)}")
        xp = namespace(x)
        if not xp.isdtype(x.dtype, "real floating"):
            raise TypeError(f"{name} must have a real floating dtype, got {x.dtype}")
    B, H, Tq, D = q.shape
    if k.shape[0] != B or k.shape[-1] != D or tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise ValueError(
            f"q (B, H, Tq, D), k (B, Hkv, L, D) and v (B, Hkv, L, Dv) disagree: got "
            f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"
        )
    Hkv, L = k.shape[1], k.shape[2]
    if Hkv == 0 or H % Hkv:
        raise ValueError(f"key/value heads ({Hkv}) must divide the query heads ({H})")
    if not 1 <= Tq <= L:
        raise ValueError(f"queries are the last Tq of the L keys: need 1 <= Tq <= L, got {Tq}, {L}")
    if block_size is not None:
        check_positive_int(block_size, "block_size")
    if scale is None:
        return H // Hkv, 1.0 / math.sqrt(D)
    check_positive_float(scale, "scale")
    return H // Hkv, float(scale)


def check_per_token(x: Any, shape: tuple[int, ...], what: str, layout: str) -> None:
    """Raise unless array ``x`` has a real floating dtype and shape ``shape`` (``layout``)."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{what} must be an array {layout}, got {type(x).__name__}")
    if not namespace(x).isdtype(x.dtype, "real floating"):
        raise TypeError(f"{what} must have a real floating dtype, got {x.dtype}")
    if tuple(x.shape) != shape:
        raise ValueError(f"{what} must have shape {layout} = {shape}, got {tuple(x.shape)}")


def check_segments(segment_ids: Any, B: int, L: int) -> None:
    """Raise unless ``segment_ids`` is None or an integer array (B, L), one id per key."""
    if segment_ids is not None:
        check_mask_tensor(segment_ids, "segment_ids", "integer", (B, L), arrays=True)


def work_dtype(*arrays: Any) -> Any:
    """float32, or float64 where an input is: the dtype the scores and sums run in."""
    return at_least_float32(*(a for a in arrays if a is not None))


def dot_scores(qc: Any, kc: Any, lay: Chunks) -> Iterator[Any]:
    """q·k of each pass (``Chunks``): (B, Hkv, G, n, R, C) for the active query chunks of
    qc (B, Hkv, G, Nq, R, D) against the key chunks of kc (B, Hkv, 1, N, C, D)."""
    xp = namespace(qc, kc)
    for d in range(lay.N):
        lo, hi = lay.key_range(d)
        yield qc[:, :, :, lay.start(d) :, :, :] @ xp.matrix_transpose(kc[:, :, :, lo:hi, :, :])


Gate = Callable[[int], Any]


def forget_gate(log_f: Any, lay: Chunks, G: int, dtype: Any) -> Gate:
    """The forgetting gate's term Σ_(l=j+1..i) log f_l = c_i - c_j (c the cumulative sum of
    ``log_f`` (B, H, L) in ``dtype``) of each pass: (B, Hkv, G, n, R, C)."""
    xp = namespace(log_f)
    c = query_rows(xp.cumulative_sum(astype(log_f, dtype), axis=-1), lay, G)  # (B, Hkv, G, N, C)

    def gate(d: int) -> Any:
        lo, hi = lay.key_range(d)
        rows = slice(lay.skip, lay.skip + lay.rows)
        q_c = c[:, :, :, lay.n0 + lay.start(d) :, rows, None]  # (B, Hkv, G, n, R, 1)
        return q_c - c[:, :, :, lo:hi, None, :]  # (B, Hkv, G, n, R, C)

    return gate


def softmax_passes(
    scores: Iterator[Any],
    v: Any,
    lay: Chunks,
    G: int,
    *,
    scale: float,
    dtype: Any,
    gate: Gate | None = None,
    seg: Any = None,
    sinks: Any = None,
) -> Any:
    """softmax_j(scale·s_ij + gate_ij over allowed keys, with e^(sink_h) in the denominator)
    v_j by a running log-sum-exp over the passes of ``scores`` (``dot_scores`` or PaTH's).

    Shapes: each pass (B, Hkv, G, n, R, C) (G query heads per key head, R = ``lay.rows``);
    v (B, Hkv, L, Dv); ``sinks`` (Hkv, G) or None
    -> (B, Hkv, G, Nq, R, Dv) in ``dtype``. A query that sees no key and no sink gets 0.
    """
    xp = namespace(v)
    vc = key_chunks(astype(v, dtype), lay)  # (B, Hkv, 1, N, C, Dv)
    B, Hkv = vc.shape[0], vc.shape[1]
    shape = (B, Hkv, G, lay.Nq, lay.rows)
    device = device_of(v)
    if sinks is None:
        m = xp.full(shape, -math.inf, dtype=dtype, device=device)
        total = xp.zeros(shape, dtype=dtype, device=device)
    else:  # the sink is a key of logit sink_h and value 0: the running state starts at it
        m = xp.broadcast_to(astype(sinks, dtype)[None, :, :, None, None], shape)
        total = xp.ones(shape, dtype=dtype, device=device)
    acc = xp.zeros((*shape, vc.shape[-1]), dtype=dtype, device=device)
    done: list[Any] = []
    for d, s in enumerate(scores):
        while len(done) < lay.start(d):  # query chunk len(done) has seen all its keys
            (_, total_0, acc_0), (m, total, acc) = split_first((m, total, acc))
            done.append(_finish(acc_0, total_0))
        logits = astype(s, dtype) * scale
        if gate is not None:
            logits = logits + gate(d)
        allowed = allowed_pairs(d, lay, seg, strict=False, like=v)
        if allowed is not None:
            logits = xp.where(allowed, logits, -math.inf)
        m_new = xp.maximum(m, xp.max(logits, axis=-1))
        m_safe = xp.where(m_new == -math.inf, 0.0, m_new)  # a row with nothing seen yet
        shifted = logits - m_safe[..., None]
        # a gate's decay leaves the far passes' weights subnormal: zero them (``exp_or_zero``)
        p = xp.exp(shifted) if gate is None else exp_or_zero(shifted)  # (B, Hkv, G, n, R, C)
        rescale = xp.exp(m - m_safe)
        lo, hi = lay.key_range(d)
        total = total * rescale + xp.sum(p, axis=-1)
        acc = acc * rescale[..., None] + p @ vc[:, :, :, lo:hi, :, :]
        m = m_new
    done.append(_finish(acc, total))
    return done[0] if len(done) == 1 else xp.concat(done, axis=3)


#: Below e^-80 (1.8e-35) a weight is zero: float32 turns subnormal under 1.2e-38, and x86
#: multiplies subnormals many times slower (a forget gate's long decay fills the far passes
#: with them: FoX's forward at T = 2048 ran 1.7x slower); next to the row's largest weight, 1,
#: it is below any float32 or float64 rounding.
LOG_TINY = -80.0


def exp_or_zero(x: Any) -> Any:
    """e^x, and 0 where x < ``LOG_TINY`` (no subnormal weights)."""
    xp = namespace(x)
    return xp.where(x < LOG_TINY, 0.0, xp.exp(x))


def split_first(state: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Per-query-chunk running states (chunks on axis 3): the first chunk's, and the rest."""
    return tuple(x[:, :, :, :1, ...] for x in state), tuple(x[:, :, :, 1:, ...] for x in state)


def _finish(acc: Any, total: Any) -> Any:
    xp = namespace(acc, total)
    seen = total > 0
    return acc / xp.where(seen, total, 1.0)[..., None]


def log_sigmoid(z: Any) -> Any:
    """log σ(z) = min(z, 0) - log(1 + e^(-|z|)), finite for every finite z."""
    xp = namespace(z)  # min(z, 0) as a clip: array-api-compat's minimum with a Python scalar
    # calls torch.result_type, which torch.compile(fullgraph=True) cannot trace
    return clip(z, None, 0.0) - xp.log1p(xp.exp(-xp.abs(z)))


def dot_attention(
    q: Any,
    k: Any,
    v: Any,
    G: int,
    scale: float,
    *,
    dtype: Any,
    block_size: int | None,
    segment_ids: Any,
    log_f: Any = None,
    sinks: Any = None,
) -> Any:
    """Causal softmax attention over scale·q·k (``softmax_passes``), with FoX's gate where
    ``log_f`` (B, H, L) and sink logits where ``sinks`` (H,) are given; inputs checked by the
    caller. Shapes: as ``forgetting_attention`` -> (B, H, Tq, Dv) in v's dtype."""
    xp = namespace(q)
    lay = chunks(q.shape[2], k.shape[2], block_size)
    qc = query_chunks(astype(q, dtype), lay, G)  # (B, Hkv, G, Nq, R, D)
    kc = key_chunks(astype(k, dtype), lay)  # (B, Hkv, 1, N, C, D)
    out = softmax_passes(
        dot_scores(qc, kc, lay),
        v,
        lay,
        G,
        scale=scale,
        dtype=dtype,
        gate=None if log_f is None else forget_gate(log_f, lay, G, dtype),
        seg=None if segment_ids is None else segment_chunks(segment_ids, lay),
        sinks=None if sinks is None else xp.reshape(sinks, (q.shape[1] // G, G)),
    )
    return astype(unchunk(out, lay), v.dtype)
