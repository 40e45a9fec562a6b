"""The tape's fast paths keep PyTorch's semantics: the one-pass backward engine (Kahn order, nodes that get no
gradient, several roots), the Jacobian-saving forward for one and two arguments (numbers, arrays, fallbacks
to the general node), leaf accumulation (dtype, no aliasing), hooks and version counters. Each result is
compared with PyTorch eager (installed with the test extra). Speed itself is measured in
bench/bench_runtime.py, never here. Tolerances: float64 rtol 1e-12, float32 rtol 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import symgrad as sg
from symgrad.runtime import autograd, compiled_node

RTOL = {"float64": 1e-12, "float32": 1e-5}


def _pair(values, dtype: str, requires_grad: bool = True):
    """The same leaf in symgrad and in PyTorch."""
    arr = np.asarray(values, dtype=dtype)
    return sg.tensor(arr, requires_grad=requires_grad), torch.tensor(arr, requires_grad=requires_grad)


def _close(ours, theirs, dtype: str) -> None:
    theirs = theirs.detach().numpy()
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_allclose(ours.numpy() if hasattr(ours, "numpy") else ours, theirs, rtol=RTOL[dtype])


class NoGradFor(sg.Function):
    """y = 2 * x whose backward returns None: its input's producer receives no gradient from it."""

    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return None


def _graphs(lib, x, y):
    """Graphs whose backward order matters: a diamond, a reused input, a long chain, mixed numbers."""
    a = x * y
    b = lib.sin(a) * a + (1.5 - a) / y
    c = b
    for _ in range(30):
        c = lib.tanh(c) * 0.9 + x
    return (2.0 * c - b) ** 2


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gradients_through_diamonds_and_chains_match_torch(dtype, backend):
    (x, tx), (y, ty) = _pair([0.3, -0.7, 1.1], dtype), _pair([1.2, 0.8, 2.5], dtype)
    out, tout = _graphs(sg, x, y), _graphs(torch, tx, ty)
    seed = np.linspace(0.5, 1.5, 3).astype(dtype)
    out.backward(sg.tensor(seed))
    tout.backward(torch.tensor(seed))
    _close(out.detach(), tout, dtype)
    _close(x.grad, tx.grad, dtype)
    _close(y.grad, ty.grad, dtype)


def test_a_node_that_gets_no_gradient_still_lets_its_producers_run():
    x = sg.tensor([0.5, 1.5], requires_grad=True, dtype=np.float64)
    p = x * 3.0
    q = NoGradFor.apply(p)  # p's producer gets nothing through q...
    r = p.sin()  # ...and waits for q's node before it runs
    (q + r).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(3 * x.detach().numpy()), rtol=1e-12)
    z = sg.tensor([1.0, 2.0], requires_grad=True, dtype=np.float64)
    NoGradFor.apply(z * 2.0).sum().backward()  # no gradient reaches the leaf at all
    assert z.grad is None


def test_several_roots_one_feeding_another_match_torch():
    (x, tx) = _pair([0.2, 0.9], "float64")
    a, ta = x.exp(), tx.exp()
    b, tb = a * x, ta * tx
    autograd.backward(
        [b, a],
        [sg.tensor([1.0, 2.0], dtype=np.float64), sg.tensor([0.5, 0.25], dtype=np.float64)],
        retain_graph=True,
    )
    torch.autograd.backward(
        [tb, ta],
        [torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([0.5, 0.25], dtype=torch.float64)],
        retain_graph=True,
    )
    _close(x.grad, tx.grad, "float64")
    ga, gx = sg.grad(b.sum() + a.sum(), [a, x])
    tga, tgx = torch.autograd.grad(tb.sum() + ta.sum(), [ta, tx])
    _close(ga, tga, "float64")
    _close(gx, tgx, "float64")


