"""The fast paths of a lone tape op keep PyTorch's semantics: broadcasting on the Jacobian-saving node
(values, gradients summed back to each input's shape, dtypes, a second differentiation), the no-grad forward
straight to the kernel, the engine's path for one node whose inputs are leaves (a leaf used twice, hooks,
retain_graph, version counters, a node with two outputs), small gradients broadcast by ``sum``'s backward,
retain_grad's copy, and the seeds' checks. Each result is compared with PyTorch eager. Speed itself is
measured in bench/bench_runtime.py. Tolerances: float64 rtol 1e-12, float32 rtol 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import symgrad as sg
from symgrad.runtime import compiled_node

RTOL = {"float64": 1e-12, "float32": 1e-5}

OPS = {
    "mul": lambda a, b: a * b,
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": lambda a, b: a.maximum(b),
}
SHAPES = [
    ((4,), (1,)),
    ((4,), (3, 4)),
    ((3, 1), (1, 4)),
    ((), (4,)),
    ((2, 3, 4), (3, 1)),
    ((1, 4), (2, 1, 1)),
]


def _pair(shape: tuple, dtype: str, seed: int, requires_grad: bool):
    """The same leaf in symgrad and PyTorch: positive values (``pow``), distinct (``maximum``'s ties)."""
    arr = np.random.default_rng(seed).uniform(0.5, 2.0, shape).astype(dtype)
    return sg.tensor(arr, requires_grad=requires_grad), torch.tensor(arr, requires_grad=requires_grad)


def _close(ours, theirs, dtype: str) -> None:
    expected = theirs.detach().numpy()
    got = ours.detach().numpy()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=RTOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize(
    "grads", [(True, True), (True, False), (False, True)], ids=["both", "first", "second"]
)
def test_broadcast_binary_ops_take_the_jacobian_node_and_match_torch(op, shapes, dtype, grads):
    (x, tx), (w, tw) = (_pair(s, dtype, k, g) for k, (s, g) in enumerate(zip(shapes, grads)))
    out, tout = OPS[op](x, w), OPS[op](tx, tw)
    assert out.grad_fn.backward is compiled_node._broadcast_jacobian_backward
    seed = np.linspace(0.5, 1.5, tout.numel()).reshape(tout.shape).astype(dtype)
    out.backward(sg.tensor(seed))
    tout.backward(torch.tensor(seed))
    _close(out, tout, dtype)
    for ours, theirs in ((x, tx), (w, tw)):
        if theirs.requires_grad:
            _close(ours.grad, theirs.grad, dtype)
        else:
            assert ours.grad is None


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_second_derivatives_through_a_broadcast_node_match_torch(dtype):
    (x, tx), (w, tw) = _pair((3, 4), dtype, 0, True), _pair((4,), dtype, 1, True)
    (gw,) = sg.grad((x * w.sin() / (w + x)).sum(), [w], create_graph=True)
    (tgw,) = torch.autograd.grad((tx * tw.sin() / (tw + tx)).sum(), [tw], create_graph=True)
    _close(gw, tgw, dtype)
    (gw * gw).sum().backward()
    (tgw * tgw).sum().backward()
    _close(x.grad, tx.grad, dtype)
    _close(w.grad, tw.grad, dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shapes", SHAPES[:3], ids=[f"{a}x{b}" for a, b in SHAPES[:3]])
def test_the_no_grad_forward_broadcasts_as_torch(shapes, dtype):
    (x, tx), (w, tw) = _pair(shapes[0], dtype, 0, False), _pair(shapes[1], dtype, 1, False)
    for name, op in OPS.items():
        _close(op(x, w), op(tx, tw), dtype)
        if name != "maximum":  # (torch.maximum takes tensors only)
            _close(op(x, 2.0), op(tx, 2.0), dtype)
    with sg.no_grad():
        x.requires_grad_()
        out = x * w
    assert out.grad_fn is None and not out.requires_grad


def test_shapes_that_do_not_broadcast_raise_torchs_error():
    x = sg.tensor(np.ones(4), requires_grad=True)
    for w in (sg.tensor(np.ones(3)), sg.tensor(np.ones(3), requires_grad=True)):
        with pytest.raises(
            RuntimeError, match=r"size of tensor a \(4\) must match the size of tensor b \(3\)"
        ):
            x * w


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_leaf_used_twice_by_a_lone_node_gets_one_summed_gradient_and_one_hook_call(dtype):
    (x, tx) = _pair((5,), dtype, 0, True)
    seen, tseen = [], []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    tx.register_hook(lambda g: tseen.append(g.numpy().copy()))
    (x * x).sum().backward()
    (tx * tx).sum().backward()
    (x * x).backward(sg.ones(5, dtype=dtype))
    (tx * tx).backward(torch.ones(5, dtype=tx.dtype))
    _close(x.grad, tx.grad, dtype)
    assert len(seen) == len(tseen) == 2
    np.testing.assert_allclose(seen[1], tseen[1], rtol=RTOL[dtype])


def test_a_lone_node_frees_what_it_saved_and_checks_versions():
    x = sg.tensor([0.5, 1.5], requires_grad=True, dtype=np.float64)
    w = sg.tensor([2.0, 3.0], requires_grad=True, dtype=np.float64)
    y = x * w
    y.backward(sg.ones(2, dtype=np.float64), retain_graph=True)
    y.backward(sg.ones(2, dtype=np.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 6.0])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward(sg.ones(2, dtype=np.float64))
    z = x * w
    with sg.no_grad():
        w.add_(1.0)  # a leaf's buffer, saved by z's node
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


class TwoOut(sg.Function):
    """(2x, x^2) from one leaf: a lone node with two outputs."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2.0, x * x

    @staticmethod
    def backward(ctx, ga, gb):
        (x,) = ctx.saved_tensors
        return ga * 2.0 + gb * 2.0 * x


class TorchTwoOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2.0, x * x

    @staticmethod
    def backward(ctx, ga, gb):
        (x,) = ctx.saved_tensors
        return ga * 2.0 + gb * 2.0 * x


def test_backward_from_one_output_of_a_lone_two_output_node_matches_torch():
    (x, tx) = _pair((3,), "float64", 0, True)
    TwoOut.apply(x)[1].backward(sg.ones(3, dtype=np.float64))
    TorchTwoOut.apply(tx)[1].backward(torch.ones(3, dtype=torch.float64))
    _close(x.grad, tx.grad, "float64")


@pytest.mark.parametrize("n", [7, 5000], ids=["copied", "view"])
def test_sum_backward_broadcasts_small_and_large_gradients_as_torch(n):
    (x, tx) = _pair((n,), "float32", 0, True)
    x.sin().sum().backward()
    tx.sin().sum().backward()
    _close(x.grad, tx.grad, "float32")
    (y, ty) = _pair((4, 1), "float64", 1, True)
    (y.exp().sum(dim=1) * 3.0).sum().backward()
    (ty.exp().sum(dim=1) * 3.0).sum().backward()
    _close(y.grad, ty.grad, "float64")


def test_an_implicit_seed_is_ones_of_the_outputs_shape_and_dtype():
    (x, tx) = _pair((1, 1), "float32", 0, True)
    (x * 3.0).backward()
    (tx * 3.0).backward()
    _close(x.grad, tx.grad, "float32")
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (sg.tensor(np.ones(2), requires_grad=True) * 2.0).backward()


def test_gradients_and_outputs_of_different_counts_raise_torchs_error():
    x = sg.tensor(np.ones(2), requires_grad=True)
    a, b = x * 2.0, x * 3.0
    with pytest.raises(RuntimeError, match="got 2 tensors and 1 gradients"):
        sg.grad([a, b], [x], [sg.ones(2, dtype=np.float64)])


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_retain_grad_keeps_a_copy_of_the_gradient_as_torch():
    (x, tx) = _pair((2,), "float32", 0, True)
    y, ty = x * 2.0, tx * 2.0
    y.retain_grad()
    ty.retain_grad()
    seed, tseed = sg.ones(2), torch.ones(2)
    y.backward(seed)
    ty.backward(tseed)
    seed.mul_(5.0)  # the seed is the root's gradient: its .grad must not follow it
    tseed.mul_(5.0)
    _close(y.grad, ty.grad, "float32")
    y, ty = x * x, tx * tx
    y.retain_grad()
    ty.retain_grad()
    (y * y).sum().backward(create_graph=True)
    (ty * ty).sum().backward(create_graph=True)
    _close(y.grad, ty.grad, "float32")
    assert y.grad.requires_grad and y.grad.grad_fn.name == ty.grad.grad_fn.name() == "CloneBackward0"


class NoGrad(sg.Function):
    """y = 2x whose backward gives its input nothing."""

    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return None


class TorchNoGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return None


def _chain(lib, x, seen):
    """A chain: each node has one input from another node (and leaves); hooks record the order."""
    h = x * 2.0
    for name, f in (("sin", lambda t: t.sin()), ("mul", lambda t: t * x), ("exp", lambda t: (t * 0.1).exp())):
        h = f(h)
        h.register_hook(lambda g, name=name: seen.append(name))
    return h


def test_a_chain_runs_its_nodes_in_order_and_captures_as_torch():
    (x, tx) = _pair((3,), "float64", 0, True)
    seen, tseen = [], []
    _chain(sg, x, seen).sum().backward()
    _chain(torch, tx, tseen).sum().backward()
    assert seen == tseen == ["exp", "mul", "sin"]
    _close(x.grad, tx.grad, "float64")
    h, th = x.sin() * x, tx.sin() * tx
    ours = sg.grad((h.exp() * 2.0).sum(), [h, x])
    theirs = torch.autograd.grad((th.exp() * 2.0).sum(), [th, tx])
    for o, t in zip(ours, theirs):
        _close(o, t, "float64")
    (z, tz) = _pair((2,), "float32", 1, True)
    NoGrad.apply(z * 2.0).sin().sum().backward()  # nothing flows past the Function: z gets no gradient
    TorchNoGrad.apply(tz * 2.0).sin().sum().backward()
    assert z.grad is None and tz.grad is None
