"""PaTH over a cache of carried keys (``path_attention_cached``) equals ``path_attention`` over
every token, its carried keys are the Householder products applied to each key, the UT form's
triangular inverse is the inverse, gradients pass a decode step, and a decode step of every
chunked form costs O(L·D) multiply-adds (no chunk of C rows for one query)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from posenc import functional as PF
from posenc.functional.path import unit_lower_inverse
from tests.functional._data_position import FORMS, inputs

B, H, Hkv, T, D = 2, 4, 2, 19, 8
CALLS = (7, 1, 1, 3, 1, 5, 1)  # tokens per call: a prefill, single steps, short chunks


def torch_of(a: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(x) for name, x in a.items()}


def cached_run(
    a: dict[str, torch.Tensor], gated: bool, block: int, segments: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every call of CALLS in turn over the growing cache: outputs (B, H, T, D), last keys."""
    outs, carried, P = [], None, 0
    for n in CALLS:
        new, seen = slice(P, P + n), slice(0, P + n)
        out, carried = PF.path_attention_cached(
            a["q"][:, :, new],
            a["k"][:, :, new],
            a["v"][:, :, seen],
            a["w"][:, :, new],
            a["beta"][:, :, new],
            a["log_f"][:, :, seen] if gated else None,
            carried=carried,
            segment_ids=None if segments is None else segments[:, seen],
            block_size=block,
        )
        outs.append(out)
        P += n
    assert P == T
    return torch.cat(outs, dim=2), carried


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("block", [1, 4, 6, 64])
def test_cached_calls_equal_the_full_forward(gated: bool, block: int) -> None:
    a = torch_of(inputs(B, H, Hkv, T, D))
    log_f = a["log_f"] if gated else None
    full = PF.path_attention(a["q"], a["k"], a["v"], a["w"], a["beta"], log_f, block_size=block)
    got, _ = cached_run(a, gated, block)
    torch.testing.assert_close(got, full, rtol=1e-12, atol=1e-12)


def test_packed_segments_through_the_cache() -> None:
    a = torch_of(inputs(B, H, Hkv, T, D))
    segments = torch.tensor([[0] * 9 + [1] * 10, [0] * 3 + [1] * 16])
    full = PF.path_attention(
        a["q"], a["k"], a["v"], a["w"], a["beta"], segment_ids=segments, block_size=4
    )
    got, _ = cached_run(a, False, 4, segments)
    torch.testing.assert_close(got, full, rtol=1e-12, atol=1e-12)


def test_carried_keys_are_the_products_of_the_later_transforms() -> None:
    a = inputs(1, 2, 2, 11, 5)
    _, carried = PF.path_attention_cached(
        *(torch.from_numpy(a[n]) for n in ("q", "k", "v", "w", "beta")), block_size=4
    )
    want = np.empty_like(a["k"])
    for h in range(2):
        for j in range(11):
            key = a["k"][0, h, j]
            for t in range(j + 1, 11):  # H_(j+1) first, H_10 last
                w_t = a["w"][0, h, t]
                key = key - a["beta"][0, h, t] * (w_t @ key) * w_t
            want[0, h, j] = key
    np.testing.assert_allclose(carried.numpy(), want, atol=1e-13)


@pytest.mark.parametrize("C", [1, 2, 5, 8, 13])
def test_unit_lower_inverse_is_the_inverse(C: int) -> None:
    rng = np.random.default_rng(C)
    w = rng.normal(size=(3, C, 4))
    beta = rng.uniform(0, 2, size=(3, C, 1))
    a = np.tril(beta * (w @ w.swapaxes(-1, -2)), k=-1)  # A_ab = β_a w_a·w_b, a > b
    want = np.linalg.inv(np.eye(C) + a)
    got = unit_lower_inverse(torch.from_numpy(w), torch.from_numpy(beta)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-12)
    np.testing.assert_allclose(np.asarray(unit_lower_inverse(w, beta)), want, atol=1e-12)


@pytest.mark.parametrize("new", [1, 2])
def test_gradients_pass_a_cached_call(new: int) -> None:
    a = {n: x.requires_grad_() for n, x in torch_of(inputs(1, 2, 1, 6, 3)).items()}
    P = 6 - new

    def f(
        q: torch.Tensor,
        carried: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        w: torch.Tensor,
        beta: torch.Tensor,
        log_f: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return PF.path_attention_cached(
            q[:, :, P:], k[:, :, P:], v, w[:, :, P:], beta[:, :, P:], log_f, carried=carried
        )

    carried = a["k"][:, :, :P].detach().clone().requires_grad_()
    args = (a["q"], carried, a["k"], a["v"], a["w"], a["beta"], a["log_f"])
    assert torch.autograd.gradcheck(f, args)


def test_a_carried_cache_of_other_heads_is_refused() -> None:
    a = torch_of(inputs(1, 2, 1, 4, 3))
    with pytest.raises(ValueError, match="carried"):
        PF.path_attention_cached(
            a["q"][:, :, 3:],
            a["k"][:, :, 3:],
            a["v"],
            a["w"][:, :, 3:],
            a["beta"][:, :, 3:],
            carried=torch.zeros(1, 2, 3, 3, dtype=torch.float64),
        )


def _decode_flops(form: str, L: int, H: int, D: int, block: int) -> int:
    """Matrix-product flops of one query (the last of L tokens) over L keys."""
    a = torch_of(inputs(1, H, H, L, D))
    q, new = a["q"][:, :, -1:], slice(L - 1, L)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        if form == "path":  # as a model decodes: the cached keys carried already
            PF.path_attention_cached(
                q,
                a["k"][:, :, new],
                a["v"],
                a["w"][:, :, new],
                a["beta"][:, :, new],
                carried=a["k"][:, :, :-1],
                block_size=block,
            )
        else:
            FORMS[form](dict(a, q=q), block_size=block)
    return counter.get_total_flops()


@pytest.mark.parametrize("form", ["forgetting", "stick_breaking", "sinks", "path"])
@pytest.mark.parametrize("L", [256, 1024])
def test_a_decode_step_costs_o_of_l_times_d(form: str, L: int) -> None:
    """Matrix products of one query over L keys: q·k and p·v (PaTH: and the cached keys'
    w_t·k̄_j), 2·H·L·D each, not C = 64 times that (a chunk of C rows for one query)."""
    H_, D_ = 2, 16
    flops = _decode_flops(form, L, H_, D_, block=64)
    assert 0 < flops <= 6 * H_ * L * D_
