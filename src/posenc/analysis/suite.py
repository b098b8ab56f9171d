"""Run every applicable check on every registered encoding (``posenc check``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..encodings.base import PositionalEncoding
from .result import CHECKS, Check, CheckResult
from .subjects import resolve, subject_names


def _load() -> None:
    """Import the modules whose ``@check`` decorators fill ``CHECKS``."""
    from . import bias_checks, extension_checks, model_checks, rotary_checks, table_checks

    del bias_checks, extension_checks, model_checks, rotary_checks, table_checks


def all_checks() -> list[Check]:
    """Every registered check, in registration order."""
    _load()
    return list(CHECKS.values())


def applicable(pe: PositionalEncoding | str) -> list[Check]:
    """The checks that apply to ``pe`` (an instance or a registered name)."""
    pe = resolve(pe)
    return [c for c in all_checks() if c.applies(pe)]


def run_checks(
    encodings: Iterable[PositionalEncoding | str] | None = None,
    *,
    only: Sequence[str] | None = None,
) -> list[CheckResult]:
    """Results of every applicable check on each encoding (default: ``subject_names()``).

    ``only`` restricts to the named checks. Runs in float64 under ``torch.no_grad``; a check
    that raises is reported as a FAIL with the exception in its detail.
    Raises: ValueError for an unknown encoding or check name (listing the valid ones).
    """
    known = {c.name for c in all_checks()}
    unknown = sorted(set(only or ()) - known)
    if unknown:
        raise ValueError(f"unknown check(s) {unknown}; choose from {sorted(known)}")
    results = []
    for item in subject_names() if encodings is None else encodings:
        pe = resolve(item)
        for c in applicable(pe):
            if only is None or c.name in only:
                results.append(_run(c, pe))
    return results


def _run(c: Check, pe: PositionalEncoding) -> CheckResult:
    """``c(pe)``; an exception inside the measurement is a FAIL that names it."""
    try:
        return c(pe)
    except Exception as err:  # a crashing check must show up as a failure, not hide others
        detail = f"raised {type(err).__name__}: {err}"
        return CheckResult(c.name, pe.name, False, float("nan"), c.tolerance, detail, c.comparison)
