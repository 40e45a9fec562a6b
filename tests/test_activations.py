"""30 activation and loss functions, on every backend and dtype: values and gradients against SymPy's
own derivative of the *naive* formula evaluated at 40 digits (mpmath), including extreme inputs, and
against central finite differences in float64.

Tolerances: float64 rtol 1e-9 / atol 1e-12; float32 rtol 1e-4 / atol 1e-6 (libm and libmvec are within
a few ulp; float32 chains of ~10 operations lose a few more).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import mpmath
import numpy as np
import pytest
import sympy

import symgrad as sg
from symgrad import backends
from symgrad.check import check_function
from symgrad.compiler.model import load_model
from symgrad.compiler.primitives import _Primitive

MODEL = Path(__file__).parent / "models" / "activations.py"
TOL = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-6)}
EXTREMES = [-1e4, -100.0, -20.0, 20.0, 100.0, 1e4]
KINKS = {
    "relu": [0.0],
    "relu6": [0.0, 6.0],
    "leaky_relu": [0.0],
    "elu": [0.0],
    "selu": [0.0],
    "celu": [0.0],
    "hardswish": [-3.0, 3.0],
    "hardsigmoid": [-3.0, 3.0],
    "softshrink": [-0.5, 0.5],
}
#: Two-argument functions: sample (a, b) pairs from these boxes, plus extreme pairs.
PAIRS = {
    "atan2": ((-3, 3), (-3, 3), [(1e4, -1e4), (-100.0, 1e-3)]),
    "hypot": ((-3, 3), (-3, 3), [(1e4, 1e-4), (-100.0, 100.0)]),
    "logaddexp": ((-3, 3), (-3, 3), [(1e4, 1e4 - 1), (-1e4, -1e4 + 2), (100.0, -100.0), (-700.0, 700.0)]),
    "power": ((0.1, 3), (-2, 2), [(100.0, 2.5), (1e-3, 0.5)]),
    "xlogy": ((-3, 3), (0.1, 5), [(1e4, 1e-4), (-100.0, 1e4)]),
    "huber": ((-3, 3), (-3, 3), [(1e4, -1e4), (-100.0, 0.0)]),
    "bce_with_logits": ((-3, 3), (0, 1), [(1e4, 0.3), (-1e4, 0.7), (100.0, 1.0), (-100.0, 0.0)]),
    "mse": ((-3, 3), (-3, 3), [(1e4, -1e4)]),
}


@pytest.fixture(scope="module")
def compiled():
    return sg.compile(MODEL)


def _elementary(expr: sympy.Expr) -> sympy.Expr:
    """symgrad's primitives written out in exp/log, so mpmath can evaluate them."""
    return expr.replace(lambda e: isinstance(e, _Primitive), lambda e: e._elementary())


@pytest.fixture(scope="module")
def references():
    """name -> (arg symbols, mpmath value function, mpmath gradient functions) of the naive formula."""
    refs = {}
    for fn in load_model(MODEL):
        spec = fn.trace()
        symbols = [a.symbols[0] for a in spec.args]
        expr = _elementary(spec.outputs[0].exprs[0])
        grads = [sympy.lambdify(symbols, sympy.diff(expr, s), modules="mpmath") for s in symbols]
        refs[fn.name] = (symbols, sympy.lambdify(symbols, expr, modules="mpmath"), grads)
    return refs


def sample_points(name: str, nargs: int) -> list[tuple[float, ...]]:
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # not hash(): randomized per process
    if nargs == 1:
        pts = list(rng.uniform(-4, 4, 12)) + EXTREMES + [0.0, 1.0, -1.0]
        pts = [p for p in pts if all(abs(p - k) > 1e-6 for k in KINKS.get(name, []))]
        return [(float(p),) for p in pts]
    box_a, box_b, extremes = PAIRS[name]
    pts = [(float(rng.uniform(*box_a)), float(rng.uniform(*box_b))) for _ in range(12)]
    return pts + extremes


def reference(value_fn, grad_fns, point) -> tuple[float, list[float]]:
    with mpmath.workdps(40):
        args = [mpmath.mpf(p) for p in point]
        return float(value_fn(*args)), [float(g(*args)) for g in grad_fns]


NAMES = [fn.name for fn in load_model(MODEL)]


def test_at_least_25_functions():
    assert len(NAMES) >= 25


@pytest.mark.parametrize("name", NAMES)
def test_value_and_gradient_against_high_precision(name, compiled, references, backend, dtype):
    fn = getattr(compiled, name)
    symbols, value_fn, grad_fns = references[name]
    points = sample_points(name, len(symbols))
    cols = [np.array([p[i] for p in points], dtype=dtype) for i in range(len(symbols))]
    rounded = list(zip(*[c.astype(np.float64) for c in cols]))  # what float32 actually holds
    expected = [reference(value_fn, grad_fns, p) for p in rounded]
    ones = np.ones(len(points), dtype=dtype)
    out, grads = fn.value_and_vjp(*cols, ones)
    assert out.dtype == np.dtype(dtype) and all(g.dtype == np.dtype(dtype) for g in grads)
    rtol, atol = TOL[dtype]
    got_value = out.astype(np.float64)
    want_value = np.array([v for v, _ in expected])
    finite = np.isfinite(want_value) & (np.abs(want_value) < np.finfo(dtype).max)
    np.testing.assert_allclose(
        got_value[finite],
        want_value[finite],
        rtol=rtol,
        atol=atol,
        err_msg=f"{name} value at {np.array(rounded)[finite]}",
    )
    for i, s in enumerate(symbols):
        want = np.array([g[i] for _, g in expected])
        ok = np.isfinite(want) & (np.abs(want) < np.finfo(dtype).max) & finite
        np.testing.assert_allclose(
            grads[i].astype(np.float64)[ok],
            want[ok],
            rtol=rtol,
            atol=atol,
            err_msg=f"d{name}/d{s} at {np.array(rounded)[ok]}",
        )
        assert np.all(np.isfinite(grads[i][ok])), f"{name}: non-finite gradient where the true one is finite"


@pytest.mark.parametrize("name", NAMES)
def test_gradient_against_finite_differences(name, compiled, backend):
    assert check_function(getattr(compiled, name), n=32) == []


def test_numpy_kernels_compute_float32_in_float32(compiled):
    """No float64 scalar in the generated NumPy code (``numpy.sqrt(2)`` in tanh-GELU was one) promotes a
    float32 computation to float64: the generated functions are called directly, since the backend's cast
    of the results back to float32 would hide it."""
    names = list(compiled.__all__)
    module = backends.backend("numpy").load(getattr(compiled, names[0]).package).module
    for name in names:
        fn = getattr(compiled, name)
        for program, slots in fn.programs.items():
            args = [np.full((3, *s["shape"]), 0.5, np.float32) for s in slots["inputs"]]
            for k, result in enumerate(getattr(module, f"{fn.ident}__{program}")(*args)):
                if isinstance(result, (np.ndarray, np.generic)):
                    assert result.dtype == np.float32, f"{name}.{program} result {k} is {result.dtype}"
