"""The tape's fused gradient accumulation: ``mul_add(acc, g, j[, k])`` (``acc += g * j`` in one C call, from
the direct-call extension; with ``k``, ``j`` is a whole Jacobian and its column k is taken) and the engine's
lone path that uses it for Jacobian-saving ops. The sum must be bit-identical to NumPy's two steps
(``acc += g * j``), any argument the call cannot take must leave ``acc`` untouched and return False, and
every gradient must stay PyTorch's (rtol: float64 1e-12, float32 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg
from symgrad.backends import fused

pytestmark = pytest.mark.usefixtures("c_backend")


@pytest.fixture
def c_backend():
    before = sg.get_backend()
    sg.set_backend("c")
    yield
    sg.set_backend(before)


@pytest.fixture
def mul_add():
    from symgrad.backends.c import direct

    if direct.caller() is None:
        pytest.skip("the direct-call extension cannot be built here")
    return fused.MUL_ADD[0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 3, 10, 17, 1000, 65536])
def test_mul_add_rounds_as_numpy_does(mul_add, dtype, n):
    rng = np.random.default_rng(n)
    acc, g, j = (rng.standard_normal(n).astype(dtype) * 10.0 ** rng.integers(-3, 4, n) for _ in range(3))
    expected = acc + g * j
    assert mul_add(acc, g, j) is True
    assert np.array_equal(acc, expected)  # bit for bit: no fused multiply-add contraction


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mul_add_reads_a_jacobians_column(mul_add, dtype):
    jacobian = np.arange(60, dtype=dtype).reshape(3, 5, 1, 4) / 7  # batch (3, 5), one output, 4 inputs
    g = np.linspace(-1, 1, 15).astype(dtype).reshape(3, 5)
    for k in range(4):
        column = jacobian[..., 0, k]  # equally spaced, not contiguous
        acc = np.ones((3, 5), dtype)
        assert mul_add(acc, g, column) is True
        assert np.array_equal(acc, 1 + g * column)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("width", [1, 2, 3])
def test_mul_add_takes_column_k_of_a_whole_jacobian(mul_add, dtype, width):
    """The tape saves the kernel's J (batch + (1, width)) whole; ``k`` picks input k's column, bit for bit
    as NumPy's ``acc + g * J[..., 0, k]``."""
    rng = np.random.default_rng(width)
    jacobian = rng.standard_normal((3, 5, 1, width)).astype(dtype)
    g = rng.standard_normal((3, 5)).astype(dtype)
    for k in range(width):
        acc = rng.standard_normal((3, 5)).astype(dtype)
        expected = acc + g * jacobian[..., 0, k]
        assert mul_add(acc, g, jacobian, k) is True
        assert np.array_equal(acc, expected)


def test_mul_add_refuses_a_column_it_cannot_take(mul_add):
    acc = np.ones(4)
    jacobian = np.arange(8.0).reshape(4, 1, 2)
    refused = [
        (acc, np.ones(4), jacobian, 2),  # no column 2 of two
        (acc, np.ones(4), jacobian, -1),
        (acc, np.ones(4), np.ones(9), 0),  # not a whole number of values per element
        (acc, np.ones(4), np.ones((4, 1, 4))[..., :2], 0),  # J not contiguous
        (np.ones(1), np.ones(4), jacobian, 0),  # g does not have acc's size (a broadcast input)
        (acc, np.ones(4, np.float32), jacobian, 0),  # dtypes differ
    ]
    for args in refused:
        before = args[0].copy()
        assert mul_add(*args) is False
        assert np.array_equal(args[0], before)
    whole = np.zeros(12)
    assert mul_add(whole[:4], np.ones(4), whole[4:].reshape(4, 1, 2), 0) is True  # apart: taken
    assert mul_add(whole[:4], np.ones(4), whole[2:10].reshape(4, 1, 2), 0) is False  # J overlaps acc
    with pytest.raises(TypeError):
        mul_add(acc, np.ones(4), jacobian, "0")


