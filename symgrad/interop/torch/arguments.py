"""Arguments at the PyTorch boundary: the checks (``symgrad.compiled.arguments``, shared by every entry
point), the float dtypes as torch dtypes, and NumPy <-> tensor conversion without copies.

Runs traced under ``torch.compile``: the checks use only tensor metadata.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from symgrad.abi import FLOAT_DTYPES
from symgrad.compiled.arguments import (
    batch_shape,
    broadcast_batches,
    check_arity,
    check_dtype,
    check_number,
    float_names,
    is_number,
    type_error,
)
from symgrad.errors import ArgumentError

#: NumPy float dtype -> torch dtype, for the dtypes the kernels take (``symgrad.abi.FLOAT_DTYPES``).
TORCH_DTYPES: dict[np.dtype, torch.dtype] = {d: torch.from_numpy(np.empty(0, d)).dtype for d in FLOAT_DTYPES}
#: torch dtype -> NumPy dtype, the inverse.
NUMPY_DTYPES: dict[torch.dtype, np.dtype] = {t: d for d, t in TORCH_DTYPES.items()}
#: The float dtypes the kernels take, as torch dtypes; how errors name them.
FLOATS = tuple(TORCH_DTYPES.values())
FLOAT_NAMES = float_names(FLOAT_DTYPES, TORCH_DTYPES.__getitem__)
#: The dtype of a call on Python numbers only when PyTorch's default dtype is none of ``FLOATS``.
NARROWEST = TORCH_DTYPES[min(FLOAT_DTYPES, key=lambda d: d.itemsize)]
#: Tensor types that are plain CPU memory to the kernels (no subclass hooks).
PLAIN = (torch.Tensor, torch.nn.Parameter)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory (no copy for ordinary CPU tensors)."""
    return t.numpy(force=True)  # = detach().cpu().resolve_conj().resolve_neg(): all no-ops here


def from_numpy(a: Any, dtype: np.dtype | None = None) -> torch.Tensor:
    """``a`` (cast to ``dtype`` if given) as a tensor sharing its memory; read-only memory is copied."""
    a = np.asarray(a)
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    if not a.flags.writeable:  # torch.from_numpy warns on read-only memory
        a = a.copy()
    return torch.from_numpy(a)


def grad_tensor(g: Any, like: torch.Tensor) -> torch.Tensor:
    """A gradient array (already summed to the input's shape) as a tensor of the input's dtype and shape."""
    g = from_numpy(g, NUMPY_DTYPES.get(like.dtype))
    return g if g.shape == like.shape else g.reshape(like.shape)


def batch(shape: Any, tail: tuple) -> tuple:
    """The batch part of a (checked) shape whose per-element shape is ``tail``."""
    return tuple(shape)[: len(shape) - len(tail)]


def check_tensor(fn_name: str, name: str, value: torch.Tensor, tail: tuple) -> None:
    """Raise unless ``value`` is a CPU (or meta) tensor of a float dtype with trailing shape ``tail``."""
    if value.device.type not in ("cpu", "meta"):
        raise ArgumentError(
            f"{fn_name}: argument '{name}' is on {value.device}; symgrad's compiled kernels run on "
            f"the CPU. Move it there first ({name}.cpu()) and the result back with .to(device)"
        )
    check_dtype(fn_name, name, value.dtype, FLOATS, FLOAT_NAMES)
    batch_shape(fn_name, name, value.shape, tail)


def prepare(fn: Any, args: tuple) -> list[torch.Tensor]:
    """``args`` (tensors, NumPy arrays, Python numbers) checked and converted to tensors of one dtype:
    ``torch.promote_types`` of the tensors' dtypes (numbers are weak); mixed dtypes are cast by an ordinary,
    differentiable ``Tensor.to``."""
    check_arity(fn.name, fn.arg_names, len(args))
    values: list[Any] = []
    dtype = None
    for value, name, tail in zip(args, fn.arg_names, fn.arg_shapes):
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if isinstance(value, torch.Tensor):
            check_tensor(fn.name, name, value, tail)
            dtype = value.dtype if dtype is None else torch.promote_types(dtype, value.dtype)
        elif is_number(value):
            check_number(fn.name, name, tail)
        else:
            raise type_error(fn.name, name, "a torch.Tensor", value)
        values.append(value)
    tensors = _to_dtype(values, dtype)
    if len(tensors) > 1:
        broadcast_batches(fn.name, fn.arg_names, [batch(t.shape, s) for t, s in zip(tensors, fn.arg_shapes)])
    return tensors


def _to_dtype(values: list, dtype: torch.dtype | None) -> list[torch.Tensor]:
    """Tensors cast to ``dtype`` and numbers as 0-d tensors of it (PyTorch's default float dtype if None)."""
    if dtype is None:
        dtype = torch.get_default_dtype()
        dtype = dtype if dtype in FLOATS else NARROWEST
    device = next((t.device for t in values if isinstance(t, torch.Tensor)), torch.device("cpu"))
    return [
        (t.to(dtype) if t.dtype != dtype else t)
        if isinstance(t, torch.Tensor)
        else torch.tensor(float(t), dtype=dtype, device=device)
        for t in values
    ]
