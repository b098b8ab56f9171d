"""Published findings on length generalisation, each checked per task by a rule fixed before
looking at the numbers. Never best-of-group: every member of a group is compared with every
member of the other, or the same seeds are paired.

Common ground. Only runs that learned their task count (``results.learned``). A run's score
beyond training is the mean of its primary metric over its evaluated lengths past its longest
training length. An encoding's score on a task: the mean over its learned seeds with the
bootstrap 95% interval of ``posenc.lab.stats``. An encoding with fewer than ``MIN_SEEDS``
learned seeds is left out of the comparison and named. A group left empty, or too few paired
seeds, makes the verdict inconclusive. "a above b": the intervals are separated
(``Interval.above``). Verdicts per task: reproduced, not reproduced, inconclusive.

1. Learned absolute positions do not extrapolate (Kazemnejad et al. 2023, arXiv:2305.19466;
   Ruoss et al. 2023). Scope: decoder tasks with free-form answers (no chance level). Rule:
   reproduced if learned's interval beyond training ends at or below ``FLOOR`` (0.10), not
   reproduced if it starts above, inconclusive if it contains it.
2. In decoders NoPE and T5 generalise further than ALiBi, RoPE and absolute positions on copy
   tasks (Kazemnejad et al. 2023). Scope: ``copy``, ``copy_rep``. Rule: every member of
   {nope, t5} against every member of {alibi, rope, sinusoidal, learned} that ran: reproduced
   if each pair is separated in the claimed direction, not reproduced if any pair is separated
   the other way, inconclusive otherwise.
3. Randomized positions improve length generalisation (Ruoss et al. 2023, arXiv:2305.16843).
   Scope: every non-LM task. Rule, per randomized encoding R and its base X (``pe_config``
   ``base_encoding``, default rope): the interval of the paired difference R - X over the seeds
   where both learned; reproduced if it lies above 0, not reproduced if below 0, inconclusive
   if it contains 0.
4. ALiBi's language-model loss stays flat past the training length while sinusoidal and RoPE
   rise (Press et al. 2022, arXiv:2108.12409). Scope: ``lm``. A run's rise: loss in its last
   position bucket / loss in its first (which ends at the training length). Rule: reproduced
   if ALiBi's rise interval ends at or below ``FLAT`` (1.10) and lies below sinusoidal's and
   RoPE's (those that ran), not reproduced if it starts above 1.10 or one of theirs lies below
   it, inconclusive otherwise.
5. RoPE-Mixed extrapolates to higher resolution better than axial RoPE and absolute position
   tables (Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", ECCV 2024,
   arXiv:2403.13298). Scope: grid tasks (``task.axes`` = 2), trained at one resolution and
   evaluated at larger grids. Rule: rope_mixed against every member of {rope_2d, sincos_2d,
   learned_2d} that ran (learned_2d's table resampled to each grid): reproduced if each pair
   is separated with rope_mixed above, not reproduced if any pair is separated the other way,
   inconclusive otherwise.

The ``frontier`` preset's findings (rules fixed 2026-12-02, before its first run). Each is
"every member of A against every member of B that ran" (``group_verdict``): reproduced if each
pair's intervals are separated in the claimed direction, not reproduced if any pair is
separated the other way, inconclusive otherwise (overlap, or a side with < ``MIN_SEEDS``
learned seeds).

6. Forgetting attention's LM loss stays flat past the training length while RoPE's rises (Lin
   et al. 2025, "Forgetting Transformer", arXiv:2503.02130, fig. 2). Scope: ``lm``. The rise
   of finding 4 (last / first position bucket). Rule: as finding 4 with fox for alibi and
   {rope} the others: reproduced if fox's rise interval ends at or below ``FLAT`` (1.10) and
   lies below rope's; not reproduced if it starts above 1.10 or rope's lies below it;
   inconclusive otherwise.
7. Stick-breaking attention generalises to longer sequences than softmax attention with RoPE
   (Tan et al. 2024, arXiv:2410.17980). Scope: ``copy``, ``copy_rep``, ``sort``. Rule:
   {stick_breaking} against {rope}, mean exact match beyond training, higher better.
8. PaTH attention tracks state out of distribution where RoPE attention does not (Yang et al.
   2025, arXiv:2505.16381, on Liu et al. 2023's flip-flop language modelling). Scope:
   ``flip_flop`` (out of distribution: longer samples than training). Rule: {path} against
   {rope}, mean exact match of the final read beyond training, higher better.
9. Interleaving global NoPE layers with local RoPE layers (Llama 4's iRoPE; RNoPE-SWA, Yang et
   al. 2025, arXiv:2501.18795) retrieves past the training length better than RoPE on every
   layer. Scope: the retrieval tasks, ``induction`` (associative recall) and ``passkey``
   (added to the scope 2026-12-02 after the preset's first run, in which none of the 9
   ``induction`` runs passed the gate; the rule unchanged). Rule: {irope, rnope_swa} (those
   that ran) against {rope}, mean exact match beyond training, higher better.

The extend suite's findings, ``check_extend_findings`` (``ExtendFinding``):

Published findings on context extension, each checked by a rule fixed before any run.

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
from typing import Final, Literal

from .config import ExtendConfig, with_architecture
from .results import ExtendResults, Panel, Run, beyond_score
from .stats import MIN_SEEDS, Interval, bootstrap_interval, compare, paired_difference
from .tasks import TASKS

#: The verdicts of both suites' findings (the lab's per task, the extend suite's per run).
Verdict = Literal["reproduced", "not reproduced", "inconclusive"]
REPRODUCED: Final = "reproduced"
NOT_REPRODUCED: Final = "not reproduced"
INCONCLUSIVE: Final = "inconclusive"
#: An extend finding whose run lacks its methods or lengths.
NOT_EVALUATED: Final = "not evaluated"
FLOOR = 0.10
FLAT = 1.10
COPY_TASKS = ("copy", "copy_rep")
AHEAD, BEHIND = ("nope", "t5"), ("alibi", "rope", "sinusoidal", "learned")
SORT_AND_COPY_TASKS = (*COPY_TASKS, "sort")
INTERLEAVED = ("irope", "rnope_swa")
RETRIEVAL_TASKS = ("induction", "passkey")
MIXED, AXIAL_AND_TABLES = "rope_mixed", ("rope_2d", "sincos_2d", "learned_2d")


@dataclass(frozen=True)
class TaskVerdict:
    """A finding's verdict on one task config, with the numbers and the reason behind it."""

    task: str
    verdict: Verdict
    numbers: str
    reason: str


