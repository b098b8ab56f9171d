"""Per-layer schedules as lab encodings: ``irope`` and ``rnope_swa`` name a whole model's
layout (an encoding and a local attention per layer), not one encoding for every layer.

A sweep lists them among its encodings like any registered name; their ``pe_config`` holds
the keyword arguments of the library's preset of that name (``posenc._schedule.irope``,
``rnope_swa``), and ``LabModel`` builds ``TinyTransformer(pe=<that LayerSchedule>)``, so the
pattern repeats to ``model.n_layers``. Scaled down to the lab (a 2-layer model, training
lengths of tens of tokens) the presets take ``interval``, ``chunk`` and ``window`` to suit:
the ``frontier`` preset gives ``interval = 2`` (one local RoPE layer, one global NoPE
layer: Llama 4 and Command R7B have three local layers to one global; at the lab's depth a
pattern of four would leave the model without a NoPE layer) and a window or chunk shorter
than the training samples, so the local layers never see a distance they were not trained at.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Never

from .._schedule import LayerSchedule, irope, rnope_swa

#: Lab encoding name -> the library preset that builds its schedule from ``pe_config``.
SCHEDULES: dict[str, Callable[..., LayerSchedule[Never]]] = {
    "irope": irope,
    "rnope_swa": rnope_swa,
}


def is_schedule(encoding: str) -> bool:
    """Whether ``encoding`` is a lab schedule name (``SCHEDULES``), not a registered encoding."""
    return encoding in SCHEDULES


def lab_schedule(encoding: str, pe_config: dict[str, Any] | None = None) -> LayerSchedule[Never]:
    """The ``LayerSchedule`` of lab schedule ``encoding`` with ``pe_config`` its preset's
    keyword arguments (``irope(interval=2, chunk=8)``).

    Raises: ValueError for a name not in ``SCHEDULES`` (naming them) or a key the preset does
    not take; the preset's own TypeError/ValueError for a bad value.
    """
    if encoding not in SCHEDULES:
        raise ValueError(f"unknown lab schedule {encoding!r}; choose one of {list(SCHEDULES)}")
    try:
        return SCHEDULES[encoding](**(pe_config or {}))
    except TypeError as err:
        if "unexpected keyword argument" not in str(err):
            raise
        raise ValueError(f"pe_config of schedule {encoding!r}: {err}") from None
