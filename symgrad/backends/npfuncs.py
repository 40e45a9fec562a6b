"""Array helpers that generated NumPy code calls: xlogy, erf, packing (the exp(-|u|) primitives are written
out by the lowering, see ``symgrad.compiler.primitives.expand_shared_cores``).

Every function keeps its input's float dtype (float32 stays float32).
"""

from __future__ import annotations

import math

import numpy

try:  # SciPy's erf is a true ufunc; without SciPy, math.erf per element (exact, slower)
    from scipy.special import erf as _erf
    from scipy.special import erfc as _erfc
except ImportError:  # pragma: no cover - exercised on machines without SciPy
    _erf = _erfc = None


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
    if not elements:  # a Jacobian with no columns (every argument nondiff): broadcast by the caller
        return numpy.zeros(tuple(shape))
    arrays = numpy.broadcast_arrays(*elements)
    return numpy.stack(arrays, axis=-1).reshape(arrays[0].shape + tuple(shape))
