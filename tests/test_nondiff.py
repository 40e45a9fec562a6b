"""``@sg.function(nondiff=(...))``: arguments that are data get no gradient and no Jacobian columns.

The reference for every value is the same function declared without ``nondiff``: the gradients of the other
arguments, their Jacobian columns and tangents must be exactly what the all-differentiable kernels give."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg
from symgrad.errors import ArgumentError, ModelError

TOL = {"float64": dict(rtol=1e-12, atol=1e-12), "float32": dict(rtol=2e-6, atol=2e-6)}


def _residual(p: sg.Vector(2), w, target: sg.Vector(2)):
    return [w * (sg.exp(p[0]) - target[0]), w * sg.sin(p[1] * target[1])]


residual = sg.function(nondiff=("target",))(_residual)
residual_all = sg.function(_residual)


@sg.function(nondiff="label")
def weighted_softplus(x, label):
    return label * sg.softplus(x)


def _inputs(dtype, n=33):
    rng = np.random.default_rng(7)
    return (
        rng.normal(size=(n, 2)).astype(dtype),
        rng.normal(size=n).astype(dtype),
        rng.normal(size=(n, 2)).astype(dtype),
        rng.normal(size=(n, 2)).astype(dtype),
    )


def test_vjp_gives_none_for_nondiff_and_the_same_other_gradients(backend, dtype):
    p, w, target, cot = _inputs(dtype)
    grads = residual.vjp(p, w, target, cot)
    want = residual_all.vjp(p, w, target, cot)
    assert len(grads) == 3 and grads[2] is None
    for g, ref in zip(grads[:2], want[:2]):
        assert g.dtype == np.dtype(dtype)
        np.testing.assert_allclose(g, ref, **TOL[dtype])
    value, fused = residual.value_and_vjp(p, w, target, cot)
    np.testing.assert_allclose(value, residual_all(p, w, target), **TOL[dtype])
    assert fused[2] is None
    np.testing.assert_allclose(fused[0], want[0], **TOL[dtype])


def test_needs_input_grad_leaves_out_the_unflagged_gradients(backend, dtype):
    """Per call, what ``nondiff`` is per declaration (the tape passes which inputs are tracked tensors): None
    in the place of an unflagged argument, which is then not summed back over its broadcast axes."""
    p, w, target, cot = _inputs(dtype)
    want = residual_all.vjp(p, w[:1], target, cot)  # w broadcast: its gradient is summed to (1,)
    grads = residual_all.vjp(p, w[:1], target, cot, needs_input_grad=(True, False, True))
    assert grads[1] is None and want[1].shape == (1,)
    np.testing.assert_array_equal(grads[0], want[0])
    np.testing.assert_array_equal(grads[2], want[2])
    only_w = residual.vjp(p, w, target, cot, needs_input_grad=(False, True, False))
    assert only_w[0] is None and only_w[2] is None
    np.testing.assert_array_equal(only_w[1], residual.vjp(p, w, target, cot)[1])


def test_jacobian_has_no_columns_for_nondiff(backend, dtype):
    p, w, target, _ = _inputs(dtype)
    value, J = residual.value_and_jacobian(p, w, target)
    _, J_all = residual_all.value_and_jacobian(p, w, target)
    assert J.shape == (len(w), 2, 3)  # [p_0, p_1, w]; target's 2 columns are gone
    np.testing.assert_allclose(J, J_all[..., :3], **TOL[dtype])


def test_jacobian_out_buffers_take_a_strided_home(backend):
    """BA's use: the kernel writes the blocks straight into a preallocated (sparse matrix values) array."""
    p, w, target, _ = _inputs("float64")
    n = len(w)
    values = np.full(n * 6 + 5, np.nan)
    value = np.empty((n, 2))
    got_value, got_J = residual.value_and_jacobian(
        p, w, target, out=(value, values[: 6 * n].reshape(n, 2, 3))
    )
    assert got_value is value and np.shares_memory(got_J, values)
    want_value, want_J = residual.value_and_jacobian(p, w, target)
    np.testing.assert_array_equal(values[: 6 * n].reshape(n, 2, 3), want_J)
    np.testing.assert_array_equal(value, want_value)
    assert np.isnan(values[6 * n :]).all()
    with pytest.raises(ArgumentError, match=r"out\[1\] must be .* shape \(33, 2, 3\)"):
        residual.value_and_jacobian(p, w, target, out=(value, np.empty((n, 2, 5))))


def test_jvp_takes_none_for_nondiff(backend, dtype):
    p, w, target, _ = _inputs(dtype)
    tp, tw = np.ones_like(p), np.full_like(w, 0.5)
    out, tangent = residual.jvp((p, w, target), (tp, tw, None))
    _, want = residual_all.jvp((p, w, target), (tp, tw, np.zeros_like(target)))
    np.testing.assert_allclose(tangent, want, **TOL[dtype])
    with pytest.raises(ArgumentError, match="'target' is declared nondiff; pass None"):
        residual.jvp((p, w, target), (tp, tw, np.zeros_like(target)))
    with pytest.raises(ArgumentError, match="'w' is differentiable; give it a tangent"):
        residual.jvp((p, w, target), (tp, None, None))


