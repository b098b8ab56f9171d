"""torch state dict <-> nnx parameters. The Flax modules carry the torch attribute names
(``blocks.0.mlp.2.weight``); only layer types rename: ``nnx.Linear`` ``kernel`` is the
transposed ``weight``, ``nnx.LayerNorm`` ``scale`` and ``nnx.Embed`` ``embedding`` are
``weight``; ``nnx.Sequential`` holds its items in ``layers``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

#: (layer type, nnx name) -> (torch name, transposed?)
_RENAMES: dict[tuple[type, str], tuple[str, bool]] = {
    (nnx.Linear, "kernel"): ("weight", True),
    (nnx.LayerNorm, "scale"): ("weight", False),
    (nnx.Embed, "embedding"): ("weight", False),
}


def load_torch_state_dict(
    module: nnx.Module, state_dict: Mapping[str, torch.Tensor], *, dtype: Any = None
) -> None:
    """Copy a torch ``state_dict`` into the Flax twin ``module``, in place. Values take the nnx
    parameters' dtypes; or ``dtype`` if given (e.g. float64 under ``jax_enable_x64``), which
    also becomes the compute dtype of the flax layers (``dtype``/``param_dtype`` attributes).

    Raises: ValueError for a key with no Flax parameter, a shape mismatch, or a Flax parameter
    the state dict leaves unset.
    """
    params = {key: (var, transpose) for key, var, transpose in _named_params(module, "")}
    for key, tensor in state_dict.items():
        if key not in params:
            raise ValueError(f"state-dict key {key!r}: the Flax module has no such parameter")
        var, transpose = params[key]
        cpu = tensor.detach().cpu()  # NumPy has no bfloat16: through float32, exactly
        value = (cpu.float() if cpu.dtype == torch.bfloat16 else cpu).numpy()
        value = value.T if transpose else value
        if value.shape != var[...].shape:
            raise ValueError(
                f"{key!r}: torch shape {tuple(tensor.shape)} does not fit the Flax parameter of "
                f"shape {tuple(var[...].shape)}{' (transposed)' if transpose else ''}"
            )
        var.set_value(jnp.asarray(value, dtype=var[...].dtype if dtype is None else dtype))
    assigned = {id(params[key][0]) for key in state_dict}
    if missing := [key for key, (var, _) in params.items() if id(var) not in assigned]:
        raise ValueError(f"the state dict sets no value for Flax parameters {missing}")
    if dtype is not None:
        module.set_attributes(dtype=dtype, param_dtype=dtype, raise_if_not_found=False)


def to_torch_state_dict(module: nnx.Module) -> dict[str, torch.Tensor]:
    """The torch state dict of the Flax ``module``: every parameter under every path that
    reaches it (shared encodings appear once per owner, as in torch)."""
    out = {}
    for key, var, transpose in _named_params(module, ""):
        bf16 = var[...].dtype == jnp.bfloat16  # through float32, exactly (as in loading)
        value = np.asarray(var[...], dtype=np.float32 if bf16 else None)
        tensor = torch.from_numpy(np.array(value.T if transpose else value, order="C"))
        out[key] = tensor.to(torch.bfloat16) if bf16 else tensor
    return out


def _named_params(node: Any, prefix: str) -> Iterator[tuple[str, nnx.Variable[Any], bool]]:
    """(torch key, parameter, transposed?) of every nnx.Param under ``node``, attribute order."""
    if isinstance(node, nnx.Sequential):
        node = node.layers
    if isinstance(node, nnx.List | list | tuple):
        for i, item in enumerate(node):
            yield from _named_params(item, f"{prefix}{i}.")
        return
    if not isinstance(node, nnx.Module):
        return
    for name, value in vars(node).items():
        if name.startswith("_"):
            continue
        if isinstance(value, nnx.Param):
            renames = (v for (cls, n), v in _RENAMES.items() if isinstance(node, cls) and n == name)
            torch_name, transpose = next(renames, (name, False))
            yield f"{prefix}{torch_name}", value, transpose
        else:
            yield from _named_params(value, f"{prefix}{name}.")
