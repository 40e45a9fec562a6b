"""symgrad's tape runtime: Tensor, autograd and custom functions (``torch.autograd``-style)."""

from symgrad.runtime.autograd import enable_grad, grad, is_grad_enabled, no_grad
from symgrad.runtime.function import Function
from symgrad.runtime.tensor import Tensor, as_tensor, from_numpy, tensor

__all__ = [
    "Tensor",
    "tensor",
    "from_numpy",
    "as_tensor",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "grad",
    "Function",
]