@dataclass(frozen=True)
class Finding:
    claim: str
    source: str
    rule: str
    verdicts: tuple[TaskVerdict, ...]
    missing: str  # what a sweep needs to measure it, shown when there is no verdict


@dataclass(frozen=True)
class Score:
    """An encoding's per-seed scores on one panel (learned runs only) and their interval."""

    encoding: str
    seeds: dict[int, float]
    n_total: int
    interval: Interval | None

    @property
    def comparable(self) -> bool:
        return self.interval is not None and self.interval.comparable

    def text(self) -> str:
        iv = self.interval
        value = iv.text() if iv is not None else "did not learn"
        return f"{self.encoding} {value} ({len(self.seeds)} of {self.n_total} learned)"


def score(panel: Panel, encoding: str, fn: Callable[[Run], float | None]) -> Score:
    """``encoding``'s scores ``fn(run)`` on ``panel`` over its learned seeds."""
    seeds = panel.seed_scores(encoding, fn)
    iv = bootstrap_interval(list(seeds.values())) if seeds else None
    return Score(encoding, seeds, len(panel.of(encoding)), iv)


def check_findings(panels: list[Panel]) -> list[Finding]:
    """The nine findings, each with a verdict per task config it applies to."""
    return [
        _learned_absolute(panels),
        _kazemnejad(panels),
        _randomized(panels),
        _press(panels),
        _heo(panels),
        _lin(panels),
        _tan(panels),
        _yang_path(panels),
        _interleaved(panels),
    ]


def _beyond(panel: Panel) -> Callable[[Run], float | None]:
    return lambda r: beyond_score(r, panel.metric)