def test_mul_add_refuses_what_it_cannot_take_and_leaves_acc_untouched(mul_add):
    acc = np.ones(4)
    frozen = np.ones(4)
    frozen.flags.writeable = False
    mixed = np.ones((2, 4))[:, :2]  # a 2x2 view whose rows are apart: not equally spaced
    refused = [
        (acc, np.ones(4, np.float32), np.ones(4)),  # dtypes differ
        (acc, np.ones(3), np.ones(3)),  # sizes differ
        (np.ones(8)[::2], np.ones(4), np.ones(4)),  # acc not contiguous
        (frozen, np.ones(4), np.ones(4)),  # acc read-only
        (acc, mixed, np.ones(4)),  # g not equally spaced
        (acc, np.ones(4)[::-1], np.ones(4)),  # negative stride
        (np.ones(4, np.int64), np.ones(4, np.int64), np.ones(4, np.int64)),  # not float
        (np.ones(0), np.ones(0), np.ones(0)),  # nothing to add
        (acc, [1.0] * 4, np.ones(4)),  # not a buffer
    ]
    for args in refused:
        before = args[0].copy()
        assert mul_add(*args) is False
        assert np.array_equal(args[0], before)
    with pytest.raises(TypeError, match="three arrays"):
        mul_add(acc, acc)


def test_mul_add_refuses_overlapping_memory_but_takes_acc_itself(mul_add):
    base = np.arange(8.0)
    assert mul_add(base[:4], base[2:6], np.ones(4)) is False  # g overlaps acc, shifted
    assert np.array_equal(base, np.arange(8.0))
    acc = np.arange(4.0)
    assert mul_add(acc, acc, np.full(4, 2.0)) is True  # acc += acc * 2: each element reads its own
    assert np.array_equal(acc, np.arange(4.0) * 3)


@pytest.fixture
def swap():
    """``swap(f)``: ``fused.MUL_ADD[0] = f`` until the test ends."""
    before = fused.MUL_ADD[0]
    yield lambda f: fused.MUL_ADD.__setitem__(0, f)
    fused.MUL_ADD[0] = before


def _counting(swap) -> list:
    calls = []
    real = fused.MUL_ADD[0]

    def counted(*args):
        done = real(*args)
        calls.append(done)
        return done

    swap(counted)
    return calls


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_lone_ops_gradients_accumulate_through_the_fused_call(mul_add, swap, dtype):
    torch = pytest.importorskip("torch")
    rtol = {"float64": 1e-12, "float32": 1e-5}[dtype]
    a, b = np.linspace(0.5, 1.5, 10, dtype=dtype), np.linspace(1.0, 2.0, 10, dtype=dtype)
    x, w = sg.tensor(a, requires_grad=True), sg.tensor(b, requires_grad=True)
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    seed = np.linspace(-1, 1, 10, dtype=dtype)
    calls = _counting(swap)
    for _ in range(3):  # the first call makes each .grad, the others add into it in place
        (x * w).backward(sg.tensor(seed))
        x.sin().backward(sg.tensor(seed))
        (x / 3.0).backward(sg.tensor(seed))
        (tx * tw).backward(torch.tensor(seed))
        tx.sin().backward(torch.tensor(seed))
        (tx / 3.0).backward(torch.tensor(seed))
    assert calls == [True] * (2 + 2 * 4)  # every accumulation once a .grad exists: 2, then 4 a round
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=rtol)


def test_the_fused_sum_equals_numpys_accumulation(mul_add, swap):
    rng = np.random.default_rng(5)
    a, b, s = (rng.standard_normal(33) for _ in range(3))
    grads = []
    for on in (True, False):
        swap(mul_add if on else None)
        x, w = sg.tensor(a, requires_grad=True), sg.tensor(b, requires_grad=True)
        for _ in range(4):
            (x * w).backward(sg.tensor(s))
            x.exp().backward(sg.tensor(s))
        grads.append((x.grad.numpy().copy(), w.grad.numpy().copy()))
    assert all(np.array_equal(p, q) for p, q in zip(*grads))


