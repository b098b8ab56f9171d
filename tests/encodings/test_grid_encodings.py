"""Grid encodings (rope_2d, rope_3d, mrope, rope_mixed, sincos_2d, learned_2d) against the
float64 references of tests/reference/grid.py, their relative property, and their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
import posenc.functional as PF
from tests.reference import grid as ref

GRID = posenc.grid_positions(4, 5)  # (20, 2) (row, column)


def _qk(H: int, T: int, D: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(2, H, T, D, generator=gen, dtype=torch.float64) for _ in range(2))  # type: ignore[return-value]


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    ("name", "config", "angles"),
    [
        ("rope_2d", {}, lambda p: ref.axial_angles(p, (4, 4), 100.0)),
        (
            "rope_2d",
            {"sections": (3, 5), "base": 50.0},
            lambda p: ref.axial_angles(p, (3, 5), 50.0),
        ),
        ("rope_3d", {"sections": (2, 3, 3)}, lambda p: ref.axial_angles(p, (2, 3, 3), 1e4)),
        ("mrope", {"mrope_section": (2, 3, 3)}, lambda p: ref.mrope_angles(p, (2, 3, 3), 1e4)),
        (
            "mrope",
            {"mrope_section": (4, 2, 2), "interleaved": True, "base": 1e6},
            lambda p: ref.mrope_angles(p, (4, 2, 2), 1e6, interleaved=True),
        ),
    ],
)
def test_axial_encodings_equal_the_reference(name, config, angles, layout: str) -> None:  # type: ignore[no-untyped-def]
    pe = posenc.build(name, head_dim=16, layout=layout, **config)
    A = pe.capabilities.axes
    pos = torch.randint(0, 3000, (2, 7, A), generator=torch.Generator().manual_seed(1))
    q, k = _qk(2, 7, 16)
    rq, rk = pe.rotate(q, k, pos, pos)
    for b in range(2):
        a = angles(pos[b].numpy())[None]  # (1, T, P), shared by the heads
        np.testing.assert_allclose(
            rq[b].numpy(), ref.rotate_pairs(q[b].numpy(), a, layout), atol=1e-12
        )
        np.testing.assert_allclose(
            rk[b].numpy(), ref.rotate_pairs(k[b].numpy(), a, layout), atol=1e-12
        )


def test_rope_2d_is_heo_et_al_axial_with_the_column_first() -> None:
    """Heo et al.'s code turns the first D/4 complex pairs by x (the column): rope_2d (rows
    first) at positions (x, y) is their RoPE-Axial at (t_x, t_y)."""
    pe = posenc.build("rope_2d", head_dim=16, layout="interleaved")
    x = torch.randn(1, 1, len(GRID), 16, dtype=torch.float64)
    got, _ = pe.rotate(x, x, GRID.flip(-1), GRID.flip(-1))
    want = ref.heo_axial(x[0, 0].numpy(), GRID[:, 1].numpy(), GRID[:, 0].numpy(), theta=100.0)
    np.testing.assert_allclose(got[0, 0].numpy(), want, atol=1e-12)


def test_rope_mixed_is_heo_et_al_mixed() -> None:
    pe = posenc.build("rope_mixed", head_dim=16, n_heads=3, layout="interleaved").double()
    phases = np.array([0.5, 1.5, 6.0])
    with torch.no_grad():
        pe.freqs.copy_(PF.mixed_inv_freq(16, torch.from_numpy(phases), base=10.0))
    q, k = _qk(3, len(GRID), 16)
    rq, _ = pe.rotate(q, k, GRID, GRID)
    freqs = ref.heo_mixed_freqs(phases, 16)
    want = ref.heo_mixed(q[1].numpy(), GRID[:, 1].numpy(), GRID[:, 0].numpy(), freqs)
    np.testing.assert_allclose(rq[1].detach().numpy(), want, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("rope_2d", {}),
        ("rope_3d", {}),
        ("mrope", {"interleaved": True}),
        ("rope_mixed", {"n_heads": 2}),
    ],
)
def test_scores_depend_on_the_grid_offset_only(name: str, config: dict) -> None:
    """<R(p) q, R(p') k> = <R(0) q, R(p' - p) k>: the 2-D (3-D) relative property."""
    pe = posenc.build(name, head_dim=16, **config).double()
    A = pe.capabilities.axes
    gen = torch.Generator().manual_seed(3)
    p = torch.randint(0, 500, (1, 30, A), generator=gen)
    p2 = p + torch.randint(-40, 40, (1, 30, A), generator=gen)
    q, k = _qk(2, 30, 16, seed=4)
    with torch.no_grad():
        rq, rk = pe.rotate(q, k, p, p2)
        q0, rk0 = pe.rotate(q, k, torch.zeros_like(p), p2 - p)
        torch.testing.assert_close((rq * rk).sum(-1), (q0 * rk0).sum(-1), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1), rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_mrope_on_text_positions_is_rope(layout: str) -> None:
    """Text tokens sit at (p, p, p): M-RoPE's pairs all turn by p·θ_p, 1-D RoPE."""
    mrope = posenc.build("mrope", head_dim=16, base=1e6, layout=layout, interleaved=True)
    rope = posenc.build("rope", head_dim=16, base=1e6, layout=layout)
    pos = torch.tensor([[0, 3, 9, 4000]])
    q, k = _qk(2, 4, 16)
    for got, want in zip(
        mrope.rotate(q, k, pos[..., None].expand(1, 4, 3), pos[..., None].expand(1, 4, 3)),
        rope.rotate(q, k, pos, pos),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-14)


