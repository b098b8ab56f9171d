"""Load a model to evaluate: a transformers causal LM directory, a GGUF file or a lab
checkpoint, with an optional context-extension method (``scaling``) applied at load time.

transformers: the directory's config gets ``rope_parameters`` = its RoPE base (and partial
rotary factor) with ``scaling`` on top, and the model is built from that config, exactly as a
model saved with that ``rope_scaling`` would be (local files only, nothing is downloaded).
GGUF (llama.cpp's files): ``posenc.hf.gguf.load_gguf``, its config scaled the same way.
Lab: the run's config is read from the result store beside ``OUT/checkpoints/KEY.pt``; scaling
goes to the RoPE encoding (``pe_config["scaling"]``; frequencies are not in the checkpoint).
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from .._validate import check_device
from ..extension import scaling_config
from .models import CausalLM, CharTokenizer, as_tokenizer

#: Keys of a rope dict that describe the base rotation, kept when a scaling is applied.
_BASE_KEYS = ("rope_theta", "partial_rotary_factor")


def load_model(
    path: str | Path,
    *,
    scaling: dict[str, Any] | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> CausalLM:
    """The model at ``path``: a transformers model directory (``config.json``) with its
    tokenizer if it has one, a ``.gguf`` file (dequantised to float32; its own tokenizer), or
    a lab checkpoint ``OUT/checkpoints/KEY.pt``.

    ``scaling``: a transformers rope-scaling dict, e.g. ``{"rope_type": "yarn", "factor":
    4.0, "original_max_position_embeddings": 2048}``. ``dtype``: "float32", "bfloat16",
    "float16" or "auto" (the checkpoint's; transformers only); default float32.
    Raises: ValueError for a path that is neither, a device this torch cannot use, a scaling
    the model cannot take (no RoPE, per-layer RoPE, a bad method), a lab checkpoint without
    its result store, or one that cannot be read (truncated) or does not fit its run.
    """
    path = Path(path)
    check_device(device)  # before any loading: an unusable device is a usage error
    if (path / "config.json").is_file():
        return _load_hf(path, scaling, device, dtype)
    if path.is_file() and path.suffix == ".gguf":
        return _load_gguf(path, scaling, device, dtype)
    if path.is_file() and path.suffix == ".pt":
        if dtype not in (None, "float32"):
            raise ValueError(f"lab checkpoints load in float32, got dtype {dtype!r}")
        return _load_lab(path, scaling, device)
    raise ValueError(
        "MODEL must be a transformers model directory (with config.json), a .gguf file or a lab "
        f"checkpoint (OUT/checkpoints/KEY.pt), got {str(path)!r}"
    )


def scaled_config(config: Any, scaling: dict[str, Any]) -> Any:
    """A copy of transformers ``config`` whose ``rope_parameters`` are its RoPE base with
    ``scaling`` applied (transformers' own validation runs on them).

    Raises: ValueError if the config has no RoPE, per-layer RoPE, or transformers refuses the
    method or its keys.
    """
    if not isinstance(scaling, dict) or not isinstance(
        scaling.get("rope_type", scaling.get("type")), str
    ):
        raise ValueError(f"scaling must be a dict with a 'rope_type', got {scaling!r}")
    config = copy.deepcopy(config)
    params = getattr(config, "rope_parameters", None)
    if not params:
        raise ValueError(
            f"model_type {config.model_type!r} has no rotary embedding (rope_parameters): "
            "a scaling does not apply"
        )
    nested = [k for k, v in params.items() if isinstance(v, dict)]
    if nested:
        raise ValueError(
            f"model_type {config.model_type!r} has per-layer rope_parameters {nested}; a "
            "scaling applies to one flat rope_parameters"
        )
    scaling = {("rope_type" if k == "type" else k): v for k, v in scaling.items()}
    if scaling["rope_type"] == "ntk":
        raise ValueError(
            "transformers has no 'ntk' rope_type: static NTK is plain RoPE with rope_theta = "
            "base·s^(d/(d-2)) (posenc.rope_to_hf writes it so)"
        )
    config.rope_parameters = {k: params[k] for k in _BASE_KEYS if k in params} | scaling
    try:
        config.standardize_rope_params()  # fills original_max_position_embeddings
        _check_scaling(config)
        config.validate_rope()
    except (KeyError, ValueError, TypeError) as err:
        raise ValueError(f"scaling {scaling}: {str(err).strip(chr(34))}") from None
    return config


def _check_scaling(config: Any) -> None:
    """posenc's checks of the method, its keys and values (transformers only warns about an
    unknown method or key, or a factor < 1)."""
    spec = {k: v for k, v in config.rope_parameters.items() if k not in _BASE_KEYS}
    if spec["rope_type"] == "dynamic":  # transformers measures from max_position_embeddings
        spec.setdefault("original_max_position_embeddings", config.max_position_embeddings)
    scaling_config(spec)


def _load_hf(
    path: Path, scaling: dict[str, Any] | None, device: str, dtype: str | None
) -> CausalLM:
    try:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging
    except ImportError:
        raise ImportError("evaluating a transformers model needs transformers installed") from None
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if scaling is not None:
        config = scaled_config(config, scaling)
    bar = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # its "Loading weights" bar: the evaluation draws its own
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(
            path, config=config, local_files_only=True, dtype=_dtype(dtype)
        )
    finally:
        if bar:
            logging.enable_progress_bar()
    try:
        tokenizer = as_tokenizer(AutoTokenizer.from_pretrained(path, local_files_only=True))
    except (OSError, ValueError, TypeError):  # no tokenizer files in the directory
        tokenizer = None
    return CausalLM(model.to(device), tokenizer=tokenizer, name=path.name)


def _load_gguf(
    path: Path, scaling: dict[str, Any] | None, device: str, dtype: str | None
) -> CausalLM:
    from ..hf.gguf import gguf_config, load_gguf, read_gguf

    config = gguf_config(read_gguf(path))
    if scaling is not None:
        config = scaled_config(config, scaling)
    chosen = _dtype(dtype)
    model, tokenizer = load_gguf(
        path, config=config, dtype=torch.float32 if chosen == "auto" else chosen, device=device
    )
    tok = None if tokenizer is None else as_tokenizer(tokenizer)
    return CausalLM(model, tokenizer=tok, name=path.stem)


def _dtype(dtype: str | None) -> Any:
    if dtype is None or dtype == "auto":
        return torch.float32 if dtype is None else "auto"
    choices = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in choices:
        raise ValueError(f"dtype must be one of {['auto', *choices]}, got {dtype!r}")
    return choices[dtype]


def _load_lab(path: Path, scaling: dict[str, Any] | None, device: str) -> CausalLM:
    from pydantic import TypeAdapter

    from ..lab.config import RunConfig
    from ..lab.store import ResultStore
    from ..lab.sweep import STORE_NAME
    from ..lab.tasks import FIRST
    from ..lab.tasks.lm import ALPHABET
    from ..lab.train import build_model

    store = path.parent.parent / STORE_NAME
    if not store.is_file():
        raise ValueError(f"lab checkpoint {path} has no result store at {store} (its run config)")
    with ResultStore(store, readonly=True) as results:
        rows = results.runs([path.stem])
    if not rows:
        raise ValueError(f"{store} holds no run {path.stem!r} (the checkpoint's name)")
    cfg = TypeAdapter(RunConfig).validate_python(rows[0]["config"])
    if scaling is not None:
        if cfg.encoding != "rope":
            raise ValueError(
                f"scaling applies to the rope encoding; this run uses {cfg.encoding!r}"
            )
        cfg = replace(cfg, pe_config={**cfg.pe_config, "scaling": scaling})
    model, task = build_model(cfg)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as err:  # truncated
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"lab checkpoint {path} cannot be read (truncated?): {first}") from None
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError) as err:
        first = str(err).strip().splitlines()[0]
        raise ValueError(f"lab checkpoint {path} does not fit its run's model: {first}") from None
    tokenizer = CharTokenizer(ALPHABET, FIRST) if task.kind == "lm" else None
    name = f"{cfg.encoding} {cfg.task.name} seed {cfg.seed}"
    return CausalLM(model.to(device), tokenizer=tokenizer, name=name)