def test_the_lone_path_falls_back_where_the_fused_call_cannot_add(mul_add, swap):
    """A read-only ``.grad``, one of another dtype, a leaf broadcast against another, the seed that is the
    ``.grad`` itself, a hook on a leaf: the same values as PyTorch's."""
    torch = pytest.importorskip("torch")
    calls = _counting(swap)
    x = sg.tensor(np.linspace(0.5, 1.5, 6), requires_grad=True)
    tx = torch.tensor(np.linspace(0.5, 1.5, 6), requires_grad=True)
    x.grad = sg.tensor(np.ones(6))
    x.grad.data.flags.writeable = False  # not addable in place: a new .grad
    x.sin().backward(sg.tensor(np.ones(6)))
    assert calls == [False]
    np.testing.assert_allclose(x.grad.numpy(), 1 + np.cos(np.linspace(0.5, 1.5, 6)), rtol=1e-12)
    w1 = sg.tensor(np.array([1.5]), requires_grad=True)  # broadcast: summed back, NumPy's path
    tw1 = torch.tensor(np.array([1.5]), requires_grad=True)
    for _ in range(2):
        (x * w1).backward(sg.tensor(np.full(6, 2.0)))
        (tx * tw1).backward(torch.full((6,), 2.0, dtype=torch.float64))
    np.testing.assert_allclose(w1.grad.numpy(), tw1.grad.numpy(), rtol=1e-12)
    y = sg.tensor(np.linspace(1, 2, 6), requires_grad=True)
    y.grad = sg.tensor(np.full(6, 0.5))
    y.exp().backward(y.grad)  # the seed is the .grad it adds to
    np.testing.assert_allclose(y.grad.numpy(), 0.5 + 0.5 * np.exp(np.linspace(1, 2, 6)), rtol=1e-12)
    seen = []
    z = sg.tensor(np.linspace(1, 2, 6), requires_grad=True)
    z.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    z.grad = sg.tensor(np.zeros(6))
    (z * 3.0).backward(sg.tensor(np.ones(6)))
    assert np.array_equal(seen[0], np.full(6, 3.0))
    np.testing.assert_allclose(z.grad.numpy(), np.full(6, 6.0), rtol=1e-12)


def test_the_lone_path_checks_versions_after_any_in_place_op(mul_add, swap):
    """Once any buffer was modified in place (an optimizer's step), the lone path still runs, and still
    refuses an input modified since the op saved it, with PyTorch's error."""
    calls = _counting(swap)
    scratch = sg.tensor(np.zeros(3))
    scratch.add_(1.0)  # some in-place op: version counting is on from now on
    x = sg.tensor(np.linspace(0.5, 1.5, 4), requires_grad=True)
    x.grad = sg.tensor(np.zeros(4))
    x.exp().backward(sg.tensor(np.ones(4)))
    assert calls == [True]
    np.testing.assert_allclose(x.grad.numpy(), np.exp(np.linspace(0.5, 1.5, 4)), rtol=1e-12)
    a = sg.tensor(np.linspace(1, 2, 4))
    y = x * a
    with sg.no_grad():
        a.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward(sg.tensor(np.ones(4)))


