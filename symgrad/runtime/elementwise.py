"""Loads ``elementwise_model.py`` (compiled into the cache once, on first use) and dispatches Tensor math
to it.

Every elementwise Tensor operation goes through ``call``: the one place that binds the runtime to the
compiled primitives. Integer and boolean tensors, which the compiled kernels do not take and which never
require grad, fall back to the matching NumPy ufunc.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from symgrad.compiled import load_model
from symgrad.errors import ArgumentError
from symgrad.runtime.compiled_node import apply_compiled

MODEL = Path(__file__).with_name("elementwise_model.py")

_functions: dict[str, Any] = {}

_INTEGER_UFUNCS = {
    "neg": np.negative,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "pow": np.power,
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


def primitives() -> dict[str, Any]:
    """The compiled primitives by name, compiling the model file on the first call."""
    if not _functions:
        _functions.update(load_model(MODEL))
    return _functions


def call(name: str, *args: Any) -> Any:
    """Apply primitive ``name`` to tensors and numbers: one tape node when any input requires grad."""
    fn = _functions.get(name)
    if fn is None:
        fn = primitives()[name]
    try:
        return apply_compiled(fn, args)
    except ArgumentError:
        arrays = [getattr(a, "data", a) for a in args]
        kinds = [a.dtype.kind for a in arrays if isinstance(a, np.ndarray)]
        if not kinds or not any(k in "biu" for k in kinds):
            raise
        floats = [a.dtype for a in arrays if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
        if not floats and not any(type(a) is float for a in arrays):
            if name in _INTEGER_UFUNCS:
                return Tensor(_INTEGER_UFUNCS[name](*arrays))
            raise
        # PyTorch's promotion: integer and bool tensors take the float tensors' dtype (float32 beside a
        # Python float only); an integer tensor never requires grad, so it joins as a constant
        dtype = np.result_type(*floats) if floats else np.dtype(np.float32)
        return apply_compiled(fn, tuple(_as_float(a, dtype) for a in args))


def _as_float(a: Any, dtype: np.dtype) -> Any:
    data = getattr(a, "data", None)
    if isinstance(data, np.ndarray) and data.dtype.kind in "biu":
        return data.astype(dtype)
    return a


from symgrad.runtime.tensor import Tensor  # noqa: E402
