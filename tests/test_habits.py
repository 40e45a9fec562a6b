"""Habits a user brings from PyTorch (issue 22, front end): ``sg.`` math on tensors and arrays, a model file
with one broken function, default and keyword arguments, ``jacobian(wrt=)``, PyTorch 2 style ``sg.Function``.

Values are compared with PyTorch 2.13: float64 to 1e-12 relative, float32 to 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import symgrad as sg

torch = pytest.importorskip("torch")

TOL = {np.float64: dict(rtol=1e-12, atol=1e-14), np.float32: dict(rtol=1e-6, atol=1e-7)}
POINTS = [-2.5, -1.0, -0.3, 0.2, 0.7, 1.5, 3.0]

#: (sg form, torch form) of one tensor argument
MATH_ON_TENSORS = {
    "exp": (lambda t: sg.exp(t), torch.exp),
    "relu": (lambda t: sg.relu(t), torch.relu),
    "maximum": (lambda t: sg.maximum(t, 0), lambda t: torch.maximum(t, torch.zeros_like(t))),
    "where": (lambda t: sg.where(t > 0.5, t, 0), lambda t: torch.where(t > 0.5, t, 0.0)),
    "sigmoid": (lambda t: sg.sigmoid(t), torch.sigmoid),
    "erf": (lambda t: sg.erf(t), torch.erf),
    "atan2": (lambda t: sg.atan2(t, 0.5), lambda t: torch.atan2(t, torch.full_like(t, 0.5))),
    "clamp": (lambda t: sg.clamp(t, -1.0, 0.5), lambda t: torch.clamp(t, -1.0, 0.5)),
    "tanh of sin": (lambda t: sg.tanh(sg.sin(t)), lambda t: torch.tanh(torch.sin(t))),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(MATH_ON_TENSORS))
def test_math_functions_on_tensors_are_tape_ops(name, dtype):
    ours, theirs = MATH_ON_TENSORS[name]
    t = sg.tensor(np.array(POINTS, dtype), requires_grad=True)
    y = ours(t)
    assert isinstance(y, sg.Tensor) and y.dtype == dtype and y.requires_grad
    (y * sg.tensor(np.arange(1.0, 8.0, dtype=dtype))).sum().backward()
    tt = torch.tensor(np.array(POINTS, dtype), requires_grad=True)
    ty = theirs(tt)
    (ty * torch.arange(1.0, 8.0, dtype=tt.dtype)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), **TOL[dtype])
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), **TOL[dtype])


@pytest.mark.parametrize("name", ["exp", "where", "erf", "maximum"])
def test_math_functions_on_arrays_run_the_compiled_kernel(name):
    ours, theirs = MATH_ON_TENSORS[name]
    a = np.array(POINTS)
    y = ours(a)
    assert type(y) is np.ndarray and y.dtype == np.float64
    np.testing.assert_allclose(y, theirs(torch.tensor(a)).numpy(), **TOL[np.float64])


def test_math_functions_stay_symbolic_on_symbols_and_numbers():
    x = sympy.Symbol("x", real=True)
    assert sg.exp(x) == sympy.exp(x) and sg.exp(2) == sympy.exp(2)
    assert sg.where(x > 0, x, 0) == sympy.Piecewise((x, x > 0), (0, True))
    assert sg.maximum(x, 0).has(x) and isinstance(sg.sigmoid(x), sympy.Expr)
    with pytest.raises(sg.ModelError, match="Python bool"):
        sg.where(x != 0, x, 1)


def test_a_tensor_beside_an_array_records_on_the_tape():
    t = sg.tensor([1.0, 2.0], requires_grad=True)
    y = sg.atan2(t, np.array([0.5, -0.5]))
    assert isinstance(y, sg.Tensor)
    y.sum().backward()
    expected = 0.5 / (t.detach().numpy() ** 2 + 0.25) * np.array([1, -1])
    np.testing.assert_allclose(t.grad.numpy(), expected, **TOL[np.float32])


def test_integer_orders_are_compiled_in_on_arrays_and_tensors():
    """polygamma's n, besselj's order and real_root's root stay Python integers (SymPy refuses a symbolic
    order), on arrays and on the tape alike."""
    scipy_special = pytest.importorskip("scipy.special")
    a = np.array([0.5, 1.5, 2.5])
    np.testing.assert_allclose(sg.polygamma(1, a), scipy_special.polygamma(1, a), rtol=1e-13)
    np.testing.assert_allclose(sg.besselj(0, a), scipy_special.j0(a), rtol=1e-13)
    np.testing.assert_allclose(sg.real_root(a, 5), a**0.2, rtol=1e-14)
    t = sg.tensor(a, requires_grad=True)
    sg.polygamma(1, t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), scipy_special.polygamma(2, a), rtol=1e-13)


BROKEN_MODEL = """
import math

