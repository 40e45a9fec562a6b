"""Every Tensor operation's gradient against central differences in float64, broadcasting included;
dtype rules; the conventions at kinks and the stable forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import symgrad as sg
from symgrad.runtime import compiled_node

RNG = np.random.default_rng(1234)


@pytest.fixture(params=["jacobian", "vjp"])
def recording(request, monkeypatch):
    """Both ways a compiled primitive records: saving J (small same-shape tensors) or the inputs."""
    if request.param == "vjp":
        monkeypatch.setattr(compiled_node, "JACOBIAN_MAX", 0)
    return request.param


def numeric_grad(f, arrays, index, weights, eps=1e-6):
    """Central differences of sum(weights * f(arrays)) with respect to arrays[index]."""

    def value(arrs):
        with sg.no_grad():
            return float(np.sum(weights * f(*[sg.tensor(a, dtype=np.float64) for a in arrs]).data))

    base = arrays[index]
    grad = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
        plus[index][idx] += eps
        minus[index][idx] -= eps
        grad[idx] = (value(plus) - value(minus)) / (2 * eps)
    return grad


def check_grad(f, *arrays, rtol=1e-5, atol=1e-7):
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    tensors = [sg.tensor(a, requires_grad=True, dtype=np.float64) for a in arrays]
    out = f(*tensors)
    weights = RNG.normal(size=out.shape)
    (out * sg.tensor(weights)).sum().backward()
    for i, t in enumerate(tensors):
        assert t.grad is not None and t.grad.shape == arrays[i].shape and t.grad.dtype == np.float64
        np.testing.assert_allclose(t.grad.data, numeric_grad(f, arrays, i, weights), rtol=rtol, atol=atol)


def normal(*shape):
    return RNG.normal(size=shape)


def positive(*shape):
    return RNG.uniform(0.5, 2.0, size=shape)


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize(
    "shapes", [((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 2)), ((4, 1, 3), (2, 1))]
)
def test_binary_ops_with_broadcasting(name, shapes, recording):
    check_grad(BINARY[name], positive(*shapes[0]), positive(*shapes[1]))


@pytest.mark.parametrize(
    "f",
    [
        lambda x: 2.0 + x,
        lambda x: 2.0 - x,
        lambda x: 3.0 * x,
        lambda x: 2.0 / x,
        lambda x: 2.0**x,
        lambda x: x**3,
        lambda x: x**0.5,
        lambda x: -x,
        lambda x: abs(x - 1.25),
        lambda x: x - 1,
        lambda x: x / 4,
    ],
    ids=["radd", "rsub", "rmul", "rdiv", "rpow", "pow3", "pow_half", "neg", "abs", "sub_int", "div_int"],
)
def test_operators_with_python_numbers(f, recording):
    check_grad(f, positive(2, 3))


def test_small_nodes_save_the_jacobian_and_large_ones_the_inputs():
    small = sg.tensor(np.linspace(0.5, 2, 8), requires_grad=True)
    large = sg.tensor(np.linspace(0.5, 2, compiled_node.JACOBIAN_MAX + 1), requires_grad=True)
    for x, backward in ((small, compiled_node._jacobian_backward), (large, compiled_node._vjp_backward)):
        y = (x * 3.0).sin()
        assert y.grad_fn.backward is backward
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(3 * x.detach().numpy()), rtol=1e-12)


def test_jacobian_nodes_take_arrays_constant_tensors_and_parameters():
    w = sg.nn.Parameter(np.linspace(0.5, 2, 6))
    c = np.linspace(-1, 1, 6)
    const = sg.tensor(np.full(6, 0.5))
    wc = w * c
    y = wc + const * w
    assert y.grad_fn.backward is wc.grad_fn.backward is compiled_node._jacobian_backward
    assert wc.grad_fn.inputs[0] is w and wc.grad_fn.inputs[1] is None and wc.grad_fn.saved[1] is None
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), c + 0.5, rtol=1e-12)
    with pytest.raises(TypeError):
        w * "a"


@sg.function
def sin_times(x, y):
    return sg.sin(x) * y


def test_a_wrong_argument_count_is_an_error_that_changes_nothing(backend):
    """A tensor that requires grad takes the tape's fast path: it must still count the arguments."""
    from symgrad.errors import ArgumentError

    blend = sin_times.compiled()
    assert blend.jacobian_saving
    x = sg.tensor(np.linspace(0.5, 2, 6), requires_grad=True)
    z = np.zeros(6)
    with pytest.raises(ArgumentError, match=r"takes 2 argument\(s\) \(x, y\); got 1"):
        blend(x)
    with pytest.raises(ArgumentError, match=r"takes 2 argument\(s\) \(x, y\); got 3"):
        blend(x, x, z)
    assert not z.any() and x.grad is None


