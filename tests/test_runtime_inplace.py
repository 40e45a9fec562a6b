"""In-place operations and version counters, against PyTorch 2.13 on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg

torch = pytest.importorskip("torch")


def test_a_hand_written_sgd_step_updates_the_parameter():
    """``p -= lr * p.grad`` under no_grad rebound ``p`` to a new tensor (no in-place operators): the loop
    never learned. Three steps now match PyTorch's."""
    w, tw = sg.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    param = w
    for _ in range(3):
        ((w * 3.0) ** 2).sum().backward()
        ((tw * 3.0) ** 2).sum().backward()
        with sg.no_grad():
            w -= 0.01 * w.grad
            w.grad.zero_()
        with torch.no_grad():
            tw -= 0.01 * tw.grad
            tw.grad.zero_()
    assert w is param and w.is_leaf and w.requires_grad
    np.testing.assert_allclose(w.data, tw.detach().numpy(), rtol=1e-6)
    assert w._version == 3


def test_every_in_place_method_under_no_grad():
    for name, args in [
        ("add_", (2.0,)),
        ("sub_", (np.array([1.0, 2.0, 3.0], np.float32),)),
        ("mul_", (3.0,)),
        ("div_", (2.0,)),
        ("zero_", ()),
        ("fill_", (7.0,)),
        ("clamp_", (1.5, 2.5)),
    ]:
        x, t = sg.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
        targs = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        getattr(x, name)(*[sg.tensor(a) if isinstance(a, np.ndarray) else a for a in args])
        getattr(t, name)(*targs)
        np.testing.assert_allclose(x.data, t.numpy(), err_msg=name)
        assert x._version == t._version == 1, name
    x, t = sg.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])
    x.copy_(sg.tensor([4.0]))
    x[1] = 9.0
    x += 1
    x *= 2
    t.copy_(torch.tensor([4.0]))
    t[1] = 9.0
    t += 1
    t *= 2
    np.testing.assert_allclose(x.data, t.numpy())
    assert x._version == t._version == 4


def test_pytorchs_errors_for_in_place_operations():
    w = sg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w += 1
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w.zero_()
    i = sg.tensor([1, 2])
    with pytest.raises(
        RuntimeError, match="result type float64 can't be cast to the desired output type int64"
    ):
        i += 1.5


def test_a_saved_tensor_modified_before_backward_is_refused():
    """Backward used the modified values silently (x.grad from the updated w)."""
    x = sg.tensor(np.ones((2, 3)), requires_grad=True)
    w = sg.tensor(np.ones((3, 2)), requires_grad=True)
    y = x @ w
    with sg.no_grad():
        w -= 0.1
    with pytest.raises(
        RuntimeError, match="modified by an inplace operation.*MmBackward, is at version 1; expected"
    ):
        y.sum().backward()
    a = sg.tensor(np.ones(100_000), requires_grad=True)
    b = a * 2
    c = b * b  # large: its node saves b for the vjp kernel
    b.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_in_place_on_a_graph_tensor_is_recorded():
    a, ta = sg.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    b, tb = a * 2, ta * 2
    b.mul_(a)
    tb.mul_(ta)
    b += 3
    tb += 3
    b.sum().backward()
    tb.sum().backward()
    np.testing.assert_allclose(b.data, tb.detach().numpy())
    np.testing.assert_allclose(a.grad.data, ta.grad.numpy())
    buf, w = sg.tensor([0.0, 0.0]), sg.tensor([1.0, 2.0], requires_grad=True)
    buf += w * w  # a constant buffer joins the graph
    buf.sum().backward()
    np.testing.assert_allclose(w.grad.data, [2.0, 4.0])


def _writes_on_the_graph(lib, make):
    """zero_, fill_, copy_, clamp_ and ``[]=`` on tensors in the graph (and into a buffer from one), each
    recorded as its out-of-place operation, as PyTorch records them."""
    x = make([1.0, -2.0, 3.0, 0.5], True)
    v, s = make(7.0, True), make([2.0, 4.0], True)
    outs = []
    y = x * 2
    y.zero_()
    outs.append((y * 3 + x).sum())
    y = x * 2
    y.fill_(v)
    outs.append((y * x).sum())
    y = x * 2
    y[1:3] = s * 3
    outs.append((y * y).sum())
    y = x * 2
    y.clamp_(-1, 1.5)
    outs.append((y * x).sum())
    buf = lib.zeros(4, dtype=lib.float64)
    buf[1] = x[0] * 5
    outs.append((buf * buf).sum())
    y = x * 1
    y.copy_(lib.cat([s, s]))
    outs.append((y * x).sum())
    y = x * 1
    y[[0, 2]] = v
    outs.append((y**2).sum())
    sum(outs).backward()
    return [o.detach().numpy() for o in outs], x.grad.numpy(), v.grad.numpy(), s.grad.numpy()


def test_writes_on_graph_tensors_are_recorded_as_in_pytorch():
    """They raised 'not supported' (sg) where PyTorch records them: the gradients now match PyTorch's."""
    got = _writes_on_the_graph(sg, lambda d, rg: sg.tensor(np.array(d), requires_grad=rg))
    want = _writes_on_the_graph(torch, lambda d, rg: torch.tensor(d, dtype=torch.float64, requires_grad=rg))
    for g, w in zip(got[0], want[0]):
        np.testing.assert_allclose(g, w, rtol=1e-15)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-15)