def test_mul_add_takes_a_broadcast_gradient_but_not_a_stretched_column(mul_add):
    """A reduction's backward hands on its gradient broadcast (spacing 0): taken read-only, bit for bit.
    A column stretched along the inner axis is not equally spaced: refused."""
    g = np.broadcast_to(np.float64(0.1), (3, 5))
    j = np.linspace(-2, 2, 15).reshape(3, 5)
    acc = np.full((3, 5), 0.7)
    expected = acc + g * j
    assert mul_add(acc, g, j) is True
    assert np.array_equal(acc, expected)
    stretched = np.broadcast_to(np.arange(3.0)[:, None], (3, 5))  # strides (8, 0)
    before = acc.copy()
    assert mul_add(acc, stretched, j) is False
    assert np.array_equal(acc, before)
    assert mul_add(np.broadcast_to(np.zeros(1), (15,)), np.ones(15), np.ones(15)) is False  # acc: no


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_chains_last_node_accumulates_through_the_fused_call(mul_add, swap, dtype):
    """``f(x).sum().backward()``: the chain's last node (its inputs are leaves) takes the lone op's path;
    where a leaf already got a gradient from another node of the chain, or under ``sg.grad``, it does
    not. Every gradient is PyTorch's."""
    torch = pytest.importorskip("torch")
    rtol = {"float64": 1e-12, "float32": 1e-5}[dtype]
    a, b = np.linspace(0.5, 1.5, 7, dtype=dtype), np.linspace(1.0, 2.0, 7, dtype=dtype)
    x, w = sg.tensor(a, requires_grad=True), sg.tensor(b, requires_grad=True)
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    calls = _counting(swap)
    for _ in range(3):
        x.sin().sum().backward()
        (x * w).exp().sum().backward()
        tx.sin().sum().backward()
        (tx * tw).exp().sum().backward()
    assert calls == [True] * (1 + 2 * 3)  # once a .grad exists: x in round 1, then 3 a round
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=rtol)
    calls.clear()
    (x.sin() * x).sum().backward()  # x reaches the leaves first through the product: summed, then added
    (tx.sin() * tx).sum().backward()
    (gx,) = sg.grad(x.cos().sum(), x)
    (tgx,) = torch.autograd.grad(tx.cos().sum(), tx)
    assert calls == []
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=rtol)


@pytest.fixture
def mul_add_sum(mul_add):
    return fused.MUL_ADD_SUM[0]