def test_repeated_python_numbers_keep_their_values(backend):
    """The C backend fills a repeated number out to the batch once and reuses it: 0.0 and -0.0, 1 and 1.0,
    NaN and the dtype must still each give their own result, and the shared fill must stay unchanged."""
    x = sg.tensor(np.array([1.0, -2.0, 3.0]))
    for _ in range(2):
        np.testing.assert_array_equal((1.0 / (x * 0.0)).numpy(), [np.inf, -np.inf, np.inf])
        np.testing.assert_array_equal((1.0 / (x * -0.0)).numpy(), [-np.inf, np.inf, -np.inf])
        np.testing.assert_array_equal((x + 1).numpy(), (x + 1.0).numpy())
        assert np.isnan((x * float("nan")).numpy()).all()
        x32 = sg.tensor(x.numpy().astype(np.float32))
        np.testing.assert_array_equal((x32 * 0.1).numpy(), x32.numpy() * np.float32(0.1))
        np.testing.assert_array_equal((x * 0.1).numpy(), x.numpy() * 0.1)


UNARY_DOMAIN = {
    "exp": normal,
    "log": positive,
    "log1p": positive,
    "expm1": normal,
    "sqrt": positive,
    "sin": normal,
    "cos": normal,
    "tan": lambda *s: RNG.uniform(-1, 1, s),
    "tanh": normal,
    "sigmoid": normal,
    "relu": normal,
    "softplus": normal,
    "abs": normal,
    "neg": normal,
    "square": normal,
    "reciprocal": positive,
    "sign": normal,
}


@pytest.mark.parametrize("name", sorted(UNARY_DOMAIN))
def test_unary_methods(name, recording):
    check_grad(lambda x: getattr(x, name)(), UNARY_DOMAIN[name](3, 4))


