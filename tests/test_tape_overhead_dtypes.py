"""PyTorch's dtype rules on the tape's general path (the one the fast Jacobian nodes fall back to), where
NumPy's differ: a 0-d tensor does not raise a dimensioned tensor's float dtype, a Python bool is a number,
integer tensors in operations with a float result (``sin``, ``/``) become float32. Each case is compared
with PyTorch eager; values to rtol 1e-6 (float32 results; the float64 ones are exact here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import symgrad as sg


def _same(ours, theirs, rtol: float = 1e-6) -> None:
    expected = theirs.detach().numpy()
    assert ours.dtype == expected.dtype, (ours.dtype, expected.dtype)
    np.testing.assert_allclose(ours.detach().numpy(), expected, rtol=rtol)


@pytest.mark.parametrize("op", ["mul", "add", "sub", "div", "pow", "maximum"])
@pytest.mark.parametrize("zero_d_first", [False, True])
def test_a_0d_float64_tensor_beside_a_float32_tensor_gives_float32(op, zero_d_first):
    f = {
        "mul": lambda a, b: a * b,
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "div": lambda a, b: a / b,
        "pow": lambda a, b: a**b,
        "maximum": lambda a, b: a.maximum(b),
    }[op]
    vec, scalar = np.array([0.5, 1.25, 2.0], np.float32), np.array(1.5)
    x, s = sg.tensor(vec, requires_grad=True), sg.tensor(scalar, requires_grad=True)
    tx, ts = torch.tensor(vec, requires_grad=True), torch.tensor(scalar, requires_grad=True)
    out, tout = (f(s, x), f(ts, tx)) if zero_d_first else (f(x, s), f(tx, ts))
    _same(out, tout)
    out.sum().backward()
    tout.sum().backward()
    _same(x.grad, tx.grad)
    _same(s.grad, ts.grad)  # float64, through the cast


def test_in_place_with_a_0d_float64_tensor_keeps_float32():
    a, ta = sg.tensor(np.ones(3, np.float32)), torch.ones(3)
    a.add_(sg.tensor(np.array(2.5)))
    ta.add_(torch.tensor(2.5, dtype=torch.float64))
    _same(a, ta)


@pytest.mark.parametrize(
    "f",
    [lambda x: x * True, lambda x: True + x, lambda x: x / True, lambda x: x**True],
    ids=["mul", "radd", "div", "pow"],
)
def test_a_python_bool_is_a_number(f):
    vec = np.array([0.5, 1.5], np.float32)
    x, tx = sg.tensor(vec, requires_grad=True), torch.tensor(vec, requires_grad=True)
    out, tout = f(x), f(tx)
    _same(out, tout)
    out.sum().backward()
    tout.sum().backward()
    _same(x.grad, tx.grad)
    _same(f(sg.tensor([3, -4])), f(torch.tensor([3, -4])))  # integers stay integers (but ``/``)


def test_subtracting_a_bool_is_refused_as_in_pytorch():
    x = sg.tensor([0.5, 1.5], requires_grad=True)
    for f in (lambda: x - True, lambda: False - x):
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool"):
            f()


@pytest.mark.parametrize(
    "f",
    [
        lambda t: t.sin(),
        lambda t: t.exp(),
        lambda t: t.sqrt(),
        lambda t: t.sigmoid(),
        lambda t: t / 2,
        lambda t: t / t,
        lambda t: 3 / t,
        lambda t: t.relu(),
        lambda t: t * 2,
    ],
    ids=["sin", "exp", "sqrt", "sigmoid", "div-int", "div-tensor", "rdiv", "relu", "mul"],
)
def test_integer_tensors_follow_pytorch(f):
    values = [1, 4, 9]
    _same(f(sg.tensor(values)), f(torch.tensor(values)))
