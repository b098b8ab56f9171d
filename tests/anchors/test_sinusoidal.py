"""The sinusoidal table against Hugging Face's interleaved tables (XLM's
``create_sinusoidal_embeddings``, shared by Flaubert and DistilBERT), odd widths included, and
odd-width models built on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import functional as PF


@pytest.mark.anchor
@pytest.mark.parametrize("dim", [7, 9, 16, 33])
def test_table_matches_xlm_create_sinusoidal_embeddings(dim: int) -> None:
    from transformers.models.xlm.modeling_xlm import create_sinusoidal_embeddings

    theirs = create_sinusoidal_embeddings(40, dim, torch.empty(40, dim))  # float32
    ours = PF.sinusoidal_table(40, dim)
    np.testing.assert_allclose(theirs.numpy(), ours, rtol=0, atol=1e-6)


def test_an_odd_width_model_adds_the_table() -> None:
    """d_model = 9 (3 heads of 3): the encoding adds the 9-column table, and the model runs."""
    pe = posenc.build("sinusoidal", dim=9).double()
    x = torch.zeros(2, 4, 9, dtype=torch.float64)
    np.testing.assert_allclose(pe.embed(x, torch.arange(4))[0].numpy(), PF.sinusoidal_table(4, 9))
    model = posenc.TinyTransformer(vocab_size=7, pe="sinusoidal", d_model=9, n_heads=3)
    assert model(torch.zeros(1, 5, dtype=torch.long)).shape == (1, 5, 7)
