"""CoPE against x-transformers."""

from __future__ import annotations

import pytest
import torch

import posenc
from tests.encodings._helpers import (
    masked_scores,
    qkv,
)


@pytest.mark.anchor
def test_matches_x_transformers() -> None:
    xt = pytest.importorskip("x_transformers.x_transformers")
    theirs = xt.CoPE(dim=8, heads=3, max_pos=6)
    ours = posenc.build("cope", head_dim=8, n_positions=6)
    with torch.no_grad():
        theirs.pos_emb.normal_()
        ours.pos_emb.copy_(theirs.pos_emb)
    q, k, _ = qkv(Tq=9, Tk=9)
    q, k = q.float(), k.float()
    scores = masked_scores(q, k)
    want = scores + theirs(q, scores)
    got = ours.relative_logits(scores, q, k, torch.arange(9), torch.arange(9))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
