"""generate's next-token filter against Hugging Face transformers' logits processors
(TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, applied in generate's order)."""

from __future__ import annotations

import pytest
import torch

from posenc.models import Sampling


@pytest.mark.anchor
@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.9), (0.5, 20, 0.6), (2.0, 1, None)],
)
def test_filter_matches_transformers_warpers(
    temperature: float, top_k: int | None, top_p: float | None
) -> None:
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None:
        warpers.append(TopPLogitsWarper(top_p))
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 3
    theirs = warpers(torch.zeros(6, 1, dtype=torch.long), logits.clone())
    ours = Sampling(temperature=temperature, top_k=top_k, top_p=top_p).filter(logits)
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
    kept = ~torch.isinf(ours)
    torch.testing.assert_close(ours[kept], theirs[kept])