def _learned_absolute(panels: list[Panel]) -> Finding:
    scope = [
        p
        for p in panels
        if _decoder(p) and p.chance is None and "learned" in p.encodings and p.beyond
    ]
    verdicts = []
    for p in scope:
        s = score(p, "learned", _beyond(p))
        v, why = _floor_verdict(s)
        verdicts.append(TaskVerdict(p.label, v, s.text(), why))
    return Finding(
        "Learned absolute positions do not extrapolate",
        "Kazemnejad et al. 2023; Ruoss et al. 2023",
        f"learned's mean exact match beyond training: interval <= {FLOOR:.2f} (decoder tasks "
        "with free-form answers)",
        tuple(verdicts),
        "needs learned on a decoder task with free-form answers (copy_rep, copy, sort, ...)",
    )


def _floor_verdict(s: Score) -> tuple[Verdict, str]:
    iv = s.interval
    if iv is None or not s.comparable:
        return "inconclusive", f"{len(s.seeds)} learned seeds, {MIN_SEEDS} needed"
    if iv.hi <= FLOOR:
        return "reproduced", f"interval ends at or below {FLOOR:.2f}"
    if iv.lo > FLOOR:
        return "not reproduced", f"interval starts above {FLOOR:.2f}"
    return "inconclusive", f"interval contains {FLOOR:.2f}"


def _kazemnejad(panels: list[Panel]) -> Finding:
    verdicts = []
    for p in panels:
        a = [score(p, e, _beyond(p)) for e in AHEAD if e in p.encodings]
        b = [score(p, e, _beyond(p)) for e in BEHIND if e in p.encodings]
        if p.task in COPY_TASKS and p.beyond and a and b:
            v, why = group_verdict(a, b, higher_is_better=True)
            numbers = "; ".join(s.text() for s in a) + " vs " + "; ".join(s.text() for s in b)
            verdicts.append(TaskVerdict(p.label, v, numbers, why))
    return Finding(
        "Decoders: NoPE and T5 generalise further than ALiBi, RoPE and absolute positions",
        "Kazemnejad et al. 2023",
        "every member of {nope, t5} above every member of {alibi, rope, sinusoidal, learned} "
        "(mean exact match beyond training, intervals separated), per copy task",
        tuple(verdicts),
        "needs nope or t5 and one of alibi/rope/sinusoidal/learned on copy or copy_rep",
    )


def _randomized(panels: list[Panel]) -> Finding:
    verdicts = []
    for p in panels:
        for enc in (e for e in p.encodings if e.startswith("randomized")):
            base = _base_encoding(p, enc)
            if p.metric == "loss" or base not in p.encodings or not p.beyond:
                continue
            r, x = score(p, enc, _beyond(p)), score(p, base, _beyond(p))
            diff = paired_difference(r.seeds, x.seeds)
            v, why = _paired_verdict(diff)
            numbers = f"{r.text()} vs {x.text()}; paired {enc} - {base}: "
            numbers += "no common seeds" if diff is None else diff.text()
            verdicts.append(TaskVerdict(f"{p.label}: {enc} vs {base}", v, numbers, why))
    return Finding(
        "Randomized positions improve length generalisation",
        "Ruoss et al. 2023",
        "paired difference randomized X - X over seeds where both learned (mean exact match "
        "beyond training): interval above 0, per task",
        tuple(verdicts),
        "needs a randomized encoding and its base encoding on one task",
    )


def _press(panels: list[Panel]) -> Finding:
    verdicts = []
    for p in (p for p in panels if p.task == "lm" and "alibi" in p.encodings):
        alibi = score(p, "alibi", loss_rise)
        others = [score(p, e, loss_rise) for e in ("sinusoidal", "rope") if e in p.encodings]
        v, why = _press_verdict(alibi, others)
        numbers = "; ".join(s.text() for s in (alibi, *others))
        verdicts.append(TaskVerdict(p.label, v, f"loss rise (last / first bucket): {numbers}", why))
    return Finding(
        "ALiBi's LM loss stays flat past the training length; sinusoidal and RoPE rise",
        "Press et al. 2022",
        f"per run, loss in the last / the first position bucket; alibi's interval <= x{FLAT:.2f} "
        "and below sinusoidal's and rope's",
        tuple(verdicts),
        "needs lm runs of alibi and sinusoidal or rope (posenc lab --preset lm)",
    )


