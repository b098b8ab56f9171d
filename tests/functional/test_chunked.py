"""What the chunked attention forms share (``posenc.functional._chunked``), for each of them:
any block size gives the same output, decode steps equal the full forward's last rows,
packed and left-padded sequences attend as if run apart, NumPy agrees with torch, no (T, T)
tensor exists at long T, and bad input is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tests.functional._data_position import FORMS, Arrays, Largest, batch_rows, inputs, rows

pytestmark = pytest.mark.parametrize("form", sorted(FORMS))
B, H, Hkv, T, D = 2, 4, 2, 19, 8


def torch_of(a: Arrays) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(x) for name, x in a.items()}


def run(form: str, a: Arrays, **kw: Any) -> np.ndarray:
    return FORMS[form](torch_of(a), **kw).numpy()


@pytest.mark.parametrize("block", [1, 3, 4, 7, 19, 64])
def test_every_block_size_agrees(form: str, block: int) -> None:
    a = inputs(B, H, Hkv, T, D)
    np.testing.assert_allclose(run(form, a, block_size=block), run(form, a), atol=1e-13)


@pytest.mark.parametrize(("Tq", "block"), [(1, 4), (3, 4), (5, 5), (8, 4), (19, 6)])
def test_queries_over_a_longer_cache_are_the_last_rows(form: str, Tq: int, block: int) -> None:
    a = inputs(B, H, Hkv, T, D)
    full = run(form, a, block_size=block)
    decode = dict(a, q=a["q"][:, :, T - Tq :])
    np.testing.assert_allclose(
        run(form, decode, block_size=block), full[:, :, T - Tq :], atol=1e-13
    )


@pytest.mark.parametrize("block", [3, 5, 32])
def test_packed_sequences_attend_as_if_apart(form: str, block: int) -> None:
    a = inputs(1, H, Hkv, T, D)
    cut = 8
    segments = torch.tensor([[0] * cut + [1] * (T - cut)])
    packed = run(form, a, segment_ids=segments, block_size=block)
    np.testing.assert_allclose(packed[:, :, :cut], run(form, rows(a, 0, cut)), atol=1e-13)
    np.testing.assert_allclose(packed[:, :, cut:], run(form, rows(a, cut, T)), atol=1e-13)


def test_left_padding_is_a_segment_of_its_own(form: str) -> None:
    a = inputs(B, H, Hkv, T, D)
    pads = [0, 5]  # row 1 is left-padded by 5 tokens
    segments = torch.tensor([[1] * T, [0] * pads[1] + [1] * (T - pads[1])])
    out = run(form, a, segment_ids=segments, block_size=4)
    for b, pad in enumerate(pads):
        alone = run(form, rows(batch_rows(a, b), pad, T))
        np.testing.assert_allclose(out[b : b + 1, :, pad:], alone, atol=1e-13)


def test_numpy_agrees_with_torch(form: str) -> None:
    a = inputs(B, H, Hkv, T, D)
    np.testing.assert_allclose(np.asarray(FORMS[form](a, block_size=5)), run(form, a), atol=1e-13)


def test_float32_and_bfloat16_keep_the_dtype(form: str) -> None:
    a = torch_of(inputs(1, 2, 1, T, D))
    want = FORMS[form](a, block_size=4)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        got = FORMS[form]({n: x.to(dtype) for n, x in a.items()}, block_size=4)
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def test_no_tensor_grows_as_t_squared(form: str) -> None:
    T_long, block = 2048, 64
    a = {n: x.float() for n, x in torch_of(inputs(1, 2, 1, T_long, 16)).items()}
    with torch.no_grad(), Largest() as largest:
        FORMS[form](a, block_size=block)
    # O(H·block·T) = 2·64·2048 per pass (the values' 16 columns, PaTH's 16 x 16 per chunk);
    # a (T, T) score matrix alone would be 4.2M entries.
    assert largest.numel <= 2 * block * T_long
    assert largest.numel < T_long * T_long // 8


def test_gradients_match_finite_differences(form: str) -> None:
    a = {n: x.requires_grad_() for n, x in torch_of(inputs(1, 2, 1, 6, 3)).items()}
    names = [n for n in a if n != "sinks" or form == "sinks"]

    def f(*xs: torch.Tensor) -> torch.Tensor:
        return FORMS[form](dict(a, **dict(zip(names, xs, strict=True))), block_size=4)

    assert torch.autograd.gradcheck(f, tuple(a[n] for n in names))


def test_bad_inputs_are_refused(form: str) -> None:
    a = torch_of(inputs(1, 4, 2, 5, 4))
    f = FORMS[form]
    with pytest.raises(ValueError, match="divide"):
        f(dict(a, k=a["k"].repeat(1, 2, 1, 1)[:, :3], v=a["v"].repeat(1, 2, 1, 1)[:, :3]))
    with pytest.raises(ValueError, match="Tq <= L"):
        f(dict(a, q=torch.cat([a["q"], a["q"]], dim=2)))
    with pytest.raises(ValueError, match=r"\(B, H, Tq, D\)"):
        f(dict(a, q=a["q"][0]))
    with pytest.raises(TypeError, match="real floating"):
        f(dict(a, k=a["k"].long()))
    with pytest.raises(ValueError, match="scale"):
        f(a, scale=-1.0)
    with pytest.raises(ValueError, match="block_size"):
        f(a, block_size=0)
    with pytest.raises(ValueError, match="segment_ids"):
        f(a, segment_ids=torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="segment_ids"):
        f(a, segment_ids=torch.zeros(1, 5))


def test_per_token_inputs_are_checked(form: str) -> None:
    a = torch_of(inputs(1, 4, 2, 5, 4))
    bad = {
        "forgetting": ("log_f", a["log_f"][:, :2], r"log_f must have shape \(B, H, L\)"),
        "path_fox": ("log_f", a["log_f"][..., :4], r"log_f must have shape \(B, H, L\)"),
        "path": ("w", a["w"][..., :3], r"w must have shape \(B, Hkv, L, D\)"),
        "sinks": ("sinks", a["sinks"][:2], r"sinks must have shape \(H,\)"),
        "stick_breaking": ("q", a["q"][..., :3], "disagree"),
    }
    name, value, match = bad[form]
    with pytest.raises(ValueError, match=match):
        FORMS[form](dict(a, **{name: value}))
