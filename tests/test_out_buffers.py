"""``out=`` result buffers on forward, vjp and value_and_vjp: results land in the caller's arrays (same values
as fresh results), and every misuse (count, dtype, shape, layout, read-only, overlap, broadcast gradient) is
an ArgumentError naming the function."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg


@sg.function
def blend(x, y):
    return sg.sin(x) * sg.exp(-(y**2)) + sg.log(1 + x**2 * y**2)


@sg.function
def polar(r, theta):
    return r * sg.cos(theta), r * sg.sin(theta)


def _inputs(dtype, n=257):
    rng = np.random.default_rng(0)
    return (
        rng.normal(size=n).astype(dtype),
        rng.normal(size=n).astype(dtype),
        rng.normal(size=n).astype(dtype),
    )


def test_results_are_written_into_the_buffers(backend, dtype):
    x, y, g = _inputs(dtype)
    f = blend.compiled()
    want_out, want_grads = f.value_and_vjp(x, y, g)
    buffers = tuple(np.full_like(x, np.nan) for _ in range(3))
    out, grads = f.value_and_vjp(x, y, g, out=buffers)
    assert out is buffers[0] and grads[0] is buffers[1] and grads[1] is buffers[2]
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(grads[0], want_grads[0])
    np.testing.assert_array_equal(grads[1], want_grads[1])
    fwd = np.empty_like(x)
    assert f(x, y, out=fwd) is fwd
    np.testing.assert_array_equal(fwd, f(x, y))  # the same program: bit for bit
    vjp_out = (np.empty_like(x), np.empty_like(x))
    gx, gy = f.vjp(x, y, g, out=vjp_out)
    assert gx is vjp_out[0] and gy is vjp_out[1]
    np.testing.assert_array_equal(gx, want_grads[0])


def test_multi_output_forward_takes_a_tuple(backend, dtype):
    r, theta, _ = _inputs(dtype)
    f = polar.compiled()
    bufs = (np.empty_like(r), np.empty_like(r))
    a, b = f(r, theta, out=bufs)
    assert a is bufs[0] and b is bufs[1]
    want_a, want_b = f(r, theta)
    np.testing.assert_array_equal(a, want_a)
    np.testing.assert_array_equal(b, want_b)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda x: (np.empty_like(x),), r"out= takes 3 array\(s\) for value_and_vjp; got 1"),
        (lambda x: (np.empty(x.shape, np.float16),) * 3, r"out\[0\] must be a writeable C-contiguous"),
        (
            lambda x: (np.empty(x.size + 1, x.dtype),) + (np.empty_like(x),) * 2,
            r"out\[0\] must be .* shape \(257,\)",
        ),
        (
            lambda x: (np.empty(2 * x.size, x.dtype)[::2],) + (np.empty_like(x), np.empty_like(x)),
            r"out\[0\] must be",
        ),
        (lambda x: (x,) + (np.empty_like(x), np.empty_like(x)), r"out\[0\] overlaps an argument"),
    ],
)
def test_bad_buffers_are_named(backend, bad, message):
    x, y, g = _inputs(np.float64)
    bufs = bad(x)
    if len(bufs) == 3 and bufs[1] is bufs[2]:
        bufs = (bufs[0], np.empty_like(x), np.empty_like(x)) if bufs[0].dtype != np.float16 else bufs
    with pytest.raises(sg.ArgumentError, match=r"blend: " + message):
        blend.compiled().value_and_vjp(x, y, g, out=bufs)


def test_read_only_and_shared_buffers_are_refused(backend):
    x, y, g = _inputs(np.float64)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(sg.ArgumentError, match=r"out\[0\] must be a writeable"):
        blend.compiled()(x, y, out=ro)
    same = np.empty_like(x)
    with pytest.raises(sg.ArgumentError, match=r"out\[1\] overlaps"):
        blend.compiled().vjp(x, y, g, out=(same, same))


def test_broadcast_argument_cannot_take_an_out_buffer(backend):
    x, _, g = _inputs(np.float64)
    with pytest.raises(sg.ArgumentError, match=r"with out=, argument 'y' must have the full shape \(257,\)"):
        blend.compiled().vjp(x, 0.5, g, out=(np.empty_like(x), np.empty_like(x)))
