"""Check results and the registry of checks: each check knows which encodings it applies to;
measurement helpers the checks share."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..encodings.base import PositionalEncoding
from .subjects import evaluating

Comparison = Literal["<=", ">="]
#: A check body: measure something on an encoding, return (measured error, detail).
Measure = Callable[[PositionalEncoding], tuple[float, str]]
Applies = Callable[[PositionalEncoding], bool]


@dataclass(frozen=True)
class CheckResult:
    """One check on one encoding: passed when ``error`` <= ``tolerance`` (or >= for
    ``comparison=">="``, checks that demand an effect, e.g. order sensitivity)."""

    name: str
    encoding: str
    passed: bool
    error: float
    tolerance: float
    detail: str
    comparison: Comparison = "<="

    def as_dict(self) -> dict[str, object]:
        """JSON-ready view (``posenc check --json``); a NaN error (a check that raised) is null."""
        return {
            "name": self.name,
            "encoding": self.encoding,
            "passed": self.passed,
            "error": None if math.isnan(self.error) else self.error,
            "tolerance": self.tolerance,
            "comparison": self.comparison,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Check:
    """A named property with the predicate choosing the encodings it applies to."""

    name: str
    description: str
    applies: Applies
    measure: Measure
    tolerance: float
    comparison: Comparison = "<="

    def __call__(self, pe: PositionalEncoding) -> CheckResult:
        """Run on ``pe`` under ``torch.no_grad`` in eval mode (randomized positions sample only
        in training), then restore its mode. Raises ValueError when the check does not apply."""
        with torch.no_grad(), evaluating(pe):
            if not self.applies(pe):
                raise ValueError(f"check {self.name!r} does not apply to encoding {pe.name!r}")
            error, detail = self.measure(pe)
        ok = error <= self.tolerance if self.comparison == "<=" else error >= self.tolerance
        return CheckResult(
            self.name, pe.name, bool(ok), float(error), self.tolerance, detail, self.comparison
        )


CHECKS: dict[str, Check] = {}


def check(
    name: str, *, applies: Applies, tolerance: float, comparison: Comparison = "<="
) -> Callable[[Measure], Check]:
    """Decorator registering a measurement as check ``name`` (its docstring's first paragraph
    is the description shown in tables and the report)."""

    def decorate(fn: Measure) -> Check:
        if name in CHECKS:
            raise ValueError(f"check {name!r} is already registered")
        doc = " ".join((fn.__doc__ or name).strip().split("\n\n")[0].split())
        CHECKS[name] = Check(name, doc, applies, fn, tolerance, comparison)
        return CHECKS[name]

    return decorate


def relative_error(a: Tensor, b: Tensor) -> float:
    """max |a - b| / (1 + |b|): relative for large entries, absolute near 0."""
    return float(((a - b).abs() / (1 + b.abs())).max())


def largest_rise(values: Iterable[float]) -> float:
    """The largest step up between consecutive values, 0 when they never rise."""
    return max([0.0, *(b - a for a, b in itertools.pairwise(values))])