def _heo(panels: list[Panel]) -> Finding:
    verdicts = []
    for p in panels:
        others = [score(p, e, _beyond(p)) for e in AXIAL_AND_TABLES if e in p.encodings]
        if _grid(p) and p.beyond and MIXED in p.encodings and others:
            mixed = score(p, MIXED, _beyond(p))
            v, why = group_verdict([mixed], others, higher_is_better=True)
            numbers = mixed.text() + " vs " + "; ".join(s.text() for s in others)
            verdicts.append(TaskVerdict(p.label, v, numbers, why))
    return Finding(
        "RoPE-Mixed extrapolates to higher resolution better than axial RoPE and absolute tables",
        "Heo et al. 2024",
        "rope_mixed above every member of {rope_2d, sincos_2d, learned_2d (resampled)} (mean "
        "accuracy on the grids larger than training's, intervals separated), per grid task",
        tuple(verdicts),
        "needs rope_mixed and rope_2d, sincos_2d or learned_2d on a grid task "
        "(posenc lab --preset grid)",
    )


def _press_verdict(flat: Score, others: list[Score]) -> tuple[Verdict, str]:
    """Finding 4's rule (and 6's): ``flat``'s rise at most x``FLAT`` and below each of
    ``others``'."""
    iv, name = flat.interval, flat.encoding
    if iv is not None and flat.comparable and iv.lo > FLAT:
        return "not reproduced", f"{name}'s rise starts above x{FLAT:.2f}"
    if not others:
        return "inconclusive", "no run to compare with"
    v, why = group_verdict([flat], others, higher_is_better=False)
    if v == "reproduced" and iv is not None and iv.hi > FLAT:
        return "inconclusive", f"{name}'s rise interval reaches above x{FLAT:.2f}"
    return v, why


def _lin(panels: list[Panel]) -> Finding:
    verdicts = []
    for p in (p for p in panels if p.task == "lm" and "fox" in p.encodings):
        fox = score(p, "fox", loss_rise)
        others = [score(p, "rope", loss_rise)] if "rope" in p.encodings else []
        v, why = _press_verdict(fox, others)
        numbers = "; ".join(s.text() for s in (fox, *others))
        verdicts.append(TaskVerdict(p.label, v, f"loss rise (last / first bucket): {numbers}", why))
    return Finding(
        "Forgetting attention's LM loss stays flat past the training length; RoPE's rises",
        "Lin et al. 2025",
        f"per run, loss in the last / the first position bucket; fox's interval <= x{FLAT:.2f} "
        "and below rope's",
        tuple(verdicts),
        "needs lm runs of fox and rope (posenc lab --preset frontier)",
    )


def _ahead_of(
    panels: list[Panel], tasks: tuple[str, ...], ahead: tuple[str, ...], behind: tuple[str, ...]
) -> tuple[TaskVerdict, ...]:
    """Per panel of ``tasks`` where both groups ran: every member of ``ahead`` above every
    member of ``behind`` (mean primary metric beyond training, ``group_verdict``)."""
    verdicts = []
    for p in (p for p in panels if p.task in tasks and p.beyond):
        a = [score(p, e, _beyond(p)) for e in ahead if e in p.encodings]
        b = [score(p, e, _beyond(p)) for e in behind if e in p.encodings]
        if a and b:
            v, why = group_verdict(a, b, higher_is_better=True)
            numbers = "; ".join(s.text() for s in a) + " vs " + "; ".join(s.text() for s in b)
            verdicts.append(TaskVerdict(p.label, v, numbers, why))
    return tuple(verdicts)


def _tan(panels: list[Panel]) -> Finding:
    return Finding(
        "Stick-breaking attention generalises to longer sequences than softmax with RoPE",
        "Tan et al. 2024",
        "stick_breaking above rope (mean exact match beyond training, intervals separated), "
        "per copy or sort task",
        _ahead_of(panels, SORT_AND_COPY_TASKS, ("stick_breaking",), ("rope",)),
        "needs stick_breaking and rope on copy, copy_rep or sort (posenc lab --preset frontier)",
    )


def _yang_path(panels: list[Panel]) -> Finding:
    return Finding(
        "PaTH attention tracks state out of distribution where RoPE fails (flip-flop)",
        "Yang et al. 2025 (PaTH); Liu et al. 2023 (flip-flop)",
        "path above rope (mean exact match of the final read beyond training, intervals "
        "separated) on flip_flop",
        _ahead_of(panels, ("flip_flop",), ("path",), ("rope",)),
        "needs path and rope on flip_flop (posenc lab --preset frontier)",
    )


