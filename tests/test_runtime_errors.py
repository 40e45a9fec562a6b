"""Every runtime error a PyTorch user would search for keeps PyTorch's wording."""

from __future__ import annotations

import re

import numpy as np
import pytest

import symgrad as sg


def raises(message: str):
    return pytest.raises(RuntimeError, match=re.escape(message))


def test_backward_on_a_tensor_that_does_not_require_grad():
    with raises("element 0 of tensors does not require grad and does not have a grad_fn"):
        sg.tensor([1.0, 2.0]).sum().backward()


def test_second_backward_without_retain_graph():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with raises("Trying to backward through the graph a second time") as info:
        y.backward()
    assert "Specify retain_graph=True if you need to backward through the graph a second time" in str(
        info.value
    )


def test_second_backward_through_a_custom_function_with_saved_tensors():
    class Double(sg.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            ctx.saved_tensors
            return grad * 2

    x = sg.tensor([1.0], requires_grad=True)
    y = Double.apply(x).sum()
    y.backward()
    with raises("Trying to backward through the graph a second time"):
        y.backward()


def test_implicit_gradient_needs_a_scalar_output():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    with raises("grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()


def test_seed_of_the_wrong_shape():
    x = sg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with raises("Mismatch in shape: grad_output[0] has a shape of (2,) and output[0] has a shape of (3,)."):
        (x * 2).backward(sg.tensor([1.0, 1.0]))


def test_integer_tensors_cannot_require_grad():
    with raises("Only Tensors of floating point and complex dtype can require gradients"):
        sg.tensor([1, 2], requires_grad=True)
    t = sg.tensor([1, 2])
    with raises("Only Tensors of floating point and complex dtype can require gradients"):
        t.requires_grad = True


class OneGrad(sg.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_custom_backward_returning_the_wrong_number_of_gradients():
    x = sg.tensor([1.0, 2.0], requires_grad=True)
    with raises("function OneGradBackward returned an incorrect number of gradients (expected 2, got 1)"):
        OneGrad.apply(x, x).sum().backward()


class BadShape(sg.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def backward(ctx, grad):
        return grad, sg.tensor(np.ones((3, 4), np.float32))


def test_custom_backward_returning_a_gradient_of_the_wrong_shape():
    y = sg.tensor(np.ones(5), requires_grad=True)
    with raises(
        "Function BadShapeBackward returned an invalid gradient at index 1 - got [3, 4] but expected shape "
        "compatible with [5]"
    ):
        BadShape.apply(sg.tensor(np.ones(5)), y).sum().backward()


def test_custom_backward_gradient_that_broadcasts_is_summed():
    class Broad(sg.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, grad):
            return sg.tensor(np.ones((3, 4), np.float32))

    x = sg.tensor(np.ones(4), requires_grad=True)
    Broad.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 3.0)


def test_grad_of_an_unused_input():
    x = sg.tensor([1.0], requires_grad=True)
    unused = sg.tensor([1.0], requires_grad=True)
    with raises(
        "One of the differentiated Tensors appears to not have been used in the graph. "
        "Set allow_unused=True if this is the desired behavior."
    ):
        sg.grad((x * 2).sum(), [x, unused])
    gx, gu = sg.grad((x * 2).sum(), [x, unused], allow_unused=True)
    assert gu is None and gx.item() == 2


def test_broadcast_failure():
    with raises("The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"):
        sg.tensor([1.0, 2.0, 3.0]) + sg.tensor([1.0, 2.0, 3.0, 4.0])
    with raises("The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1"):
        sg.tensor(np.ones((2, 3))) * sg.tensor(np.ones(4))


def test_matmul_shape_mismatch():
    with raises("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"):
        sg.tensor(np.ones((2, 3))) @ sg.tensor(np.ones((4, 5)))


def test_non_leaf_requires_grad_cannot_change():
    y = sg.tensor([1.0], requires_grad=True) * 2
    with raises("you can only change requires_grad flags of leaf variables."):
        y.requires_grad = False


def test_numpy_of_a_tensor_that_requires_grad():
    x = sg.tensor([1.0], requires_grad=True)
    with raises("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."):
        x.numpy()
    assert x.detach().numpy()[0] == 1.0


def test_item_of_a_tensor_with_several_elements():
    with raises("a Tensor with 2 elements cannot be converted to Scalar"):
        sg.tensor([1.0, 2.0]).item()


def test_compiled_primitive_rejects_unsupported_dtypes_by_name():
    with pytest.raises(sg.ArgumentError, match="exp"):  # (an integer tensor becomes float32, as in PyTorch)
        sg.tensor([1 + 2j, 2]).exp()
