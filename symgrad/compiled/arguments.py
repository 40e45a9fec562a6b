"""The argument checks of every entry point: ``CompiledFunction`` (NumPy) and the PyTorch and JAX interop.

Pure functions over names, shapes and dtypes, with no framework in them: each raises ``ArgumentError``
naming the function and the argument, so that a wrong call reads the same whichever framework made it.
Shapes may be any sequence of sizes (``torch.Size``, also with symbolic sizes while tracing); dtypes are
compared with ``in`` against the caller's own float dtypes.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

import numpy as np

from symgrad.abi import FLOAT_DTYPES
from symgrad.errors import ArgumentError


def float_names(dtypes: Iterable[np.dtype], name: Callable[[np.dtype], Any] = str) -> str:
    """``"float32 or float64"``: NumPy ``dtypes``, narrowest first, each named as ``name`` (e.g. a framework's
    dtype) writes it."""
    return " or ".join(str(name(d)) for d in sorted(dtypes, key=lambda d: d.itemsize))


#: The float dtypes the kernels take, as error messages name them.
FLOAT_NAMES = float_names(FLOAT_DTYPES)
_F64, _F32 = FLOAT_DTYPES


def is_number(value: Any) -> bool:
    """A Python int or float, not a bool: the kernels take it as it is; it is weak in dtype promotion."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_arity(fn_name: str, arg_names: Sequence[str], n_given: int) -> None:
    """Raise unless a call gave one value per argument."""
    if n_given != len(arg_names):
        raise ArgumentError(
            f"{fn_name}() takes {len(arg_names)} argument(s) ({', '.join(arg_names)}); got {n_given}"
        )


def bind(fn_name: str, arg_names: Sequence[str], args: tuple, kwargs: dict) -> tuple:
    """``args`` and ``kwargs`` as one value per argument in order, by the user's parameter names; unknown,
    duplicate and missing arguments raise with Python's own ``TypeError`` wording."""
    if not kwargs:
        return args
    if len(args) > len(arg_names):
        check_arity(fn_name, arg_names, len(args))
    values = dict(zip(arg_names, args))
    for name, value in kwargs.items():
        if name not in arg_names:
            raise ArgumentError(f"{fn_name}() got an unexpected keyword argument '{name}'")
        if name in values:
            raise ArgumentError(f"{fn_name}() got multiple values for argument '{name}'")
        values[name] = value
    missing = [f"'{n}'" for n in arg_names if n not in values]
    if missing:
        listed = (
            " and ".join(missing) if len(missing) < 3 else ", ".join(missing[:-1]) + ", and " + missing[-1]
        )
        plural = "argument" if len(missing) == 1 else "arguments"
        raise ArgumentError(f"{fn_name}() missing {len(missing)} required positional {plural}: {listed}")
    return tuple(values[n] for n in arg_names)


def jacobian_columns(
    fn_name: str,
    arg_names: Sequence[str],
    arg_shapes: Sequence[tuple],
    arg_diff: Sequence[bool],
    wrt: str | Sequence[str] | None,
) -> np.ndarray | None:
    """The columns of the full Jacobian (every differentiable argument, flattened, in order) that belong to
    the arguments named in ``wrt``, in its order; None for all of them (``wrt`` None)."""
    if wrt is None:
        return None
    wrt = (wrt,) if isinstance(wrt, str) else tuple(wrt)
    starts, start = {}, 0
    for name, shape, diff in zip(arg_names, arg_shapes, arg_diff):
        if diff:
            starts[name] = (start, start + int(np.prod(shape, dtype=int)))
            start = starts[name][1]
    for name in wrt:
        if name not in arg_names:
            raise ArgumentError(
                f"{fn_name}: wrt= names '{name}', which is not an argument "
                f"(arguments: {', '.join(arg_names)})"
            )
        if name not in starts:
            raise ArgumentError(
                f"{fn_name}: wrt= names '{name}', which is nondiff (it has no Jacobian columns)"
            )
    if len(set(wrt)) != len(wrt):
        raise ArgumentError(f"{fn_name}: wrt= names an argument twice ({', '.join(wrt)})")
    return np.concatenate([np.arange(*starts[name]) for name in wrt] or [np.zeros(0, dtype=int)])


