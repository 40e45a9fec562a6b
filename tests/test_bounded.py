"""Tracing and compiling take time near-linear in the size of the expression's DAG, not of its tree
(issue 26, "tracing that never ends"): nested ``where``s, deep shared DAGs, and the size limit counting
distinct sub-expressions."""

import math
import time

import numpy as np
import pytest
import sympy

import symgrad as sg
from symgrad.compiler import compile_spec
from symgrad.compiler.rewrite import stabilize


def _nested_where(n: int):
    def nested(x):
        y = x
        for i in range(n):
            y = sg.where(y > i * 0.1, sg.sin(y), y * 0.5 + 1)
        return y

    return nested


def _reference(x: float, n: int) -> tuple[float, float]:
    """The value and derivative of ``_nested_where(n)`` at ``x``, in plain Python."""
    y, dy = x, 1.0
    for i in range(n):
        y, dy = (math.sin(y), math.cos(y) * dy) if y > i * 0.1 else (y * 0.5 + 1, 0.5 * dy)
    return y, dy


@pytest.mark.parametrize("n", [14, pytest.param(30, marks=pytest.mark.slow)])
def test_nested_where_compiles_in_seconds_and_right(n):
    # before: 14 nested where ran for minutes in piecewise.operands (cond.replace), 30 never ended
    f = sg.function(_nested_where(n))
    start = time.perf_counter()
    kernel = compile_spec(f.trace())
    assert time.perf_counter() - start < 15, f"{n} nested where took {time.perf_counter() - start:.0f} s"
    assert kernel.op_counts
    x = np.linspace(-2.0, 3.0, 41)
    value, (grad,) = f.value_and_vjp(x, np.ones_like(x))
    expected = np.array([_reference(v, n) for v in x])
    np.testing.assert_allclose(value, expected[:, 0], rtol=1e-12, atol=1e-12)  # float64
    np.testing.assert_allclose(grad, expected[:, 1], rtol=1e-12, atol=1e-12)


def _deep_dag(depth: int):
    def dag(x):
        e = x
        for _ in range(depth):
            e = sg.sin(e) + sg.cos(e)
        return e

    return dag


def test_stabilize_is_linear_in_the_dag():
    # before: SymPy's bottom_up walked the 2**21-node tree, about 7 s at depth 20 (exponential in the depth)
    x = sympy.Symbol("x", real=True)
    e = _deep_dag(20)(x)
    start = time.perf_counter()
    assert stabilize(e) == e
    assert time.perf_counter() - start < 1


def test_deep_dag_compiles_in_seconds_and_right():
    # before: 70 s at depth 20 (tree walks in the size check, check_supported, count_ops and formulas)
    f = sg.function(_deep_dag(20))
    start = time.perf_counter()
    kernel = compile_spec(f.trace())
    assert time.perf_counter() - start < 10
    assert "too long to show" in dict(kernel.formulas)["out"]
    x = np.linspace(-1.0, 1.0, 9)
    value, (grad,) = f.value_and_vjp(x, np.ones_like(x))
    y, dy = x.copy(), np.ones_like(x)
    for _ in range(20):
        y, dy = np.sin(y) + np.cos(y), (np.cos(y) - np.sin(y)) * dy
    np.testing.assert_allclose(value, y, rtol=1e-12)  # float64
    np.testing.assert_allclose(grad, dy, rtol=1e-10)


@pytest.mark.slow
def test_size_limit_counts_the_dag_not_the_tree(monkeypatch):
    # before: a 3-layer, 60-wide net (tree of millions of nodes, DAG of thousands) was ExpressionTooLarge
    rng = np.random.default_rng(0)
    weights = [
        rng.uniform(-1, 1, size=(60, 2)),
        rng.uniform(-1, 1, size=(60, 60)),
        rng.uniform(-1, 1, (60, 60)),
    ]

    @sg.function
    def net(x: sg.Vector(2)):
        h = list(x)
        for w in weights:
            h = [sg.tanh(sum(float(w[i, j]) * h[j] for j in range(len(h)))) for i in range(w.shape[0])]
        return sum(h)

    start = time.perf_counter()
    spec = net.trace()
    assert time.perf_counter() - start < 15
    assert spec.outputs[0].exprs[0].has(sympy.tanh)
    # ... while a DAG of more distinct nodes than the limit is still refused
    monkeypatch.setenv("SYMGRAD_MAX_OPS", "1000")
    with pytest.raises(sg.ExpressionTooLarge, match=r"net: the traced expression has more than 1000 nodes"):
        net.trace()