LEADING = [  # (output shape, input shape): the summed axes lead
    ((10,), (1,)),
    ((5,), ()),
    ((129,), (1,)),
    ((4096,), (1,)),
    ((3, 10), (10,)),
    ((3, 10), (1,)),
    ((3, 10), ()),
    ((100, 2), (2,)),
    ((2, 100), (1, 100)),
    ((2, 3, 4), (3, 4)),
    ((2, 3, 4), (4,)),
    ((4, 1, 6), (6,)),
    ((300, 1), (1,)),
    ((7, 300), (1, 1)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes", LEADING, ids=str)
def test_mul_add_sum_reduces_as_numpy_does(mul_add_sum, dtype, shapes):
    """A broadcast input's gradient, ``acc += sum_to_shape(g * J[..., 0, k], shape)``, bit for bit: NumPy
    adds whole rows in order from 0.0, or sums everything pairwise (blocks of 8, halves past 128)."""
    from symgrad.compiled.arguments import leading_sum, sum_to_shape

    out_shape, shape = shapes
    assert leading_sum(out_shape, shape)
    rng = np.random.default_rng(len(out_shape) * 1000 + sum(out_shape))
    for width in (1, 2):
        g = (rng.standard_normal(out_shape) * 10.0 ** rng.integers(-6, 7, out_shape)).astype(dtype)
        jacobian = rng.standard_normal((*out_shape, 1, width)).astype(dtype)
        for k in range(width):
            acc = rng.standard_normal(shape).astype(dtype)
            expected = acc + sum_to_shape(g * jacobian[..., 0, k], shape)
            assert mul_add_sum(acc, g, jacobian, k) is True
            assert np.array_equal(acc, expected)
    zeros = np.full(out_shape, -0.0, dtype)  # NumPy's sum starts from +0.0: -0.0 terms give +0.0
    acc = np.full(shape, -0.0, dtype)
    expected = acc + sum_to_shape(zeros * np.ones(out_shape, dtype), shape)
    assert mul_add_sum(acc, zeros, np.ones((*out_shape, 1, 1), dtype), 0) is True
    assert np.array_equal(np.signbit(acc), np.signbit(expected)) and np.array_equal(acc, expected)


def test_mul_add_sum_takes_a_broadcast_seed_and_special_values(mul_add_sum):
    from symgrad.compiled.arguments import sum_to_shape

    g = np.broadcast_to(np.float64(0.5), (3, 10))  # a reduction's backward hands this on
    jacobian = np.linspace(-1, 1, 60).reshape(3, 10, 1, 2)
    jacobian[1, 3, 0, 1] = np.inf
    jacobian[2, 4, 0, 1] = np.nan
    for shape in [(10,), (1,)]:
        acc = np.zeros(shape)
        expected = acc + sum_to_shape(g * jacobian[..., 0, 1], shape)
        assert mul_add_sum(acc, g, jacobian, 1) is True
        np.testing.assert_array_equal(acc, expected)  # (NaN where NumPy has NaN)


def test_mul_add_sum_refuses_what_it_cannot_take(mul_add_sum):
    g, jacobian = np.ones((3, 4)), np.ones((3, 4, 1, 2))
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    base = np.zeros(40)
    refused = [
        (np.zeros((3, 4)), g, jacobian, 0),  # nothing summed: mul_add's job
        (np.zeros(5), g, jacobian, 0),  # 12 values are not whole rows of 5
        (np.zeros(4, np.float32), g, jacobian, 0),  # dtypes differ
        (np.zeros(4), g, np.ones((3, 4, 1, 4))[..., :2], 0),  # J not contiguous
        (np.zeros(4), g, jacobian, 2),  # no column 2 of two
        (frozen, g, jacobian, 0),  # read-only
        (base[:4], base[4:16].reshape(3, 4), jacobian, 0),  # apart: taken (checked below)
        (base[:4], base[2:14].reshape(3, 4), jacobian, 0),  # g overlaps acc
    ]
    for i, args in enumerate(refused):
        before = args[0].copy()
        done = mul_add_sum(*args)
        assert done is (i == 6)
        if not done:
            assert np.array_equal(args[0], before)
    with pytest.raises(TypeError, match="column k"):
        mul_add_sum(np.zeros(4), g, jacobian)


def test_leading_sum_says_which_broadcasts_numpy_sums_by_rows():
    from symgrad.compiled.arguments import leading_sum

    assert all(leading_sum(*shapes) for shapes in LEADING)
    assert not leading_sum((3, 10), (3, 1))  # the summed axis comes after a kept one
    assert not leading_sum((2, 3, 4), (2, 1, 4))
    assert not leading_sum((2, 3, 4), (1, 3, 1))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_broadcast_ops_accumulate_through_the_fused_sum(mul_add, dtype):
    """``x * w(1,)``, a bias added over a batch: once ``.grad`` exists, each broadcast input's gradient is
    summed and added in one call, the same bits as NumPy's path, and PyTorch's values."""
    torch = pytest.importorskip("torch")
    rtol = {"float64": 1e-12, "float32": 1e-5}[dtype]
    rng = np.random.default_rng(11)
    a = rng.standard_normal((3, 10)).astype(dtype)
    s, b = rng.standard_normal(1).astype(dtype), rng.standard_normal(10).astype(dtype)
    seed = rng.standard_normal((3, 10)).astype(dtype)
    calls = []
    real = fused.MUL_ADD_SUM[0]
    grads = []
    for on in (True, False):
        fused.MUL_ADD_SUM[0] = (lambda *args: calls.append(real(*args)) or calls[-1]) if on else None
        try:
            x, w, c = (sg.tensor(v, requires_grad=True) for v in (a, s, b))
            for _ in range(3):
                (x * w).backward(sg.tensor(seed))
                (x + c).backward(sg.tensor(seed))
                (x * w).sum().backward()
        finally:
            fused.MUL_ADD_SUM[0] = real
        grads.append([t.grad.numpy().copy() for t in (x, w, c)])
    assert calls == [True] * 7  # w's .grad exists after the first product, c's after its first sum
    assert all(np.array_equal(p, q) for p, q in zip(*grads))
    tx, tw, tc = (torch.tensor(v, requires_grad=True) for v in (a, s, b))
    for _ in range(3):
        (tx * tw).backward(torch.tensor(seed))
        (tx + tc).backward(torch.tensor(seed))
        (tx * tw).sum().backward()
    for mine, theirs in zip(grads[0], (tx, tw, tc)):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=rtol, atol=rtol)
