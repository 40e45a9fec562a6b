"""Dtype names (``sg.float32``, ...), PyTorch's dtype defaults and promotion, and the one device (CPU).

Dtypes are NumPy dtypes: ``sg.float64`` is ``np.dtype("float64")``, and anything ``np.dtype`` accepts is
accepted where a dtype is asked for. PyTorch's promotion differs from NumPy's in two ways that matter here:
a higher category wins outright (int64 with float32 gives float32), and Python numbers and 0-d tensors only
count when they bring a higher category (a Python float makes an integer tensor float32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
double = float64  # torch.double
long = int64  # torch.long

#: the dtype a Python float or an unspecified floating factory gives (torch's default dtype)
DEFAULT_FLOAT = float32

_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def resolve(dtype: Any, default: Any = None) -> np.dtype | None:
    """``dtype`` as a NumPy dtype (``default`` when None)."""
    if dtype is None:
        return None if default is None else np.dtype(default)
    return np.dtype(dtype)


def check_device(device: Any) -> None:
    """Accept the CPU (``None``, ``"cpu"``, ``"cpu:0"``); anything else is an error."""
    if device is not None and str(device) not in ("cpu", "cpu:0"):
        raise RuntimeError(f"symgrad tensors live on the CPU only; got device {device!r}")


def of_scalar(value: Any) -> np.dtype:
    """The dtype a Python number gives a new tensor: bool, int64, or the default float."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(np.bool_)
    return int64 if isinstance(value, int) else DEFAULT_FLOAT


def promote(*operands: Any) -> np.dtype:
    """The result dtype of an operation on ``operands`` (tensors, arrays, Python numbers; None skipped) by
    PyTorch's rules: dimensioned tensors first, then 0-d tensors, then Python numbers, a later group
    counting only when it brings a higher category (bool < integer < float)."""
    groups: tuple[list, list, list] = ([], [], [])
    for x in operands:
        data = getattr(x, "data", x)
        if isinstance(data, np.ndarray):
            groups[0 if data.ndim else 1].append(data.dtype)
        elif x is not None:
            groups[2].append(of_scalar(x))
    result = None
    for k, group in enumerate(groups):
        if not group:
            continue
        top = max(_CATEGORY[d.kind] for d in group)
        if result is not None and top <= _CATEGORY[result.kind]:
            continue
        if result is not None and k == 2:  # a Python number: the category's default dtype
            result = DEFAULT_FLOAT if top == 2 else int64
        else:
            result = np.result_type(*[d for d in group if _CATEGORY[d.kind] == top])
    return np.dtype(result)