def test_vjp_out_buffers_are_for_differentiable_arguments_only(backend):
    p, w, target, cot = _inputs("float64")
    gp, gw = np.empty_like(p), np.empty_like(w)
    grads = residual.vjp(p, w, target, cot, out=(gp, gw))
    assert grads[0] is gp and grads[1] is gw and grads[2] is None
    again = residual.vjp(p, w, target, cot, out=grads)  # a previous result, None included, goes back in
    assert again[0] is gp and again[1] is gw and again[2] is None
    value = np.empty_like(p)
    _, fused = residual.value_and_vjp(p, w, target, cot, out=(value, gp, gw, None))
    assert fused[0] is gp
    with pytest.raises(
        ArgumentError, match="'target' is nondiff and has no gradient; its out= entry must be None"
    ):
        residual.vjp(p, w, target, cot, out=(gp, gw, np.empty_like(target)))
    with pytest.raises(ArgumentError, match="out= takes 2 array"):
        residual.vjp(p, w, target, cot, out=(gp,))


def test_broadcast_nondiff_argument(backend):
    """A per-call constant (one label for the whole batch) broadcasts; only real gradients are summed."""
    x = np.linspace(-3, 3, 11)
    g = np.ones_like(x)
    grads = weighted_softplus.vjp(x, 2.0, g)
    assert grads[1] is None
    np.testing.assert_allclose(grads[0], 2.0 / (1.0 + np.exp(-x)), rtol=1e-12)


def test_tape_gives_no_gradient_to_nondiff_tensor(backend):
    x = sg.tensor(np.array([-1.0, 0.5, 2.0]), requires_grad=True)
    label = sg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    weighted_softplus(x, label).sum().backward()
    np.testing.assert_allclose(x.grad, label.data / (1.0 + np.exp(-x.data)), rtol=1e-12)
    assert label.grad is None


def test_unknown_nondiff_name_is_a_model_error():
    @sg.function(nondiff=("lable",))
    def f(x, label):
        return x * label

    with pytest.raises(ModelError, match="f: nondiff names 'lable', which is not an argument"):
        f.compiled()


def test_manifest_and_generated_sources_say_non_differentiable(backend):
    f = weighted_softplus.compiled()
    assert f.arg_diff == (True, False)
    assert f.derivatives["label"] == "non_differentiable"
    assert 'label: "non_differentiable"' in f.source("yaml")
    assert "grad_label" not in f.source("numpy") and "grad_label" not in f.source("c")


def test_check_skips_nondiff_arguments():
    from symgrad.check import check_function

    assert check_function(residual.compiled(), n=16) == []


@pytest.mark.parametrize("impl", ["function", "custom_op"])
def test_torch_op_passes_no_gradient_to_nondiff(impl):
    torch = pytest.importorskip("torch")
    if impl == "custom_op" and not hasattr(torch.library, "custom_op"):
        pytest.skip("this PyTorch has no torch.library.custom_op")
    op = weighted_softplus.compiled().to_torch(implementation=impl)
    x = torch.linspace(-3, 3, 7, dtype=torch.float64, requires_grad=True)
    label = torch.linspace(1, 2, 7, dtype=torch.float64, requires_grad=True)
    op(x, label).sum().backward()
    torch.testing.assert_close(x.grad, label.detach() * torch.sigmoid(x.detach()))
    # PyTorch: a None gradient from an autograd.Function leaves .grad None; a custom op returns zeros
    assert label.grad is None or not label.grad.any()
    assert torch.autograd.gradcheck(lambda t: op(t, label.detach()), (x.detach().requires_grad_(),))


def test_jax_grad_of_nondiff_argument_is_zero():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    f = weighted_softplus.compiled().to_jax()
    x, label = jnp.linspace(-3.0, 3.0, 7), jnp.linspace(1.0, 2.0, 7)
    gx, glabel = jax.jit(jax.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1)))(x, label)
    np.testing.assert_allclose(gx, label / (1 + np.exp(-x)), rtol=1e-12)
    np.testing.assert_array_equal(glabel, 0.0)


def test_function_with_every_argument_nondiff(backend):
    """Nothing to differentiate: the kernels still build (no gradient slots, a Jacobian with no columns)."""

    @sg.function(nondiff=("x",))
    def constant_exp(x):
        return sg.exp(x)

    x = np.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(constant_exp(x), np.exp(x), rtol=1e-15)
    assert constant_exp.vjp(x, np.ones(5)) == (None,)
    assert constant_exp.jacobian(x).shape == (5, 1, 0)
    _, tangent = constant_exp.jvp((x,), (None,))
    np.testing.assert_array_equal(tangent, 0.0)
