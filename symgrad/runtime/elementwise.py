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
from symgrad.runtime.compiled_node import binary_jacobian_node, general_node, unary_jacobian_node

MODEL = Path(__file__).with_name("elementwise_model.py")

_functions: dict[str, Any] = {}

_INTEGER_UFUNCS = {
    "neg": np.negative,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "pow": np.power,
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "relu": lambda a: np.maximum(a, 0),
    "maximum": np.maximum,
    "minimum": np.minimum,
}


def primitives() -> dict[str, Any]:
    """The compiled primitives by name, compiling the model file on the first call."""
    if not _functions:
        _functions.update(load_model(MODEL))
    return _functions


def unary(name: str, x: Any) -> Any:
    """``call`` for the one-argument primitives (the Tensor methods' entry)."""
    fn = _functions.get(name)
    if fn is None:
        fn = primitives()[name]
    result = unary_jacobian_node(fn, x)  # the hot path: a float tensor that requires grad
    return _general(name, fn, (x,)) if result is None else result


def binary(name: str, x: Any, y: Any) -> Any:
    """``call`` for the two-argument primitives (the Tensor operators' entry)."""
    fn = _functions.get(name)
    if fn is None:
        fn = primitives()[name]
    result = binary_jacobian_node(fn, x, y)  # the hot path: float tensors of one dtype, and numbers
    return _general(name, fn, _torch_promotion(name, (x, y))) if result is None else result


def call(name: str, *args: Any) -> Any:
    """Apply primitive ``name`` to tensors and numbers: one tape node when any input requires grad."""
    if len(args) == 2:
        return binary(name, args[0], args[1])
    if len(args) == 1:
        return unary(name, args[0])
    fn = _functions.get(name)
    return _general(name, primitives()[name] if fn is None else fn, args)  # (forward's arity error)


def _general(name: str, fn: Any, args: tuple) -> Any:
    """Off the hot path: any arguments the compiled function takes, and integer tensors."""
    try:
        return general_node(fn, args)
    except ArgumentError:
        result = _integer_promotion(name, fn, args)
        if result is None:
            raise
        return result


def _torch_promotion(name: str, args: tuple) -> tuple:
    """Two arguments with PyTorch's promotion where NumPy's differs: a Python bool is the number 0 or 1 (but
    not in a subtraction, as in PyTorch), and a 0-d float tensor (or array) beside a dimensioned float one
    takes that one's dtype (a 0-d operand only counts when it brings a higher category)."""
    if type(args[0]) is bool or type(args[1]) is bool:
        if name == "sub":
            raise RuntimeError(
                "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to "
                "invert a mask, use the `~` or `logical_not()` operator instead."
            )
        args = [int(v) if type(v) is bool else v for v in args]
    a, b = args
    da = a.data if isinstance(a, Tensor) else a
    db = b.data if isinstance(b, Tensor) else b
    if (
        type(da) is np.ndarray
        and type(db) is np.ndarray
        and da.dtype is not db.dtype
        and (da.ndim == 0) != (db.ndim == 0)
        and da.dtype.kind == db.dtype.kind == "f"
        and da.dtype != db.dtype
    ):
        if da.ndim == 0:
            return convert(a, db.dtype), b
        return a, convert(b, da.dtype)
    return a, b


def _integer_promotion(name: str, fn: Any, args: tuple) -> Any:
    """PyTorch's promotion for integer and bool tensors, which the compiled kernels do not take (None where
    there is none): beside float tensors they take the floats' dtype, beside a Python float or in an
    operation with a float result (``sin``, ``/``) float32; otherwise the integer NumPy ufunc. An integer
    tensor never requires grad: it joins as a constant."""
    arrays = [a.data if isinstance(a, Tensor) else a for a in args]
    if not any(isinstance(a, np.ndarray) and a.dtype.kind in "biu" for a in arrays):
        return None
    floats = [a.dtype for a in arrays if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    if not floats and not any(type(a) is float for a in arrays) and name in _INTEGER_UFUNCS:
        return Tensor(_INTEGER_UFUNCS[name](*arrays))
    dtype = np.result_type(*floats) if floats else np.dtype(np.float32)
    return general_node(fn, tuple(_as_float(a, dtype) for a in args))


def _as_float(a: Any, dtype: np.dtype) -> Any:
    data = getattr(a, "data", None)
    if isinstance(data, np.ndarray) and data.dtype.kind in "biu":
        return data.astype(dtype)
    return a


from symgrad.runtime.pointwise import convert  # noqa: E402  (these modules build Tensors)
from symgrad.runtime.tensor import Tensor  # noqa: E402