@pytest.mark.parametrize(
    "shapes",
    [
        ((3,), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
        ((2, 3), (3, 4)),
        ((5, 2, 3), (3, 4)),
        ((2, 1, 2, 3), (4, 3, 2)),
        ((3,), (2, 3, 4)),
    ],
)
def test_matmul(shapes):
    check_grad(lambda a, b: a @ b, normal(*shapes[0]), normal(*shapes[1]))


def test_matmul_with_a_constant_array():
    check_grad(lambda a: a @ np.arange(6.0).reshape(3, 2), normal(4, 3))
    check_grad(lambda a: np.arange(6.0).reshape(2, 3) @ a, normal(3, 4))


REDUCTIONS = [(None, False), (0, False), (1, True), (-1, False), ((0, 2), False), ((0, 2), True)]


@pytest.mark.parametrize("method", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis,keepdims", REDUCTIONS)
def test_reductions(method, axis, keepdims):
    check_grad(lambda x: getattr(x, method)(axis=axis, keepdims=keepdims), normal(2, 3, 4))


def test_reduction_torch_keyword_names():
    x = sg.tensor(normal(2, 3))
    np.testing.assert_allclose(x.sum(dim=1, keepdim=True).data, x.data.sum(1, keepdims=True))


def test_max_ties_share_the_gradient():
    x = sg.tensor([1.0, 3.0, 3.0], requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.data, [0, 0.5, 0.5])


@pytest.mark.parametrize(
    "f",
    [
        lambda x: x.reshape(4, 6),
        lambda x: x.reshape((-1,)),
        lambda x: x.view(3, 8),
        lambda x: x.T,
        lambda x: x.transpose(0, 2),
        lambda x: x.permute(1, 2, 0),
        lambda x: x.mT,
        lambda x: x.reshape(2, 3, 1, 4).broadcast_to((2, 3, 5, 4)),
    ],
    ids=["reshape", "flatten", "view", "T", "transpose", "permute", "mT", "broadcast_to"],
)
def test_shape_ops(f):
    check_grad(f, normal(2, 3, 4))


@pytest.mark.parametrize(
    "index",
    [
        0,
        -1,
        (1, 2),
        slice(1, None),
        (slice(None), slice(None, None, -1)),
        (Ellipsis, 1),
        (None, 0),
        [0, 0, 2],
        (np.array([0, 2, 2]), np.array([1, 1, 3])),
        np.array([True, False, True]),
        (slice(None), [3, 0, 3]),
    ],
    ids=[
        "int",
        "neg",
        "pair",
        "slice",
        "reverse",
        "ellipsis",
        "newaxis",
        "repeated",
        "pairs",
        "mask",
        "mixed",
    ],
)
def test_indexing(index):
    check_grad(lambda x: x[index] * 1.0, normal(3, 4))


def test_indexing_with_a_tensor_index():
    check_grad(lambda x: x[sg.tensor([2, 0, 2])], normal(3, 2))


@settings(max_examples=25, deadline=None)
@given(mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
def test_broadcast_gradients_are_summed_to_input_shapes(shapes):
    a, b = shapes.input_shapes
    check_grad(lambda x, y: x * y + x, normal(*a), normal(*b))


def test_composite_expression():
    check_grad(
        lambda x, w, b: ((x @ w + b).tanh() ** 2).mean(axis=0) * (x.sum() / 3.0).exp(),
        normal(4, 3) * 0.3,
        normal(3, 2),
        normal(2),
    )


# -- dtypes ----------------------------------------------------------------------------------------------
def test_from_numpy_and_as_tensor_share_memory():
    a = np.arange(3.0)
    t = sg.from_numpy(a)
    a[0] = 5.0
    assert t.data is a and t.is_leaf and not t.requires_grad and t.numpy()[0] == 5.0
    assert sg.as_tensor(a).data is a and sg.as_tensor(t) is t
    c = sg.as_tensor(a, dtype=np.float32)
    assert c.dtype == np.float32 and not np.shares_memory(c.data, a)
    assert sg.as_tensor([1.0, 2.0]).dtype == np.float32  # Python floats: torch's default dtype
    assert sg.tensor(a).data is not a  # tensor() copies, as torch.tensor does
    with pytest.raises(TypeError, match="expected np.ndarray"):
        sg.from_numpy([1.0])


def test_default_dtypes_follow_torch():
    assert sg.tensor([1.0, 2.0]).dtype == np.float32
    assert sg.tensor(np.array([1.0, 2.0])).dtype == np.float64
    assert sg.tensor([1, 2]).dtype == np.int64
    assert sg.tensor([1.0], dtype=np.float64).dtype == np.float64
    assert sg.Tensor([1.0]).dtype == np.float32


def test_python_scalars_are_weak():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    for y in (x * 2.0, 2.0 * x, x + 1, x / 3, x**2, 1.0 - x):
        assert y.dtype == np.float32
    (x * 2.0).sum().backward()
    assert x.grad.dtype == np.float32


def test_integer_and_boolean_tensors():
    t = sg.tensor([1, 2, 3])
    assert (t + 1).tolist() == [2, 3, 4] and (t * t).dtype == np.int64
    assert (sg.tensor([1.0, -1.0]) > 0).tolist() == [True, False]


def test_tensor_sugar():
    x = sg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.shape == (2, 2) and x.ndim == 2 and x.numel() == 4 and x.size(1) == 2 and len(x) == 2
    assert x.sum().item() == 10.0
    assert "grad_fn=<MulBackward>" in repr(sg.tensor([1.0], requires_grad=True) * 2)
    assert np.asarray(x).shape == (2, 2)


# -- conventions at kinks, stable forms -------------------------------------------------------------------
def grad_at(method, value, *args):
    x = sg.tensor([value], requires_grad=True, dtype=np.float64)
    getattr(x, method)(*args).sum().backward()
    return x.grad.item()


def test_kink_conventions():
    assert grad_at("relu", 0.0) == 0.0
    assert grad_at("abs", 0.0) == 0.0
    assert grad_at("sign", 0.0) == 0.0
    assert grad_at("maximum", 1.0, sg.tensor([1.0], dtype=np.float64)) == 0.5


def test_stable_softplus_and_sigmoid():
    x = sg.tensor([-1000.0, 0.0, 1000.0], requires_grad=True)
    y = x.softplus()
    np.testing.assert_allclose(y.data, [0.0, np.log(2.0), 1000.0], rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.data, [0.0, 0.5, 1.0])
    s = sg.tensor([-1000.0, 1000.0]).sigmoid()
    assert np.all(np.isfinite(s.data)) and s.tolist() == [0.0, 1.0]


def test_integer_and_float_tensors_promote_as_in_pytorch():
    """An integer tensor times a float one was an ArgumentError; PyTorch promotes to the float's dtype."""
    w = sg.tensor([1.5, 2.0, 3.0], requires_grad=True)
    y = sg.tensor([1, 2, 3]) * w
    assert y.data.dtype == np.float32
    np.testing.assert_allclose(y.data, [1.5, 4.0, 9.0])
    y.sum().backward()
    np.testing.assert_allclose(w.grad.data, [1.0, 2.0, 3.0])
    assert (sg.tensor([1, 2, 3]) * 1.5).data.dtype == np.float32
    assert (sg.tensor([1, 2]) * sg.tensor(np.array([0.5]))).data.dtype == np.float64
    assert (sg.tensor([True, False]) + sg.tensor([1.5, 1.5])).data.dtype == np.float32
    assert (sg.tensor([1, 2]) * 2).data.dtype == np.int64
