"""``posenc demo``: a few lines that show what the encodings do, with numbers to check."""

from __future__ import annotations

from typing import Annotated

import typer


def demo(
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Show permutation equivariance without positions, and RoPE's relative dot product."""
    import torch
    from rich.console import Console
    from rich.table import Table

    from .. import functional as PF
    from ..models import TinyTransformer
    from ..registry import build, names

    console = Console()
    torch.manual_seed(seed)
    idx = torch.randint(0, 32, (1, 12))
    perm = torch.randperm(12)
    table = Table(title="Encoder outputs under a token permutation: max |f(Px) - P f(x)|")
    table.add_column("encoding")
    table.add_column("max error", justify="right")
    table.add_column("order-aware?")
    for name in ("nope", "sinusoidal", "learned", "rope"):
        model = TinyTransformer(vocab_size=32, pe=name, causal=False, d_model=32, max_len=64)
        with torch.no_grad():
            err = (model.features(idx[:, perm]) - model.features(idx)[:, perm]).abs().max().item()
        table.add_row(name, f"{err:.2e}", "yes" if err > 1e-4 else "no (a set, not a sequence)")
    console.print(table)

    rope = build("rope", head_dim=8)
    q, k = (torch.randn(1, 1, 1, 8, dtype=torch.float64) for _ in range(2))
    console.print("RoPE: <R_m q, R_n k> depends only on n - m = 4:")
    for m, n in ((3, 7), (103, 107), (10003, 10007)):
        qm, kn = rope.rotate(q, k, torch.tensor([m]), torch.tensor([n]))
        console.print(f"  m={m:>5}  n={n:>5}  dot={float((qm * kn).sum()):+.12f}")
    console.print("sinusoidal_table(4, 6) on NumPy (rows = positions):")
    console.print(PF.sinusoidal_table(4, 6).round(4))
    console.print(f"{len(names())} encodings registered: {', '.join(names())}")