def _interleaved(panels: list[Panel]) -> Finding:
    return Finding(
        "Global NoPE layers between local RoPE layers (iRoPE, RNoPE-SWA) retrieve past the "
        "training length better than RoPE everywhere",
        "Meta 2025 (Llama 4); Yang et al. 2025 (RNoPE-SWA)",
        "every member of {irope, rnope_swa} above rope (mean exact match beyond training, "
        "intervals separated), per retrieval task (induction, passkey)",
        _ahead_of(panels, RETRIEVAL_TASKS, INTERLEAVED, ("rope",)),
        "needs irope or rnope_swa and rope on induction or passkey (posenc lab --preset frontier)",
    )


def loss_rise(run: Run) -> float | None:
    """Loss in the run's last position bucket over the loss in its first (None: no loss)."""
    by_len = {n: v for (m, n), v in run.metrics.items() if m == "loss"}
    return by_len[max(by_len)] / by_len[min(by_len)] if by_len else None


def group_verdict(a: list[Score], b: list[Score], *, higher_is_better: bool) -> tuple[Verdict, str]:
    """Every comparable member of ``a`` against every comparable member of ``b`` (the claim:
    a is better); members with too few learned seeds are left out and named."""
    out = [s.encoding for s in (*a, *b) if not s.comparable]
    note = f"; left out (< {MIN_SEEDS} learned seeds): {', '.join(out)}" if out else ""
    a_ok, b_ok = [s for s in a if s.comparable], [s for s in b if s.comparable]
    if not a_ok or not b_ok:
        return "inconclusive", f"a group has no member with {MIN_SEEDS} learned seeds{note}"
    pairs = [(x, y, _cmp(x, y, higher_is_better)) for x in a_ok for y in b_ok]
    against = [f"{y.encoding} ahead of {x.encoding}" for x, y, c in pairs if c < 0]
    if against:
        return "not reproduced", ", ".join(against) + note
    tied = [f"{x.encoding} ~ {y.encoding}" for x, y, c in pairs if c == 0]
    if tied:
        return "inconclusive", "intervals overlap: " + ", ".join(tied) + note
    return "reproduced", f"all {len(pairs)} pairs separated" + note


def _cmp(x: Score, y: Score, higher_is_better: bool) -> int:
    """``stats.compare`` of two comparable scores (0 if either has no interval)."""
    if x.interval is None or y.interval is None:
        return 0
    return compare(x.interval, y.interval, higher_is_better=higher_is_better)


def _paired_verdict(diff: Interval | None) -> tuple[Verdict, str]:
    if diff is None or not diff.comparable:
        n = 0 if diff is None else diff.n
        return "inconclusive", f"{n} paired seeds, {MIN_SEEDS} needed"
    zero = Interval(0.0, 0.0, 0.0, 1)
    if diff.above(zero):
        return "reproduced", "the paired difference's interval lies above 0"
    if zero.above(diff):
        return "not reproduced", "the paired difference's interval lies below 0"
    return "inconclusive", "the paired difference's interval contains 0"


def _base_encoding(panel: Panel, encoding: str) -> str:
    """What a randomized encoding draws positions for: its ``base_encoding`` (default rope),
    of the same architecture (``rope (encoder-decoder)`` for an encoder-decoder's)."""
    cfg = next(r.config for r in panel.of(encoding))
    base = str(cfg.get("pe_config", {}).get("base_encoding", "rope"))
    return with_architecture(base, cfg.get("model", {}).get("architecture", "decoder"))


def _grid(panel: Panel) -> bool:
    return panel.task in TASKS and TASKS[panel.task].axes > 1


def _decoder(panel: Panel) -> bool:
    return panel.task in TASKS and TASKS[panel.task].kind == "decoder"


# --- the extend suite's findings on context extension --------------------------------------------

BLOWUP, CLOSE, TIE, FLAT_NATS, COLLAPSE, RESTORED = 0.5, 0.1, 0.02, 0.05, 0.5, 0.1


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
class ExtendFinding:
    """A published claim, its rule, and the verdict with the parts that decided it."""

    key: str
    claim: str
    source: str
    rule: str
    parts: list[Part] = field(default_factory=list)
    note: str = ""

    @property
    def verdict(self) -> Verdict | Literal["not evaluated"]:
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
    d = paired_difference(a, b) if a and b else None
    return Part(claim, d, test(d, t))


