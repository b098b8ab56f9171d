"""Published findings on context extension, each checked by a rule fixed before any run.

Notation: L the training context, s a factor of the run (``cfg.factors``), s_max the largest;
loss(m, v, s) the mean held-out loss (nats) of RoPE with method m, variant v (``free``:
training-free, ``tuned``: fine-tuned at s·L) at context s·L; base the unchanged model at L.
Every comparison is paired by seed: d = mean over seeds of (a - b), with its 95% bootstrap
interval [lo, hi] (``stats.bootstrap_interval``). A part is **true** when the whole interval
satisfies it, **false** when the whole interval violates it, else open:

- "d > t" is true if lo > t, false if hi <= t;
- "d <= t" is true if hi <= t, false if lo > t.

A finding is *reproduced* when every part is true, *not reproduced* when any part is false,
else *inconclusive*; *not evaluated* when the run lacks its methods or lengths. Thresholds
(nats): BLOWUP 0.5 (perplexity x1.65), CLOSE 0.1, TIE 0.02, FLAT 0.05, COLLAPSE 0.5,
RESTORED 0.1.

1. Chen et al. 2023 (PI, arXiv:2306.15595): (a) extrapolation blows up: loss(none, free, s) -
   base > BLOWUP at every s >= 4 (at s_max if no s is); (b) PI with a short fine-tune stays
   close to the loss at L: loss(linear, tuned, s) - base <= CLOSE at every s; (c) PI helps
   passkey retrieval at the extended length: passkey(linear, tuned, s_max) - passkey(none,
   tuned, s_max) > 0 (accuracy averaged over depths), over the seeds whose base model passed
   the passkey gate at L (open with fewer than 2 such seeds).
2. bloc97 2023 (NTK-aware) beats PI when neither is fine-tuned: loss(ntk, free, s) -
   loss(linear, free, s) < 0 at every s ("d < 0": true if hi < 0, false if lo >= 0).
3. Peng et al. 2023 (YaRN, arXiv:2309.00071) is at least as good as PI and NTK with and
   without fine-tuning: loss(yarn, v, s) - loss(m, v, s) <= TIE for m in {linear, ntk},
   v in {free, tuned}, every s.
4. Peng et al. 2023: dynamic scaling avoids the degradation below L: with the scaling for
   s_max applied at context L (training-free), (a) static PI and YaRN degrade:
   loss_L(m) - base > TIE for m in {linear, yarn}; (b) dynamic NTK does not:
   loss_L(dynamic) - base <= TIE.
5. Xiao et al. 2023 (StreamingLLM, arXiv:2309.17453): the RoPE model streams max_len =
   s_max·L tokens through a cache of W = ``cfg.window`` recent keys. early = loss over stream
   positions [W/2, W) (nothing evicted yet), late = loss over [2W + S, max_len - 1) (long
   after the first tokens left), S = ``cfg.sinks``. (a) window attention collapses once the
   first tokens are evicted: late - early > COLLAPSE with no sinks; (b) keeping S sink tokens
   restores the loss: late - early <= RESTORED with sinks.
6. Press et al. 2022 (ALiBi, arXiv:2108.12409): ALiBi's loss stays flat past L without any
   change: loss(alibi, s) - loss(alibi, L) <= FLAT at every s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .config import ExtendConfig
from .results import Results
from .stats import Interval, paired

BLOWUP, CLOSE, TIE, FLAT, COLLAPSE, RESTORED = 0.5, 0.1, 0.02, 0.05, 0.5, 0.1

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_EVALUATED = (
    "reproduced",
    "not reproduced",
    "inconclusive",
    "not evaluated",
)


@dataclass
class Part:
    """One comparison of a finding: what it claims, its interval, and the outcome."""

    claim: str
    interval: Interval | None
    holds: bool | None  # True/False when the whole interval decides, None when open

    def text(self) -> str:
        state = {True: "true", False: "false", None: "open"}[self.holds]
        d = "no data" if self.interval is None else self.interval.text(3)
        return f"{self.claim}: d = {d} ({state})"


@dataclass
class Finding:
    """A published claim, its rule, and the verdict with the parts that decided it."""

    key: str
    claim: str
    source: str
    rule: str
    parts: list[Part] = field(default_factory=list)
    note: str = ""

    @property
    def verdict(self) -> str:
        if all(p.interval is None for p in self.parts):  # (also: no parts)
            return NOT_EVALUATED
        if any(p.holds is False for p in self.parts):
            return NOT_REPRODUCED
        if all(p.holds is True for p in self.parts):
            return REPRODUCED
        return INCONCLUSIVE


def greater(d: Interval | None, t: float) -> bool | None:
    """ "d > t": true if lo > t, false if hi <= t, else open."""
    if d is None:
        return None
    return True if d.lo > t else False if d.hi <= t else None


def at_most(d: Interval | None, t: float) -> bool | None:
    """ "d <= t": true if hi <= t, false if lo > t, else open."""
    if d is None:
        return None
    return True if d.hi <= t else False if d.lo > t else None


def less(d: Interval | None, t: float) -> bool | None:
    """ "d < t": true if hi < t, false if lo >= t, else open."""
    if d is None:
        return None
    return True if d.hi < t else False if d.lo >= t else None


def _part(
    claim: str,
    a: Mapping[int, float],
    b: Mapping[int, float],
    test: Callable[[Interval | None, float], bool | None],
    t: float,
) -> Part:
    d = paired(a, b) if a and b else None
    return Part(claim, d, test(d, t))


def check_findings(
    results: Results, cfg: ExtendConfig, gated: set[int] | None = None
) -> list[Finding]:
    """The six findings on ``results`` of a run of ``cfg``; ``gated``: the seeds whose base
    RoPE model passed the passkey gate at L (default: every seed)."""
    L, fs = cfg.context, cfg.factors
    gated = set(cfg.seeds) if gated is None else gated
    base = results.loss(("rope", "none", "free", 1, L))

    def loss(m: str, v: str, s: int, enc: str = "rope") -> dict[int, float]:
        return results.loss((enc, m, v, s, s * L))

    return [
        _chen(results, cfg, base, loss, gated),
        Finding(
            "ntk",
            "NTK-aware scaling beats PI when neither is fine-tuned",
            "bloc97 2023 (NTK-aware scaled RoPE)",
            "loss(ntk, free, s) - loss(linear, free, s) < 0 at every s",
            [
                _part(
                    f"ntk - linear at {s}x",
                    loss("ntk", "free", s),
                    loss("linear", "free", s),
                    less,
                    0.0,
                )
                for s in fs
            ],
        ),
        Finding(
            "yarn",
            "YaRN is at least as good as PI and NTK, with and without fine-tuning",
            "Peng et al. 2023 (YaRN), arXiv:2309.00071",
            f"loss(yarn, v, s) - loss(m, v, s) <= {TIE} for m in linear, ntk; v free, tuned",
            [
                _part(f"yarn - {m} ({v}) at {s}x", loss("yarn", v, s), loss(m, v, s), at_most, TIE)
                for v in ("free", "tuned")
                for s in fs
                for m in ("linear", "ntk")
            ],
        ),
        _dynamic(results, cfg, base),
        _streaming(results, cfg),
        Finding(
            "alibi",
            "ALiBi's loss stays flat past L without any change",
            "Press et al. 2022 (ALiBi), arXiv:2108.12409",
            f"loss(alibi, s·L) - loss(alibi, L) <= {FLAT} at every s",
            [
                _part(
                    f"alibi at {s}x - at 1x",
                    loss("none", "free", s, "alibi"),
                    results.loss(("alibi", "none", "free", 1, L)),
                    at_most,
                    FLAT,
                )
                for s in fs
            ],
        ),
    ]


def _chen(results: Results, cfg: ExtendConfig, base: dict, loss: Callable, gated: set) -> Finding:
    L, smax = cfg.context, max(cfg.factors)
    long = [s for s in cfg.factors if s >= 4] or [smax]
    parts = [
        _part(f"none (free) at {s}x - base", loss("none", "free", s), base, greater, BLOWUP)
        for s in long
    ]
    parts += [
        _part(f"linear (tuned) at {s}x - base", loss("linear", "tuned", s), base, at_most, CLOSE)
        for s in cfg.factors
    ]
    pk = [results.passkey(("rope", m, "tuned", smax, smax * L), gated) for m in ("linear", "none")]
    note = ""
    if len(gated) < 2:
        parts.append(Part(f"passkey linear - none (tuned) at {smax}x", paired(*pk), None))
        note = f"passkey part open: {len(gated)} seed(s) passed the passkey gate at L"
    else:
        parts.append(_part(f"passkey linear - none (tuned) at {smax}x", pk[0], pk[1], greater, 0.0))
    return Finding(
        "pi",
        "Extrapolating RoPE past L blows up the loss; PI with a short fine-tune stays close to "
        "the loss at L and helps passkey retrieval at the extended length",
        "Chen et al. 2023 (position interpolation), arXiv:2306.15595",
        f"none at s >= 4: d > {BLOWUP}; PI tuned: d <= {CLOSE} at every s; passkey PI - none "
        f"(tuned, {smax}x) > 0 on gated seeds",
        parts,
        note,
    )


def _dynamic(results: Results, cfg: ExtendConfig, base: dict) -> Finding:
    L, smax = cfg.context, max(cfg.factors)

    def scaled_at_context(m: str) -> dict[int, float]:
        return results.loss(("rope", m, "free", smax, L))

    parts = [
        _part(f"{m} ({smax}x scaling) at L - base", scaled_at_context(m), base, greater, TIE)
        for m in ("linear", "yarn")
    ]
    parts.append(_part("dynamic at L - base", scaled_at_context("dynamic"), base, at_most, TIE))
    return Finding(
        "dynamic",
        "Dynamic scaling avoids the degradation below L",
        "Peng et al. 2023 (YaRN), arXiv:2309.00071, sec. 3.3",
        f"scalings for {smax}x at context L: PI and YaRN - base > {TIE}; dynamic - base <= {TIE}",
        parts,
    )


def _streaming(results: Results, cfg: ExtendConfig) -> Finding:
    W, S, n, smax = cfg.window, cfg.sinks, cfg.max_len, max(cfg.factors)
    parts = []
    for m, test, t in (("window", greater, COLLAPSE), ("sinks", at_most, RESTORED)):
        key = ("rope", m, "free", smax, n)
        late, early = results.span(key, 2 * W + S, n - 1), results.span(key, W // 2, W)
        parts.append(_part(f"{m}: late - early", late, early, test, t))
    return Finding(
        "streaming",
        "Window attention collapses once the first tokens are evicted; a few sink tokens "
        "restore the loss",
        "Xiao et al. 2023 (StreamingLLM), arXiv:2309.17453",
        f"W = {W}, S = {S}: loss over [2W + S, {n - 1}) minus over [W/2, W): window > "
        f"{COLLAPSE}; sinks <= {RESTORED}",
        parts,
    )
