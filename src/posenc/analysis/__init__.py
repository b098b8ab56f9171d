"""posenc.analysis: verify the math of every encoding with property checks.

``run_checks()`` runs each check on every registered encoding it applies to and returns
``CheckResult`` rows (name, encoding, passed, error, tolerance, detail). A check chooses its
encodings from their family and the hooks they override, so new encodings join by
registering. ``posenc check`` prints the same results as a PASS/FAIL table.
"""

from .result import CHECKS, Check, CheckResult, check
from .subjects import attention_weights, resolve, subject
from .suite import all_checks, applicable, run_checks

__all__ = [
    "CHECKS",
    "Check",
    "CheckResult",
    "all_checks",
    "applicable",
    "attention_weights",
    "check",
    "resolve",
    "run_checks",
    "subject",
]
