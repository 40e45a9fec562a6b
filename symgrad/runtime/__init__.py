"""symgrad's tape runtime: Tensor, autograd and custom functions (``torch.autograd``-style)."""
from .autograd import enable_grad, grad, is_grad_enabled, no_grad
from .function import Function
from .tensor import Tensor, tensor

__all__ = ["Tensor", "tensor", "no_grad", "enable_grad", "is_grad_enabled", "grad", "Function"]