import sympy

import symgrad as sg


@sg.function
def good(x):
    return sg.exp(x) * x


@sg.function
def breaks_in_tracing(x):
    return math.exp(x)


@sg.function
def cannot_differentiate(x):
    return sympy.Function("g")(x)


@sg.function
def also_good(x, y):
    return x * sg.sin(y)
"""


@pytest.mark.parametrize("command", ["show", "check"])
def test_one_broken_function_does_not_hide_the_others(tmp_path, command):
    from cli_runner import run_symgrad

    (tmp_path / "broken.py").write_text(BROKEN_MODEL)
    r = run_symgrad(command, "broken.py", cwd=tmp_path)
    assert r.returncode == 1
    for name in ("good", "also_good"):
        assert (f"# {name}  [broken.py:" if command == "show" else f"ok   {name}: every gradient") in r.stdout
    assert "broken.py:14: breaks_in_tracing (line 16): TypeError" in r.stderr
    assert "broken.py:19: cannot_differentiate: unsupported function g" in r.stderr
    one = run_symgrad(command, "broken.py", "also_good", cwd=tmp_path)
    assert one.returncode == 0 and "also_good" in one.stdout and one.stderr == ""


@sg.function
def leaky(x, slope=0.1):
    return sg.where(x > 0, x, slope * x)


@sg.function
def activation(x, kind="tanh"):
    return sg.tanh(x) if kind == "tanh" else sg.sigmoid(x)


@sg.function
def affine(x, y, z):
    return x * y + z


def test_defaults_are_constants_of_the_trace():
    x = np.array([-2.0, 3.0])
    assert leaky.compiled().arg_names == ("x",) and activation.compiled().arg_names == ("x",)
    np.testing.assert_allclose(leaky(x), [-0.2, 3.0], rtol=1e-15)
    np.testing.assert_allclose(activation(x), np.tanh(x), rtol=1e-15)
    (grad,) = leaky.vjp(x, np.ones(2))
    np.testing.assert_allclose(grad, [0.1, 1.0], rtol=1e-15)
    for call in (lambda: leaky(x, 0.2), lambda: leaky(x, slope=0.2)):
        with pytest.raises(TypeError, match=r"'slope' has a default \(0.1\), which is compiled into leaky"):
            call()


def test_a_declared_argument_with_a_default_is_refused():
    @sg.function(uniform=("lr",))
    def step(p, lr=0.1):
        return p - lr

    with pytest.raises(sg.ModelError, match="'lr' is declared uniform and has a default"):
        step.trace()


def test_keyword_arguments_by_the_users_names():
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(affine(x, z=1.0, y=3.0), [4.0, 7.0], rtol=1e-15)
    np.testing.assert_allclose(affine.compiled().forward(z=x, y=2.0, x=x)[0], [3.0, 6.0], rtol=1e-15)
    t = sg.tensor([1.0, 2.0], requires_grad=True)
    affine(t, z=0.0, y=2.0).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 2.0], rtol=1e-7)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (1, dict(y=1.0, z=1.0, w=1.0), "affine() got an unexpected keyword argument 'w'"),
        (1, dict(x=1.0, y=1.0, z=1.0), "affine() got multiple values for argument 'x'"),
        (1, dict(z=1.0), "affine() missing 1 required positional argument: 'y'"),
        (0, dict(z=1.0), "affine() missing 2 required positional arguments: 'x' and 'y'"),
    ],
)
def test_keyword_errors_read_as_pythons(args, kwargs, message):
    def reference(x, y, z):
        return x * y + z

    reference.__qualname__ = "affine"  # how Python names it in the message
    values = (np.ones(2),) * args
    with pytest.raises(TypeError) as python:
        reference(*values, **kwargs)
    assert str(python.value) == message
    for call in (affine, affine.compiled().forward):
        with pytest.raises(TypeError) as ours:
            call(*values, **kwargs)
        assert str(ours.value) == message


@sg.function(uniform=("dt",))
def step(q: sg.Vector(2), v: sg.Vector(2), dt):
    return q + dt * v, sg.sin(q[0]) * v[1]


def test_jacobian_with_respect_to_some_arguments():
    rng = np.random.default_rng(0)
    q, v = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
    full = step.jacobian(q, v, 0.1)  # columns q0 q1 v0 v1 dt
    assert full.shape == (4, 3, 5)
    np.testing.assert_array_equal(step.jacobian(q, v, 0.1, wrt=("q", "v")), full[..., :4])
    np.testing.assert_array_equal(step.jacobian(q, v, dt=0.1, wrt=("v", "q")), full[..., [2, 3, 0, 1]])
    out, jac = step.value_and_jacobian(q, v, 0.1, wrt="dt")
    np.testing.assert_array_equal(jac, full[..., 4:])
    np.testing.assert_allclose(jac[:, :2, 0], v, rtol=1e-15)
    np.testing.assert_allclose(out[0], q + 0.1 * v, rtol=1e-15)


@pytest.mark.parametrize(
    "wrt, message",
    [(("q", "w"), "wrt= names 'w', which is not an argument"), (("q", "q"), "names an argument twice")],
)
def test_jacobian_wrt_names_real_arguments(wrt, message):
    with pytest.raises(sg.ArgumentError, match=message):
        step.jacobian(np.ones(2), np.ones(2), 0.1, wrt=wrt)


def _scaled_product(lib):
    """The same PyTorch 2 style Function, for ``lib`` torch or symgrad: forward without ctx (a default
    argument), setup_context saving inputs, backward returning None for the number."""

    class ScaledProduct(lib.autograd.Function if lib is torch else sg.Function):
        @staticmethod
        def forward(x, y, scale=2.0):
            return x * y * scale

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, y, ctx.scale = inputs
            ctx.save_for_backward(x, y)

        @staticmethod
        def backward(ctx, grad):
            x, y = ctx.saved_tensors
            return grad * y * ctx.scale, grad * x * ctx.scale, None

    return ScaledProduct


@pytest.mark.parametrize("call", ["positional", "default", "keyword"])
def test_function_in_the_pytorch_2_style(call):
    results = []
    for lib, make in ((torch, torch.tensor), (sg, sg.tensor)):
        x = make([1.0, -2.0, 3.0], requires_grad=True)
        y = make([0.5, 0.25, -1.0], requires_grad=True)
        fn = _scaled_product(lib)
        args = {"positional": ((x, y, 3.0), {}), "default": ((x, y), {}), "keyword": ((x,), dict(y=y))}[call]
        out = fn.apply(*args[0], **args[1])
        out.sum().backward()
        results.append([np.asarray(t.detach().numpy()) for t in (out, x.grad, y.grad)])
    for theirs, ours in zip(*results):
        np.testing.assert_allclose(ours, theirs, **TOL[np.float32])


def _split(lib, materialize):
    """Two outputs, the second marked non-differentiable; backward records what it receives."""
    seen = []

    class Split(lib.autograd.Function if lib is torch else sg.Function):
        @staticmethod
        def forward(x):
            return x * 2, (x > 0) * 1.0

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(output[1])
            ctx.set_materialize_grads(materialize)

        @staticmethod
        def backward(ctx, g_double, g_mask):
            seen.append(None if g_mask is None else np.asarray(g_mask.detach().numpy()))
            return g_double * 2

    return Split, seen


@pytest.mark.parametrize("materialize", [True, False])
def test_non_differentiable_outputs_and_materialized_grads(materialize):
    outcomes = []
    for lib, make in ((torch, torch.tensor), (sg, sg.tensor)):
        split, seen = _split(lib, materialize)
        x = make([1.0, -2.0], requires_grad=True)
        double, mask = split.apply(x)
        assert not mask.requires_grad and double.requires_grad
        (double * mask).sum().backward()
        outcomes.append((seen[0] if seen[0] is None else seen[0].tolist(), x.grad.numpy().tolist()))
    assert outcomes[1] == outcomes[0]
    assert (outcomes[0][0] is None) is not materialize


@pytest.mark.parametrize("materialize", [True, False])
def test_an_unused_output_gets_zeros_or_none(materialize):
    outcomes = []
    for lib, make in ((torch, torch.tensor), (sg, sg.tensor)):

        class Two(lib.autograd.Function if lib is torch else sg.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(materialize)
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                outcomes.append(None if g2 is None else g2.detach().numpy().tolist())
                return g1 * 2 if g2 is None else g1 * 2 + g2 * 3

        x = make([1.0, 2.0], requires_grad=True)
        Two.apply(x)[0].sum().backward()
        outcomes.append(x.grad.numpy().tolist())
    assert outcomes[2:] == outcomes[:2]
    assert (outcomes[0] is None) is not materialize
