"""symgrad's tape runtime: Tensor, autograd and custom functions (``torch.autograd``-style)."""

from symgrad.runtime.autograd import enable_grad, grad, is_grad_enabled, no_grad
from symgrad.runtime.dtypes import double, float32, float64, int32, int64, long
from symgrad.runtime.factories import (
    arange,
    empty,
    eye,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from symgrad.runtime.function import Function
from symgrad.runtime.grad_mode import inference_mode, set_grad_enabled
from symgrad.runtime.joins import cat, matmul, stack
from symgrad.runtime.rng import initial_seed, manual_seed, rand, rand_like, randint, randn, randn_like
from symgrad.runtime.serialization import load, save
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
    # factories, random tensors, joins (torch.zeros, torch.randn, torch.cat, ...)
    "zeros",
    "ones",
    "full",
    "empty",
    "zeros_like",
    "ones_like",
    "full_like",
    "arange",
    "linspace",
    "eye",
    "manual_seed",
    "initial_seed",
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "cat",
    "stack",
    "matmul",
    # grad mode, saving
    "set_grad_enabled",
    "inference_mode",
    "save",
    "load",
    # dtypes (NumPy dtypes under torch's names)
    "float32",
    "float64",
    "int32",
    "int64",
    "double",
    "long",
]

from symgrad.runtime import sg_math as sg_math  # noqa: E402  (registers sg.exp(tensor) & co. in symgrad.dispatch)