def test_hooks_see_the_sum_over_every_consumer_and_run_in_order():
    x = sg.tensor([1.0, 2.0], requires_grad=True, dtype=np.float64)
    h = x * 2.0
    seen = []
    h.register_hook(lambda g: seen.append(("first", g.numpy().copy())))
    h.register_hook(lambda g: g * 10.0)
    h.retain_grad()
    (h.sin() + h * h + h).sum().backward()
    hv = 2 * np.array([1.0, 2.0])
    total = np.cos(hv) + 2 * hv + 1
    assert seen[0][0] == "first"
    np.testing.assert_allclose(seen[0][1], total, rtol=1e-12)
    np.testing.assert_allclose(h.grad.numpy(), 10 * total, rtol=1e-12)  # retain_grad: after the hooks
    np.testing.assert_allclose(x.grad.numpy(), 20 * total, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "f",
    [
        lambda x, w: x * w,
        lambda x, w: 2.0 * x + w,
        lambda x, w: x * 3 - 1,  # Python ints
        lambda x, w: x / w.detach(),  # a tensor that does not require grad
        lambda x, w: (x**2).sqrt(),
        lambda x, w: x.maximum(w),
    ],
    ids=["tensors", "numbers", "ints", "constant-tensor", "unary", "maximum"],
)
def test_jacobian_fast_paths_match_torch(f, dtype, backend):
    (x, tx), (w, tw) = _pair([0.5, -1.5, 2.0, 3.0], dtype), _pair([1.5, 0.5, 2.5, -1.0], dtype)
    out, tout = f(x, w), f(tx, tw)
    assert out.grad_fn.backward is compiled_node._jacobian_backward
    out.sum().backward()
    tout.sum().backward()
    _close(out.detach(), tout, dtype)
    _close(x.grad, tx.grad, dtype)
    if tw.grad is not None:
        _close(w.grad, tw.grad, dtype)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x * np.linspace(1, 2, 4),  # a float64 array beside a float32 tensor: NumPy's promotion
        lambda x: x * np.float32(2.0),  # a NumPy scalar is not a Python number
        lambda x: x.double().sum() * x,  # a float64 0-d tensor: PyTorch's promotion keeps float32
    ],
    ids=["float64-array", "numpy-scalar", "0-d-float64"],
)
def test_arguments_off_the_fast_path_take_the_general_node(make):
    x = sg.tensor(np.linspace(0.5, 2, 4).astype(np.float32), requires_grad=True)
    y = make(x)
    assert y.grad_fn.backward is compiled_node._vjp_backward
    y.sum().backward()
    assert x.grad.dtype == np.float32 and x.grad.shape == (4,)


def test_a_large_tensor_and_grad_mode_off_skip_the_jacobian_node():
    big = sg.tensor(np.ones(compiled_node.JACOBIAN_MAX + 1), requires_grad=True)
    assert big.sin().grad_fn.backward is compiled_node._vjp_backward
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    with sg.no_grad():
        y = x * x
    assert y.grad_fn is None and not y.requires_grad


def test_leaf_gradients_never_alias_each_other_or_the_seed():
    x = sg.tensor([1.0, 2.0], requires_grad=True, dtype=np.float64)
    y = sg.tensor([3.0, 4.0], requires_grad=True, dtype=np.float64)
    seed = sg.tensor([1.0, 1.0], dtype=np.float64)
    (x + y).backward(seed)  # add's backward may hand both leaves the same array
    x.grad.add_(1.0)
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 1.0])
    x.backward(seed)  # a leaf root: its gradient is the seed, copied
    seed.mul_(5.0)
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    assert x.grad.grad_fn is None and not x.grad.requires_grad and x.grad.is_leaf


def test_a_float32_leaf_gets_a_float32_gradient_from_a_float64_result():
    x, tx = _pair([0.5, 1.5], "float32")
    w = np.array([2.0, 3.0])
    (x * w).sum().backward()
    (tx * torch.tensor(w)).sum().backward()
    _close(x.grad, tx.grad, "float32")


@pytest.mark.parametrize("op", [lambda h: h * 2.0, lambda h: h.sin(), lambda h: h * h])
def test_an_input_modified_in_place_after_a_fast_node_saved_it_is_refused(op):
    x = sg.tensor([0.5, 1.5], requires_grad=True, dtype=np.float64)
    h = x * 1.0
    y = op(h)
    with sg.no_grad():
        h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_a_second_backward_through_a_freed_chain_is_refused():
    x = sg.tensor([0.5, 1.5], requires_grad=True)
    y = (x * 2.0).sin()
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()
