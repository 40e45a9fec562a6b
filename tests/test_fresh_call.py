"""``direct.fresh``: the tape's kernel call that allocates its results in C (NumPy's C API). It must give
what the general path gives, bit for bit (arrays, Python numbers filled out, every result shape), and
refuse, with nothing run, every call it cannot take as it is: the general path then copies, converts or
raises as before."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg


@pytest.fixture(scope="module")
def c_kernels():
    from symgrad.backends.c import direct
    from symgrad.runtime import elementwise

    before = sg.get_backend()
    sg.set_backend("c")
    if direct.fresh() is None:
        sg.set_backend(before)
        pytest.skip("the direct-call extension cannot be built here")
    yield elementwise.primitives()
    sg.set_backend(before)


def _address(fn, program: str, dtype) -> int:
    from symgrad import abi

    kernels = fn._kernel_set()[1]
    name = abi.kernel_symbol(fn.ident, program, abi.DTYPE_SUFFIX[np.dtype(dtype)]) + abi.POINTERS_SUFFIX
    return int(kernels.ffi.cast("uintptr_t", kernels.lib.sg_entry(name.encode())))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("batch", [(), (1,), (10,), (3, 7)], ids=str)
def test_fresh_results_are_the_general_paths(c_kernels, dtype, batch):
    rng = np.random.default_rng(len(batch))
    x = rng.standard_normal(batch).astype(dtype) + 2
    y = rng.standard_normal(batch).astype(dtype)
    cases = [
        ("mul", "value_and_jacobian", (x, y)),
        ("pow", "value_and_jacobian", (x, 2.5)),
        ("sub", "value_and_jacobian", (3, y)),
        ("add", "forward", (x, -0.0)),
        ("div", "value_and_jacobian", (x, float("inf"))),
        ("maximum", "value_and_jacobian", (float("nan"), y)),
        ("mul", "value_and_jacobian", (x, 2**53)),
        ("sin", "value_and_jacobian", (x,)),
        ("exp", "forward", (y,)),
    ]
    for name, program, inputs in cases:
        run = c_kernels[name].kernel(program, np.dtype(dtype))
        fresh = run(inputs, batch)  # (through direct.fresh)
        general = tuple(np.full_like(r, 7) for r in fresh)
        run(inputs, batch, general)  # (given results: the general path)
        for a, b in zip(fresh, general):
            assert a.dtype == dtype and a.flags.c_contiguous and a.flags.owndata
            np.testing.assert_array_equal(a, b)
            assert np.array_equal(np.signbit(a), np.signbit(b))


def test_fresh_refuses_what_it_cannot_take_as_it_is(c_kernels):
    from symgrad.backends.c import direct

    fresh = direct.fresh()
    mul = c_kernels["mul"]
    address = _address(mul, "value_and_jacobian", np.float64)
    tails = ((), (1, 2))
    x = np.linspace(1, 2, 6)
    swapped = x.astype(">f8")
    ok = fresh(address, 2, 4096, np.dtype(np.float64).num, (6,), tails, x, 2.0)
    assert ok is not None and ok[0].shape == (6,) and ok[1].shape == (6, 1, 2)
    np.testing.assert_array_equal(ok[0], x * 2.0)
    refused = [
        (2, 4096, (6,), (x, np.linspace(1, 2, 12)[::2])),  # not contiguous
        (2, 4096, (6,), (x, x.astype(np.float32))),  # another dtype
        (2, 4096, (6,), (x, swapped)),  # byte-swapped
        (2, 4096, (6,), (x, x.view(np.matrix).reshape(1, 6))),  # a subclass (and another shape)
        (2, 4096, (6,), (x, x.reshape(2, 3))),  # another shape
        (2, 4096, (6,), (x, True)),  # a bool is no number here (PyTorch's promotion runs first)
        (2, 4096, (6,), (x, 2**53 + 1)),  # not exact in a double
        (2, 4096, (6,), (x, [1.0] * 6)),
        (2, 6, (6,), (x, x)),  # not fewer than small: the pool's
        (2, 4096, (0,), (np.ones(0), np.ones(0))),  # nothing to run
        (3, 4096, (6,), (x, x)),  # another input count
        (2, 4096, [6], (x, x)),  # a batch that is not a tuple
    ]
    for n_in, small, batch, inputs in refused:
        assert fresh(address, n_in, small, np.dtype(np.float64).num, batch, tails, *inputs) is None
    assert fresh(address, 2, 4096, np.dtype(np.int64).num, (6,), tails, x, x) is None  # not a float kernel
    with pytest.raises(TypeError, match="address, n_inputs"):
        fresh(address, 2)
    run = mul.kernel("value_and_jacobian", np.dtype(np.float64))
    value, jacobian = run((x, 2**53 + 1), (6,))  # refused above: the general path's conversion
    np.testing.assert_array_equal(value, x * np.float64(2**53 + 1))
    with pytest.raises(TypeError, match="kernel takes 2 inputs, got 1"):
        run((x,), (6,))


@pytest.mark.parametrize("backend", ["c", "numpy"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_one_element_operand_broadcasts_as_its_value(backend, dtype):
    """A (1,), (1, 1) or 0-d operand reaches the kernel as its value (a Python number: exact in float32
    too): the results, the gradients summed back to its shape, and the forward without grad are NumPy's
    and PyTorch's, for -0.0, NaN and a float32 value that a float64 would round differently."""
    torch = pytest.importorskip("torch")
    before = sg.get_backend()
    sg.set_backend(backend)
    try:
        x = np.linspace(-1.5, 2.0, 12, dtype=dtype).reshape(3, 4)
        for value in (np.float32(1.1), -0.0, np.nan):
            for shape in [(1,), (1, 1), ()]:
                w = np.full(shape, value, dtype)
                expected = x * w
                t, v = sg.tensor(x, requires_grad=True), sg.tensor(w, requires_grad=True)
                y = t * v
                np.testing.assert_array_equal(y.detach().numpy(), expected)
                with sg.no_grad():
                    np.testing.assert_array_equal((t * v).numpy(), expected)
                y.sum().backward()
                tt, tv = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
                (tt * tv).sum().backward()
                assert v.grad.shape == shape
                np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-5)
                np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
    finally:
        sg.set_backend(before)
