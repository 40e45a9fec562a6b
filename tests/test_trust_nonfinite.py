"""Infinite constants that cancel in SymPy but not in IEEE arithmetic (issue 26 follow-up): ``x + inf - inf``
is NaN with gradient 1, as the user's Python expression and PyTorch compute it, not ``x``."""

import math
import pickle

import numpy as np
import pytest
import sympy
import torch

import symgrad as sg
from symgrad.compiler.nonfinite import NonFinite

INF, NAN = math.inf, math.nan
X = np.array([-2.0, 0.0, 3.0])

#: bodies that work on a SymPy symbol (traced) and on a torch tensor (the reference) alike
CASES = {
    "add_sub": lambda x: x + INF - INF,
    "add_sub_1e400": lambda x: x + 1e400 - 1e400,
    "sub_add": lambda x: x - INF + INF,
    "numpy_inf": lambda x: x + np.inf - np.inf,
    "nan_sub": lambda x: x + NAN - NAN,
    "scaled_difference": lambda x: x * INF - x * INF,
    "square_difference": lambda x: x**2 * INF - INF * x**2,
    "mul_div": lambda x: INF * x / INF,
    "div_mul": lambda x: x / INF * INF,
    "twice_shifted": lambda x: (x + 1e400) - (x + 1e400),
    "add_add": lambda x: x + INF + INF,
    "cancel_then_inf": lambda x: x - x + INF,
}


def _torch(body, xs):
    t = torch.tensor(xs, requires_grad=True)
    y = body(t)
    y.sum().backward()
    return y.detach().numpy(), t.grad.numpy()


@pytest.mark.parametrize("name", list(CASES))
def test_infinite_constants_do_not_cancel(backend, dtype, name):
    body = CASES[name]
    body.__name__ = f"trust_{name}"
    f = sg.function(body)
    x = X.astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        out, (grad,) = f.value_and_vjp(x, np.ones_like(x))
    want, want_grad = _torch(body, X)
    assert out.dtype == grad.dtype == np.dtype(dtype)
    # exact: only inf, nan and x itself (no rounding) take part
    np.testing.assert_array_equal(np.broadcast_to(out, x.shape), want.astype(dtype))
    np.testing.assert_array_equal(np.broadcast_to(grad, x.shape), want_grad.astype(dtype))


def test_zero_times_an_infinite_sum_is_refused_not_zero():
    """SymPy's ``0*(x + inf)`` is ``nan`` (IEEE agrees); never 0, and ``(x + nan)*0`` neither."""
    for k, body in enumerate((lambda x: (x + INF) * 0, lambda x: (x + NAN) * 0, lambda x: x * 0 * INF)):
        body.__name__ = f"trust_zero_times_{k}"
        with pytest.raises(sg.UnsupportedError, match="nan"):
            sg.function(body)(X)


def test_each_constant_is_its_own_atom_yet_the_cache_key_is_stable():
    a, b = NonFinite("inf"), NonFinite("inf")
    assert a != b and a - b != 0 and pickle.loads(pickle.dumps(a)) == a
    assert sympy.srepr(a) == sympy.srepr(b) == "NonFinite('inf')"
    paths = []
    for _ in range(2):  # the same body traced twice: one package (the serial numbers are not in the key)

        def trust_key(x):
            return x + 1e400 - 1e400

        paths.append(sg.function(trust_key).compiled().package.path)
    assert paths[0] == paths[1]