def test_rope_mixed_learns_its_frequencies() -> None:
    pe = posenc.build("rope_mixed", head_dim=8, n_heads=2).double()
    q, k = _qk(2, 6, 8)
    pos = GRID[:6]

    def score(freqs: torch.Tensor) -> torch.Tensor:
        pe.freqs.data = freqs
        rq, rk = pe.rotate(q, k, pos, pos)
        return (rq * rk).sum()

    assert torch.autograd.gradcheck(score, (pe.freqs.detach().clone().requires_grad_(True),))


def test_sincos_2d_embeds_mae_table() -> None:
    pe = posenc.build("sincos_2d", dim=16)
    pos = posenc.grid_positions(6, 6)
    x = torch.zeros(1, 36, 16, dtype=torch.float64)
    np.testing.assert_allclose(pe.embed(x, pos)[0].numpy(), ref.mae_sincos_2d(16, 6), atol=1e-15)
    small = posenc.build("sincos_2d", dim=16, scale=0.02).embed(x, pos)[0].numpy()
    np.testing.assert_allclose(small, 0.02 * ref.mae_sincos_2d(16, 6), atol=1e-15)
    with pytest.raises(ValueError, match="scale"):
        posenc.build("sincos_2d", dim=16, scale=0.0)


def test_learned_2d_reads_its_grid_and_resamples() -> None:
    pe = posenc.build("learned_2d", dim=4, grid=(3, 4)).double()
    pos = torch.tensor([[0, 0], [2, 3], [1, 2]])
    x = torch.zeros(1, 3, 4, dtype=torch.float64)
    W = pe.weight.detach().clone()
    torch.testing.assert_close(pe.embed(x, pos)[0], W[[0, 11, 6]])
    with pytest.raises(ValueError, match=r"must lie in 0..2 x 0..3 \(grid=\(3, 4\)\), got rows"):
        pe.embed(x, torch.tensor([[0, 0], [3, 0], [0, 1]]))
    pe.resample_((6, 8))
    assert pe.grid == (6, 8) and pe.weight.shape == (48, 4) and pe.weight.requires_grad
    torch.testing.assert_close(pe.weight.detach(), PF.resample_table(W, (3, 4), (6, 8)))
    pe.embed(x, torch.tensor([[5, 7], [0, 0], [3, 3]]))  # the larger grid is readable


def test_learned_2d_init_std() -> None:
    torch.manual_seed(0)
    assert posenc.build("learned_2d", dim=64, grid=(8, 8)).weight.std().item() == pytest.approx(
        0.02, rel=0.05
    )
    wide = posenc.build("learned_2d", dim=64, grid=(8, 8), init_std=1.0).weight
    assert wide.std().item() == pytest.approx(1.0, rel=0.05)
    with pytest.raises(ValueError, match="init_std must be a finite number > 0"):
        posenc.build("learned_2d", dim=8, grid=(2, 2), init_std=0.0)