def check_extend_findings(
    results: ExtendResults, cfg: ExtendConfig, gated: set[int] | None = None
) -> list[ExtendFinding]:
    """The six findings on ``results`` of a run of ``cfg``; ``gated``: the seeds whose base
    RoPE model passed the passkey gate at L (default: every seed)."""
    L, fs = cfg.context, cfg.factors
    gated = set(cfg.seeds) if gated is None else gated
    base = results.loss(("rope", "none", "free", 1, L))

    def loss(m: str, v: str, s: int, enc: str = "rope") -> dict[int, float]:
        return results.loss((enc, m, v, s, s * L))

    return [
        _chen(results, cfg, base, loss, gated),
        ExtendFinding(
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
        ExtendFinding(
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
        ExtendFinding(
            "alibi",
            "ALiBi's loss stays flat past L without any change",
            "Press et al. 2022 (ALiBi), arXiv:2108.12409",
            f"loss(alibi, s·L) - loss(alibi, L) <= {FLAT_NATS} at every s",
            [
                _part(
                    f"alibi at {s}x - at 1x",
                    loss("none", "free", s, "alibi"),
                    results.loss(("alibi", "none", "free", 1, L)),
                    at_most,
                    FLAT_NATS,
                )
                for s in fs
            ],
        ),
    ]


def _chen(
    results: ExtendResults, cfg: ExtendConfig, base: dict, loss: Callable, gated: set
) -> ExtendFinding:
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
        parts.append(
            Part(f"passkey linear - none (tuned) at {smax}x", paired_difference(*pk), None)
        )
        note = f"passkey part open: {len(gated)} seed(s) passed the passkey gate at L"
    else:
        parts.append(_part(f"passkey linear - none (tuned) at {smax}x", pk[0], pk[1], greater, 0.0))
    return ExtendFinding(
        "pi",
        "Extrapolating RoPE past L blows up the loss; PI with a short fine-tune stays close to "
        "the loss at L and helps passkey retrieval at the extended length",
        "Chen et al. 2023 (position interpolation), arXiv:2306.15595",
        f"none at s >= 4: d > {BLOWUP}; PI tuned: d <= {CLOSE} at every s; passkey PI - none "
        f"(tuned, {smax}x) > 0 on gated seeds",
        parts,
        note,
    )


def _dynamic(results: ExtendResults, cfg: ExtendConfig, base: dict) -> ExtendFinding:
    L, smax = cfg.context, max(cfg.factors)

    def scaled_at_context(m: str) -> dict[int, float]:
        return results.loss(("rope", m, "free", smax, L))

    parts = [
        _part(f"{m} ({smax}x scaling) at L - base", scaled_at_context(m), base, greater, TIE)
        for m in ("linear", "yarn")
    ]
    parts.append(_part("dynamic at L - base", scaled_at_context("dynamic"), base, at_most, TIE))
    return ExtendFinding(
        "dynamic",
        "Dynamic scaling avoids the degradation below L",
        "Peng et al. 2023 (YaRN), arXiv:2309.00071, sec. 3.3",
        f"scalings for {smax}x at context L: PI and YaRN - base > {TIE}; dynamic - base <= {TIE}",
        parts,
    )


def _streaming(results: ExtendResults, cfg: ExtendConfig) -> ExtendFinding:
    W, S, n, smax = cfg.window, cfg.sinks, cfg.max_len, max(cfg.factors)
    parts = []
    for m, test, t in (("window", greater, COLLAPSE), ("sinks", at_most, RESTORED)):
        key = ("rope", m, "free", smax, n)
        late, early = results.span(key, 2 * W + S, n - 1), results.span(key, W // 2, W)
        parts.append(_part(f"{m}: late - early", late, early, test, t))
    return ExtendFinding(
        "streaming",
        "Window attention collapses once the first tokens are evicted; a few sink tokens "
        "restore the loss",
        "Xiao et al. 2023 (StreamingLLM), arXiv:2309.17453",
        f"W = {W}, S = {S}: loss over [2W + S, {n - 1}) minus over [W/2, W): window > "
        f"{COLLAPSE}; sinks <= {RESTORED}",
        parts,
    )