def split_cotangents(
    fn_name: str, what: str, n_args: int, n_outputs: int, values: tuple
) -> tuple[tuple, tuple]:
    """(arguments, cotangents) of a call ``fn_name.what(*args, *cotangents)``, checking their count."""
    expected = n_args + n_outputs
    if len(values) != expected:
        cot = "one cotangent" if n_outputs == 1 else f"{n_outputs} cotangents"
        raise ArgumentError(
            f"{fn_name}.{what} takes {expected} arrays ({n_args} arguments, then {cot}); got {len(values)}"
        )
    return values[:n_args], values[n_args:]


def dtype_error(fn_name: str, name: str, dtype: Any, expected: str = FLOAT_NAMES) -> ArgumentError:
    """The error for an argument of a dtype the kernels do not take; ``expected`` names those they do."""
    return ArgumentError(f"{fn_name}: argument '{name}' has dtype {dtype}; expected {expected}")


def check_dtype(
    fn_name: str, name: str, dtype: Any, allowed: Container = FLOAT_DTYPES, expected: str = FLOAT_NAMES
) -> None:
    """Raise unless ``dtype`` is one of ``allowed`` (the float dtypes, in the caller's framework)."""
    if dtype not in allowed:
        if isinstance(dtype, np.dtype) and dtype.newbyteorder("=") in allowed:
            raise ArgumentError(
                f"{fn_name}: argument '{name}' is {dtype.name} in non-native byte order ({dtype.str}); "
                f"convert it with .astype(np.{dtype.name})"
            )
        raise dtype_error(fn_name, name, dtype, expected)


