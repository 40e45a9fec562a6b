"""Infinite and NaN constants in a model keep IEEE semantics (issue 26: SymPy folded ``x + oo`` to ``oo``
while tracing, so ``x + 1e400`` lost ``x`` and its gradient 1)."""

import math
import threading

import numpy as np
import pytest
import sympy
from sympy.core.sympify import converter

import symgrad as sg
from symgrad.compiler.nonfinite import NonFinite, tracing

X = np.array([-2.0, 0.0, 3.0])
INF, NAN = math.inf, math.nan


def _functions():
    return {
        # name: (body, value(x), derivative(x)) in IEEE arithmetic (as PyTorch computes them)
        "add": (lambda x: x + 1e400, lambda x: x + INF, lambda x: 1.0),
        "radd": (lambda x: -1e400 + x, lambda x: x - INF, lambda x: 1.0),
        "mul": (lambda x: x * 1e400, lambda x: NAN if x == 0 else math.copysign(INF, x), lambda x: INF),
        "cancel": (lambda x: x - x + 1e400, lambda x: INF, lambda x: 0.0),
        "where": (lambda x: sg.where(x > 0, x, 1e400), lambda x: x if x > 0 else INF, lambda x: float(x > 0)),
        "max_neg_inf": (lambda x: max(x, -math.inf), lambda x: x, lambda x: 1.0),
        "nan": (lambda x: x + float("nan"), lambda x: NAN, lambda x: 1.0),
        "numpy_inf": (lambda x: x + np.float32(np.inf), lambda x: INF, lambda x: 1.0),
        "returned": (lambda x: 1e400, lambda x: INF, lambda x: 0.0),
    }


@pytest.mark.parametrize("name", list(_functions()))
def test_non_finite_constant_keeps_value_and_gradient(backend, dtype, name):
    body, value, derivative = _functions()[name]
    body.__name__ = f"nonfinite_{name}"
    f = sg.function(body)
    x = X.astype(dtype)
    out, (grad,) = f.value_and_vjp(x, np.ones_like(x))
    expected = np.array([value(v) for v in X], dtype)
    expected_grad = np.array([derivative(v) for v in X], dtype)
    assert out.dtype == grad.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.broadcast_to(out, x.shape), expected)  # exact: no arithmetic rounding
    np.testing.assert_array_equal(np.broadcast_to(grad, x.shape), expected_grad)


def test_non_finite_constants_in_a_model_file(tmp_path, backend):
    model = tmp_path / "nonfinite_model.py"
    model.write_text("import symgrad as sg\n\n@sg.function\ndef shifted(x, y):\n    return x * y + 1e400\n")
    m = sg.compile(model)
    grads = m.shifted.vjp(np.array([2.0]), np.array([5.0]), np.array([1.0]))
    np.testing.assert_array_equal(m.shifted(np.array([2.0]), np.array([5.0])), [INF])
    assert [g.tolist() for g in grads] == [[5.0], [2.0]]
    assert "INFINITY" in m.shifted.source("c") and "numpy.inf" in m.shifted.source("numpy")


def test_tracing_converter_is_removed_afterwards_and_nests_across_threads():
    before = dict(converter)
    entered, release = threading.Barrier(3), threading.Event()

    def hold():
        with tracing():
            entered.wait()
            release.wait()

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    entered.wait()
    converted = sympy.sympify(1e400)
    assert isinstance(converted, NonFinite) and converted.kind_name == "inf"
    release.set()
    for t in threads:
        t.join()
    assert dict(converter) == before
    assert sympy.sympify(1e400) is sympy.oo  # outside tracing SymPy is unchanged