def test_one_and_multi_axis_positions_do_not_mix() -> None:
    q, k = _qk(2, 5, 8)
    rope2d, rope = posenc.build("rope_2d", head_dim=8), posenc.build("rope", head_dim=8)
    grid = posenc.grid_positions(1, 5)  # (5, 2)
    with pytest.raises(
        ValueError,
        match=r"q_pos must have shape \(T, 2\) or \(B, T, 2\) for an encoding of 2 position axes",
    ):
        rope2d.rotate(q, k, torch.arange(5), torch.arange(5))
    with pytest.raises(ValueError, match=r"need an encoding that takes A axes \(rope_2d"):
        rope.rotate(q, k, grid[None].expand(2, 5, 2), grid[None].expand(2, 5, 2))
    with pytest.raises(ValueError, match=r"q_pos must have shape \(T, 3\) or \(B, T, 3\)"):
        posenc.build("mrope", head_dim=8).rotate(q, k, grid, grid)
    with pytest.raises(
        ValueError, match=r"pos must have shape \(5, 2\) or \(2, 5, 2\), got \(4, 2\)"
    ):
        posenc.build("sincos_2d", dim=8).embed(torch.zeros(2, 5, 8), grid[:4])
    with pytest.raises(TypeError, match="integer tensor"):
        rope2d.rotate(q, k, grid.float(), grid.float())


def test_grid_configs_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"sections must sum to the 4 rotary pairs"):
        posenc.build("rope_2d", head_dim=8, sections=(1, 2))
    with pytest.raises(ValueError, match="sections must give pairs for 3 axes"):
        posenc.build("rope_3d", head_dim=8, sections=(2, 2))
    with pytest.raises(ValueError, match=r"mrope_section must sum|sections must sum to the 64"):
        posenc.build("mrope", head_dim=128, mrope_section=(16, 24, 20))
    with pytest.raises(ValueError, match="head_dim divisible by 4"):
        posenc.build("rope_mixed", head_dim=6, n_heads=2)
    with pytest.raises(ValueError, match=r"grid must be \(rows, columns\)"):
        posenc.build("learned_2d", dim=8, grid=(4,))
    with pytest.raises(TypeError, match="interleaved must be a bool"):
        posenc.build("mrope", head_dim=8, interleaved="yes")


def test_rope_mixed_needs_the_queries_heads_on_keys() -> None:
    pe = posenc.build("rope_mixed", head_dim=8, n_heads=4)
    q, k = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match="no grouped-query attention"):
        pe.rotate(q, k, GRID[:3], GRID[:3])
    shared = posenc.build("rope_mixed", head_dim=8, n_heads=1)
    shared.rotate(q, k, GRID[:3], GRID[:3])  # one set of frequencies for every head


@pytest.mark.parametrize("name", ["rope_2d", "mrope", "rope_mixed"])
def test_the_cpp_kernel_rotates_grid_tables_as_the_eager_one(name: str) -> None:
    """Grid encodings hand their cos/sin ((T, P), (B, 1, T, P) or per head (B, H, T, P)) to the
    RoPE kernels; the C++ one computes the formula in float32 (bfloat16: one rounding)."""
    from posenc.kernels import rope_cpp

    if not rope_cpp.KERNEL.available():
        pytest.skip(rope_cpp.KERNEL.error or "no C++ kernel")
    heads = {"n_heads": 4} if name == "rope_mixed" else {}
    eager = posenc.build(name, head_dim=16, **heads)
    cpp = posenc.build(name, head_dim=16, kernel="cpp", **heads)
    cpp.load_state_dict(eager.state_dict())
    pos = torch.randint(0, 50, (2, 10, eager.capabilities.axes))
    for dtype, atol in ((torch.float32, 1e-6), (torch.bfloat16, 2e-2)):
        q, k = torch.randn(2, 4, 10, 16, dtype=dtype), torch.randn(2, 4, 10, 16, dtype=dtype)
        with torch.no_grad():
            for a, b in zip(eager.rotate(q, k, pos, pos), cpp.rotate(q, k, pos, pos), strict=True):
                torch.testing.assert_close(b.float(), a.float(), atol=atol, rtol=0)
