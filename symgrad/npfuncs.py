"""Array helpers that generated NumPy code calls: the stable forms of symgrad's primitives, erf, packing.

Every function keeps its input's float dtype (float32 stays float32).
"""
from __future__ import annotations

import math

import numpy

try:  # SciPy's erf is a true ufunc; without SciPy, math.erf per element (exact, slower)
    from scipy.special import erf as _erf, erfc as _erfc
except ImportError:  # pragma: no cover - exercised on machines without SciPy
    _erf = _erfc = None


def sigmoid(x):
    """1/(1 + exp(-x)) branching on the sign so that exp never overflows."""
    e = numpy.exp(-numpy.abs(x))
    return numpy.where(x >= 0, 1 / (1 + e), e / (1 + e))


def softplus(x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|))."""
    return numpy.maximum(x, 0) + numpy.log1p(numpy.exp(-numpy.abs(x)))


def logsigmoid(x):
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))."""
    return numpy.minimum(x, 0) - numpy.log1p(numpy.exp(-numpy.abs(x)))


def xlogy(x, y):
    """x * log(y), and 0 where x == 0."""
    return numpy.where(x == 0, 0, x * numpy.log(y))


def _elementwise(scalar_fn, x):
    arr = numpy.asarray(x)
    dtype = arr.dtype if arr.dtype.kind == "f" else numpy.float64
    return numpy.frompyfunc(scalar_fn, 1, 1)(arr).astype(dtype)


def erf(x):
    return _erf(x) if _erf is not None else _elementwise(math.erf, x)


def erfc(x):
    return _erfc(x) if _erfc is not None else _elementwise(math.erfc, x)


def pack(elements, shape):
    """Stack per-element scalars (arrays or constants) into arrays with trailing ``shape``."""
    if not elements:            # a Jacobian with no columns (every argument nondiff): broadcast by the caller
        return numpy.zeros(tuple(shape))
    arrays = numpy.broadcast_arrays(*elements)
    return numpy.stack(arrays, axis=-1).reshape(arrays[0].shape + tuple(shape))