def as_array(fn_name: str, name: str, value: Any) -> np.ndarray:
    """``value`` (an array or a nested sequence) as a NumPy array; ragged or unconvertible input is an
    ``ArgumentError`` naming the argument."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ArgumentError(
            f"{fn_name}: argument '{name}' is not a rectangular array of numbers ({exc})"
        ) from None


#: The largest integer a float64 holds: a Python int beyond it is no argument.
FLOAT64_MAX_INT = int(np.finfo(np.float64).max)


def check_number_range(fn_name: str, name: str, value: int | float) -> None:
    """Raise for a Python int too large for float64 (``10**400``); every float is representable."""
    if isinstance(value, int) and abs(value) > FLOAT64_MAX_INT:
        digits = len(str(abs(value)))
        raise ArgumentError(
            f"{fn_name}: argument '{name}' is an integer of {digits} digits, too large for float64"
        )


def out_problem(out: Any, dtype: np.dtype, shape: tuple) -> str | None:
    """What keeps ``out`` from being a result buffer of ``dtype`` and ``shape`` (None: nothing)."""
    if not isinstance(out, np.ndarray):
        return f"it is a {type(out).__name__}, not a NumPy array"
    if out.dtype != dtype:
        return f"its dtype is {out.dtype}, not {dtype}"
    if out.shape != shape:
        return f"its shape is {out.shape}, not {shape}"
    if not out.flags.c_contiguous:
        return "it is not C-contiguous"
    if not out.flags.aligned:
        return f"it is not aligned to {dtype.itemsize} bytes"
    if not out.flags.writeable:
        return "it is read-only"
    return None


def type_error(fn_name: str, name: str, expected: str, value: Any) -> ArgumentError:
    """The error for an argument that is neither an array of the framework (``expected``) nor a number."""
    return ArgumentError(
        f"{fn_name}: argument '{name}' must be {expected} or a Python number, not {type(value).__name__}"
    )


def check_number(fn_name: str, name: str, tail: tuple) -> None:
    """Raise if a Python number is given for an argument with a per-element shape ``tail``."""
    if tail:
        raise ArgumentError(
            f"{fn_name}: argument '{name}' must have trailing shape {tail}, got a Python number"
        )


def batch_shape(fn_name: str, name: str, shape: Sequence, tail: tuple) -> Sequence:
    """The batch (leading) part of an argument's ``shape``, whose trailing axes must be its per-element
    shape ``tail``; ``shape`` itself for a per-element scalar."""
    if not tail:
        return shape
    cut = len(shape) - len(tail)
    if cut < 0 or tuple(shape[cut:]) != tail:
        kind = "vector" if len(tail) == 1 else "matrix"
        raise ArgumentError(
            f"{fn_name}: argument '{name}' must have trailing shape {tail} (per-element {kind}), "
            f"got shape {tuple(shape)}"
        )
    return shape[:cut]


def broadcast_shape(shapes: Iterable[Sequence]) -> tuple | None:
    """The broadcast of ``shapes`` (NumPy's rules), None if they do not broadcast. Plain Python: cheaper
    than ``np.broadcast_shapes`` for a few short shapes, and fine on symbolic sizes."""
    result: list = []
    for shape in shapes:
        shape = tuple(shape)
        if len(shape) > len(result):
            result = [1] * (len(shape) - len(result)) + result
        for i, n in enumerate(shape, len(result) - len(shape)):
            if n == 1 or n == result[i]:
                continue
            if result[i] != 1:
                return None
            result[i] = n
    return tuple(result)


def broadcast_batches(fn_name: str, names: Sequence[str], batches: Sequence[Sequence]) -> tuple:
    """The broadcast of the arguments' batch shapes; raise, listing them, if they do not broadcast."""
    batch = broadcast_shape(batches)
    if batch is None:
        described = ", ".join(f"'{n}' {tuple(b)}" for n, b in zip(names, batches))
        raise ArgumentError(f"{fn_name}: argument batch shapes do not broadcast: {described}")
    return batch


def uniform_value(fn_name: str, name: str, value: Any) -> float:
    """A ``uniform`` argument (one number per call: a real number or a 0-d float array) as a float."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype in FLOAT_DTYPES:
        return float(value)
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    got = f"shape {np.shape(value)}" if np.ndim(value) else type(value).__name__
    raise ArgumentError(f"{fn_name}: argument '{name}' is uniform (one number per call); got {got}")


@functools.lru_cache(maxsize=1024)
def broadcast_axes(shape: tuple, target: tuple) -> tuple[int, ...]:
    """The axes of an array of ``shape`` to sum over (keeping dims) to undo its broadcast from ``target``:
    the leading axes broadcasting added and those it stretched from 1 (cached: a tape op's backward asks
    for the same few pairs of shapes on every step)."""
    lead = len(shape) - len(target)
    return tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(target) if n == 1 and shape[lead + i] != 1
    )


@functools.lru_cache(maxsize=1024)
def leading_sum(shape: tuple, target: tuple) -> bool:
    """Whether ``sum_to_shape`` from ``shape`` to ``target`` sums only axes that come before every axis it
    keeps (ignoring axes of length 1): NumPy then adds whole rows of the kept values in order, or, when it
    keeps none, sums everything pairwise, as ``fused.MUL_ADD_SUM`` does."""
    lead = len(shape) - len(target)
    kept = False
    for i, n in enumerate(shape):
        if n == 1:
            continue
        summed = i < lead or target[i - lead] == 1
        if summed and kept:
            return False
        kept = kept or not summed
    return True


def sum_to_shape(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` over the axes that broadcasting added or stretched to reach ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead < 0:
        return g.reshape(shape)
    axes = broadcast_axes(g.shape, shape)
    if len(axes) == lead:  # only added axes: summed away, nothing to reshape (``np.add.reduce``: the tape's
        return np.add.reduce(g, axis=axes)  # hot path, half the cost of ``np.sum``'s wrapper)
    g = np.add.reduce(g, axis=axes, keepdims=True)
    return g.reshape(shape) if lead else g


def same_shape_floats(values: Sequence) -> tuple[Sequence, np.dtype, tuple] | None:
    """(values, dtype, shape) when every value is a float32/float64 array of one dtype and shape or a Python
    number (the kernels take numbers as they are), else None. The runtime's hot path: no allocation."""
    first = None
    for v in values:
        if type(v) is np.ndarray:
            first = v
            break
    if first is None:
        return None
    dtype, shape = first.dtype, first.shape
    if dtype is not _F32 and dtype is not _F64:
        return None
    for v in values:
        t = type(v)
        if t is np.ndarray:
            if v.dtype is not dtype or v.shape != shape:
                return None
        elif t is int:
            if not -FLOAT64_MAX_INT <= v <= FLOAT64_MAX_INT:  # 10**400: the checking path says what is wrong
                return None
        elif t is not float:
            return None
    return values, dtype, shape
