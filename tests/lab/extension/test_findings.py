"""The findings' rules on synthetic numbers: each verdict where its rule says."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posenc.lab.findings import (
    INCONCLUSIVE,
    NOT_EVALUATED,
    NOT_REPRODUCED,
    REPRODUCED,
    at_most,
    check_extend_findings,
    greater,
    less,
)
from posenc.lab.results import ExtendResults
from posenc.lab.stats import Interval
from posenc.lab.store import ExtendRow

from .conftest import TINY

CFG = replace(TINY, factors=(2, 4), seeds=(0, 1, 2), window=8, sinks=2)
L = CFG.context
NOISE = (0.0, 0.01, -0.01)  # per seed


def _loss(enc: str, m: str, v: str, s: int, n: int, value: float | tuple) -> list[ExtendRow]:
    """Rows of one loss per seed: ``value`` plus ``NOISE``, or a tuple of the seeds' values."""
    values = value if isinstance(value, tuple) else [value + e for e in NOISE]
    return [
        ExtendRow(seed, enc, m, v, s, n, "loss", x)
        for seed, x in zip(CFG.seeds, values, strict=True)
    ]


def _stream(m: str, early: float, late: float) -> list[ExtendRow]:
    n, s = CFG.max_len, max(CFG.factors)
    rows = []
    for start in range(0, n - 1, 4):
        value = early if start < 2 * CFG.window + CFG.sinks else late
        rows += [
            ExtendRow(
                seed, "rope", m, "free", s, n, "bucket", value + e, start, min(start + 4, n - 1)
            )
            for seed, e in zip(CFG.seeds, NOISE, strict=True)
        ]
    return rows


def _passkey(m: str, v: str, s: int, acc: tuple[float, float, float]) -> list[ExtendRow]:
    return [
        ExtendRow(seed, "rope", m, v, s, s * L, "passkey", a, depth=d)
        for seed, a in zip(CFG.seeds, acc, strict=True)
        for d in CFG.depths
    ]


def published(**change: float | tuple) -> list[ExtendRow]:
    """Numbers that behave as the papers say (``change``: overrides by name; a tuple gives
    each seed's value, so that paired differences vary by seed)."""
    x = {
        "base": 1.5,
        "none2": 1.8,
        "none4": 2.6,
        "pi_tuned": 1.52,
        "pi_free": 2.0,
        "ntk_free": 1.7,
        "yarn_free": 1.68,
        "yarn_tuned": 1.515,
        "ntk_tuned": 1.53,
        "pi_at_L": 1.8,
        "yarn_at_L": 1.6,
        "dyn_at_L": 1.5,
        "window_late": 3.0,
        "sinks_late": 1.45,
        "alibi1": 1.6,
        "alibi_far": 1.58,
    } | change
    smax = max(CFG.factors)
    rows = _loss("rope", "none", "free", 1, L, x["base"])
    rows += _loss("rope", "none", "free", 2, 2 * L, x["none2"])
    rows += _loss("rope", "none", "free", 4, 4 * L, x["none4"])
    for s in CFG.factors:
        n = s * L
        for m, key in (("linear", "pi"), ("ntk", "ntk"), ("yarn", "yarn")):
            rows += _loss("rope", m, "free", s, n, x[f"{key}_free"])
            rows += _loss("rope", m, "tuned", s, n, x[f"{key}_tuned"])
        rows += _loss("alibi", "none", "free", s, n, x["alibi_far"])
    rows += _loss("alibi", "none", "free", 1, L, x["alibi1"])
    for m, key in (("linear", "pi"), ("yarn", "yarn"), ("dynamic", "dyn")):
        rows += _loss("rope", m, "free", smax, L, x[f"{key}_at_L"])
    rows += _passkey("linear", "tuned", smax, (1.0, 0.9, 1.0))
    rows += _passkey("none", "tuned", smax, (0.1, 0.3, 0.2))
    rows += _stream("window", 2.0, x["window_late"])
    rows += _stream("sinks", 2.0, x["sinks_late"])
    return rows


def verdicts(rows: list[ExtendRow], gated: set[int] | None = None) -> dict[str, str]:
    return {f.key: f.verdict for f in check_extend_findings(ExtendResults(rows), CFG, gated)}


def test_numbers_as_published_reproduce_every_finding() -> None:
    assert verdicts(published()) == dict.fromkeys(
        ["pi", "ntk", "yarn", "dynamic", "streaming", "alibi"], REPRODUCED
    )


@pytest.mark.parametrize(
    ("change", "key", "verdict"),
    [
        ({"none4": 1.7}, "pi", NOT_REPRODUCED),  # extrapolation does not blow up
        ({"pi_tuned": 1.9}, "pi", NOT_REPRODUCED),  # PI fine-tuned far from the loss at L
        ({"ntk_free": 2.1}, "ntk", NOT_REPRODUCED),  # NTK worse than PI
        ({"ntk_free": 2.0}, "ntk", NOT_REPRODUCED),  # a tie: NTK does not beat PI
        ({"ntk_free": (2.1, 1.95, 2.0)}, "ntk", INCONCLUSIVE),  # the interval straddles 0
        ({"yarn_tuned": 1.6}, "yarn", NOT_REPRODUCED),  # YaRN worse than PI once fine-tuned
        ({"yarn_free": (1.73, 1.69, 1.70)}, "yarn", INCONCLUSIVE),  # straddles +0.02
        ({"dyn_at_L": 1.7}, "dynamic", NOT_REPRODUCED),  # dynamic degrades below L too
        ({"pi_at_L": 1.5, "yarn_at_L": 1.5}, "dynamic", NOT_REPRODUCED),  # nothing degrades
        ({"window_late": 2.2}, "streaming", NOT_REPRODUCED),  # no collapse
        ({"sinks_late": 2.9}, "streaming", NOT_REPRODUCED),  # sinks do not restore
        ({"alibi_far": 2.5}, "alibi", NOT_REPRODUCED),  # ALiBi's loss grows past L
        ({"alibi_far": (1.66, 1.61, 1.64)}, "alibi", INCONCLUSIVE),  # straddles +0.05
    ],
)
def test_each_rule_decides_as_stated(change: dict, key: str, verdict: str) -> None:
    assert verdicts(published(**change))[key] == verdict


def test_passkey_part_needs_two_gated_seeds() -> None:
    found = {f.key: f for f in check_extend_findings(ExtendResults(published()), CFG, gated={0})}
    assert found["pi"].verdict == INCONCLUSIVE
    assert "1 seed(s) passed" in found["pi"].note
    assert verdicts(published(), gated={0, 2})["pi"] == REPRODUCED


def test_missing_measures_are_not_evaluated() -> None:
    rows = [r for r in published() if r.method not in ("window", "sinks")]
    assert verdicts(rows)["streaming"] == NOT_EVALUATED
    assert verdicts([])["alibi"] == NOT_EVALUATED


def test_three_valued_tests() -> None:
    iv = Interval(0.3, 0.2, 0.4, 3)
    assert (greater(iv, 0.1), greater(iv, 0.4), greater(iv, 0.3)) == (True, False, None)
    assert (at_most(iv, 0.4), at_most(iv, 0.1), at_most(iv, 0.3)) == (True, False, None)
    assert (less(iv, 0.5), less(iv, 0.2), less(iv, 0.3)) == (True, False, None)
    assert greater(None, 0.0) is None
