"""The same programs through symgrad's runtime and PyTorch eager give the same values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(7)


def both(f, *arrays):
    """Run f on symgrad and torch tensors (float64); return (values, grads) of each."""
    ours = [sg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_s, out_t = f(ours, sg), f(theirs, torch)
    seed = RNG.normal(size=out_s.shape)
    out_s.backward(sg.tensor(seed))
    out_t.backward(torch.tensor(seed))
    return (
        (out_s.data, [t.grad.data for t in ours]),
        (out_t.detach().numpy(), [t.grad.numpy() for t in theirs]),
    )


def assert_same(f, *arrays, rtol=1e-10, atol=1e-12):
    (vs, gs), (vt, gt) = both(f, *arrays)
    np.testing.assert_allclose(vs, vt, rtol=rtol, atol=atol)
    for a, b in zip(gs, gt):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def n(*shape):
    return RNG.normal(size=shape)


PROGRAMS = {
    "arith": (lambda t, m: (t[0] * t[1] - t[0] / (t[1] ** 2 + 1.0) + 2.0 * t[0]) ** 2, (3, 4), (4,)),
    "unary": (
        lambda t, m: t[0].exp().sin() + t[0].tanh() * t[0].sigmoid() + (t[0] * t[0] + 1).log().sqrt(),
        (3, 4),
    ),
    "relu_abs": (
        lambda t, m: (
            t[0].relu() + t[0].abs() - t[0].softplus()
            if m is sg
            else t[0].relu() + t[0].abs() - torch.nn.functional.softplus(t[0])
        ),
        (5,),
    ),
    "matmul": (lambda t, m: (t[0] @ t[1]).tanh() @ t[2], (2, 3, 4), (4, 5), (5,)),
    "reductions": (
        lambda t, m: t[0].sum(1, keepdims=True) * t[0].mean(0) + (t[0].max() if m is sg else t[0].amax()),
        (3, 4),
    ),
    "indexing": (lambda t, m: t[0][1:, [0, 2, 2]] * t[0][0, :3], (3, 4)),
    "reshape_T": (lambda t, m: t[0].reshape(4, 3).T @ t[0].reshape(3, 4).T, (2, 6)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_agree_with_torch(name):
    f, *shapes = PROGRAMS[name]
    assert_same(f, *[n(*s) for s in shapes])


def test_kinks_agree_with_torch():
    x = np.array([-1.0, 0.0, 1.0])
    assert_same(lambda t, m: t[0].relu() + t[0].abs() + t[0].sign() * 3, x)
    assert_same(lambda t, m: t[0].maximum(t[1]) + t[0].minimum(t[1]), x, np.array([0.0, 0.0, 2.0]))


def test_softmax_losses_agree_with_torch():
    logits, labels = n(6, 5), RNG.integers(0, 5, 6)
    F, TF = sg.nn.functional, torch.nn.functional
    for reduction in ("mean", "sum", "none"):
        assert_same(
            lambda t, m: (
                F.cross_entropy(t[0], labels, reduction=reduction)
                if m is sg
                else TF.cross_entropy(t[0], torch.tensor(labels), reduction=reduction)
            ),
            logits,
        )
    assert_same(lambda t, m: (F if m is sg else TF).softmax(t[0], dim=1), logits)
    assert_same(lambda t, m: (F if m is sg else TF).log_softmax(t[0], dim=0), logits)
    assert_same(lambda t, m: (F if m is sg else TF).mse_loss(t[0], t[1]), logits, n(6, 5))
    assert_same(lambda t, m: (F if m is sg else TF).linear(t[0], t[1], t[2]), n(2, 3, 4), n(5, 4), n(5))


def test_custom_function_agrees_with_torch():
    def make(base):
        class Cube(base):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 3 * x * x * g

        return Cube

    ours, theirs = make(sg.Function), make(torch.autograd.Function)
    assert_same(lambda t, m: (ours if m is sg else theirs).apply(t[0]).sin(), n(4))


def test_second_order_through_matmul_agrees_with_torch():
    a, v = n(3, 2), n(3, 2)
    results = []
    for m in (sg, torch):
        x = m.tensor(a, requires_grad=True)
        (g,) = (
            m.autograd.grad((x @ x.T).sum(), x, create_graph=True)
            if m is torch
            else sg.grad((x @ x.T).sum(), x, create_graph=True)
        )
        (hv,) = (torch.autograd.grad if m is torch else sg.grad)((g * m.tensor(v)).sum(), x)
        results.append(hv.detach().numpy() if m is torch else hv.data)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_along_a_dim_return_values_and_indices(dim, keepdim):
    """``values, indices = t.max(dim=1)`` unpacked the two row maxima of a 2-row batch; now (values, indices)
    as in PyTorch, the gradient going to the index returned."""
    a = np.array([[1.0, 3.0, 3.0], [5.0, 2.0, 5.0]])
    for op in ("max", "min"):
        x, t = sg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        values, indices = getattr(x, op)(dim=dim, keepdim=keepdim)
        t_values, t_indices = getattr(t, op)(dim=dim, keepdim=keepdim)
        np.testing.assert_array_equal(values.data, t_values.detach().numpy())
        np.testing.assert_array_equal(indices.data, t_indices.numpy())
        assert indices.data.dtype == np.int64 and getattr(x, op)(dim).values is not None
        weights = np.arange(1.0, 1 + values.data.size).reshape(values.data.shape)
        (values * sg.tensor(weights)).sum().backward()
        (t_values * torch.tensor(weights)).sum().backward()
        np.testing.assert_array_equal(x.grad.data, t.grad.numpy())


def test_argmax_argmin_amax_and_elementwise_max_as_in_pytorch():
    a = np.array([[1.0, 3.0, 3.0], [5.0, 2.0, 5.0]])
    x, t = sg.tensor(a), torch.tensor(a)
    assert x.argmax().data == t.argmax().item() and x.argmin().data == t.argmin().item()
    np.testing.assert_array_equal(x.argmax(1).data, t.argmax(1).numpy())
    np.testing.assert_array_equal(x.argmin(dim=0, keepdim=True).data, t.argmin(dim=0, keepdim=True).numpy())
    other = np.full((2, 3), 4.0)
    np.testing.assert_array_equal(x.max(sg.tensor(other)).data, t.max(torch.tensor(other)).numpy())
    x, t = sg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    x.amax(1).sum().backward()
    t.amax(1).sum().backward()
    np.testing.assert_array_equal(x.grad.data, t.grad.numpy())
