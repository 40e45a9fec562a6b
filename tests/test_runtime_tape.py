"""The tape: leaves and non-leaves, accumulation, grad mode, hooks, custom Functions, compiled nodes,
higher order through shape ops, deep graphs and memory."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg


class Square(sg.Function):
    """custom_f: y = x * x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


MODEL = """
import symgrad as sg

@sg.function
def custom_f(x):
    return x * x

@sg.function
def polar(r, t):
    return r * sg.cos(t), r * sg.sin(t)
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = Path(tmp_path_factory.mktemp("model")) / "tape_model.py"
    path.write_text(MODEL)
    return sg.compile(path)


def test_seed_custom_function():
    x = sg.tensor(3.0, requires_grad=True)
    y = Square.apply(x)
    y.backward()
    assert y.item() == 9 and x.grad.item() == 6
    x.grad = None
    z = Square.apply(Square.apply(x))
    z.backward()
    assert z.item() == 81 and x.grad.item() == 108
    assert z.grad_fn.name == "SquareBackward"


def test_seed_compiled_function(model):
    x = sg.tensor(3.0, requires_grad=True)
    y = model.custom_f(x)
    assert isinstance(y, sg.Tensor)
    y.backward()
    assert y.item() == 9 and x.grad.item() == 6
    x.grad = None
    z = model.custom_f(model.custom_f(x))
    z.backward()
    assert z.item() == 81 and x.grad.item() == 108


def test_compiled_function_with_two_outputs(model):
    r = sg.tensor([1.0, 2.0], requires_grad=True, dtype=np.float64)
    t = sg.tensor([0.3, -0.4], requires_grad=True, dtype=np.float64)
    x, y = model.polar(r, t)
    x.sum().backward()  # y unused: its cotangent is zero
    np.testing.assert_allclose(r.grad.data, np.cos(t.data))
    np.testing.assert_allclose(t.grad.data, -r.data * np.sin(t.data))


def test_leaf_and_non_leaf_flags():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert x.is_leaf and not y.is_leaf and y.requires_grad and x.grad_fn is None
    c = sg.tensor([1.0, 2.0])
    assert not (c * 2).requires_grad and (c * 2).is_leaf
    assert x.grad is None


def test_gradients_accumulate_and_zero_grad_resets():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 4 * x.data)
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.data, [3, 3])


def test_reused_input_and_diamond():
    x = sg.tensor(2.0, requires_grad=True)
    a = x * x
    y = a * a + a  # x^4 + x^2
    y.backward()
    assert x.grad.item() == pytest.approx(4 * 8 + 4)


def test_grad_of_broadcast_input_is_summed_to_its_shape():
    x = sg.tensor(np.ones((3, 4)), requires_grad=True)
    b = sg.tensor(np.ones((4,)), requires_grad=True)
    s = sg.tensor(np.ones((3, 1)), requires_grad=True)
    ((x * b + s) * 2.0).sum().backward()
    assert b.grad.shape == (4,) and s.grad.shape == (3, 1)
    np.testing.assert_allclose(b.grad.data, 6.0)
    np.testing.assert_allclose(s.grad.data, 8.0)


def test_no_grad_and_enable_grad():
    x = sg.tensor([1.0], requires_grad=True)
    with sg.no_grad():
        assert not sg.is_grad_enabled()
        y = x * 2
        with sg.enable_grad():
            z = x * 2
    assert sg.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and z.requires_grad

    @sg.no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad


def test_detach_shares_memory():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and np.shares_memory(d.data, x.data)
    d.data[0] = 5
    assert x.data[0] == 5


def test_retain_grad_and_hooks():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    seen = []
    y.register_hook(lambda g: seen.append(g.data.copy()))
    handle = x.register_hook(lambda g: g * 10)
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.data, 2 * y.data)
    np.testing.assert_allclose(seen[0], 2 * y.data)
    np.testing.assert_allclose(x.grad.data, 10 * 3 * 2 * y.data)
    handle.remove()
    x.grad = None
    (x * 1.0).sum().backward()
    np.testing.assert_allclose(x.grad.data, [1, 1])


def test_grad_function_does_not_touch_dot_grad():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    y = sg.tensor([3.0], requires_grad=True)
    (gx, gy) = sg.grad((x * y).sum(), [x, y])
    np.testing.assert_allclose(gx.data, [3, 3])
    np.testing.assert_allclose(gy.data, [3])
    assert x.grad is None and y.grad is None
    (gx,) = sg.grad((x * 2).sum(), x, grad_outputs=sg.tensor(0.5))
    np.testing.assert_allclose(gx.data, [1, 1])


def test_grad_of_non_leaf_input():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    (gh,) = sg.grad((h * h).sum(), h)
    np.testing.assert_allclose(gh.data, 2 * h.data)


def test_retain_graph_allows_a_second_backward():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.data, 4 * x.data)


def test_create_graph_through_shape_ops_gives_hessian_vector_products():
    rng = np.random.default_rng(0)
    x = sg.tensor(rng.normal(size=(3, 2)), requires_grad=True)
    v = rng.normal(size=(3, 2))
    f = (x @ x.T).sum()  # f = |sum of rows|^2 -> grad = 2 * colsum broadcast
    (g,) = sg.grad(f, x, create_graph=True)
    np.testing.assert_allclose(g.data, 2 * np.broadcast_to(x.data.sum(0), (3, 2)))
    (hv,) = sg.grad((g * v).sum(), x)
    np.testing.assert_allclose(hv.data, 2 * np.broadcast_to(v.sum(0), (3, 2)))


def test_create_graph_through_custom_function_backward():
    class Cube(sg.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x * x * grad

    x = sg.tensor(2.0, requires_grad=True, dtype=np.float64)
    (g,) = sg.grad(Cube.apply(x), x, create_graph=True)
    assert g.item() == 12 and g.requires_grad
    g.backward()
    assert x.grad.item() == 12  # d/dx 3x^2 = 6x


def test_a_third_differentiation_through_compiled_nodes():
    """Past the second order through the vjp compiled as a function (tests/test_double_backward.py)."""
    x = sg.tensor(2.0, requires_grad=True)
    (g,) = sg.grad(x * x * x, x, create_graph=True)
    assert g.item() == 12
    (h,) = sg.grad(g, x, create_graph=True)
    assert h.item() == 12
    h.backward()
    assert x.grad.item() == 6


def test_deep_chain_backpropagates_without_recursion():
    x = sg.tensor(1.0, requires_grad=True, dtype=np.float64)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    y.backward()
    assert x.grad.item() == 1.0
    del y
    gc.collect()


def test_backward_order_is_deterministic():
    def run():
        order = []
        x = sg.tensor([1.0, 2.0], requires_grad=True)
        a, b, c = x * 2, x * 3, x * 4
        for name, t in (("a", a), ("b", b), ("c", c)):
            t.register_hook(lambda g, name=name: order.append(name))
        (a * b + c).sum().backward()
        return order

    assert run() == run() == run()


def test_saved_tensors_are_freed_after_backward():
    x = sg.tensor(np.ones(4), requires_grad=True)
    y = (x * x).sum()
    node = y.grad_fn.inputs[0].grad_fn
    assert isinstance(node.saved, tuple)
    y.backward()
    assert not isinstance(node.saved, tuple)


def test_no_memory_growth_over_training_steps():
    np.random.seed(0)
    model = sg.nn.Sequential(sg.nn.Linear(8, 16), sg.nn.ReLU(), sg.nn.Linear(16, 3))
    opt = sg.optim.Adam(model.parameters(), lr=1e-2)
    xs = np.random.randn(32, 8).astype(np.float32)
    ys = np.random.randint(0, 3, 32)

    def step():
        opt.zero_grad()
        loss = sg.nn.functional.cross_entropy(model(sg.tensor(xs)), ys)
        loss.backward()
        opt.step()

    for _ in range(50):
        step()
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(1000):
            step()
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert growth < 64 * 1024, f"memory grew by {growth} bytes over 1000 steps"


def test_backward_from_threads_into_one_leaf_loses_no_update():
    """Accumulation into a shared leaf is serialized (NumPy releases the GIL inside ``acc += g``: 8 threads
    lost most of 1e6 element updates)."""
    import threading

    x = sg.tensor(np.zeros(1_000_000), requires_grad=True)
    rounds, workers = 20, 8

    def work():
        for _ in range(rounds):
            x.sum().backward()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(x.grad.data, np.full(1_000_000, float(rounds * workers)))


@pytest.mark.parametrize("leaf", [True, False])
def test_hooks_that_change_the_gradient_wrongly_raise_pytorchs_errors(leaf):
    def run(hook):
        x = sg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 2
        (x if leaf else y).register_hook(hook)
        (y * 3).sum().backward()
        return x.grad

    def shrink(g):
        return sg.tensor([1.0, 2.0])

    with pytest.raises(RuntimeError, match="hook 'shrink' has changed the size of value"):
        run(shrink)
    with pytest.raises(TypeError, match="expected Variable, but hook returned 'int'"):
        run(lambda g: 5)
    with pytest.raises(RuntimeError, match=r"hook .<lambda>. has changed the type of value \(was float32"):
        run(lambda g: sg.tensor(np.ones(3, np.float64)))
    np.testing.assert_allclose(run(lambda g: g * 10).data, np.full(3, 60.0))
