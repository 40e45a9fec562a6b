"""Layers: ``Linear`` (torch's default init), ``Sequential`` and activation modules."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from symgrad.nn import functional as F
from symgrad.nn.module import Module
from symgrad.nn.parameter import Parameter
from symgrad.runtime.compiled_node import apply_compiled
from symgrad.runtime.tensor import Tensor


class Linear(Module):
    """y = x @ weight.T + bias; weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)) from NumPy's global RNG
    (torch's default: kaiming_uniform with a=sqrt(5)). Seed with ``np.random.seed``."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, dtype: Any = np.float32
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        self.weight = Parameter(np.random.uniform(-bound, bound, (out_features, in_features)).astype(dtype))
        self.bias = Parameter(np.random.uniform(-bound, bound, out_features).astype(dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
        )


class Sequential(Module):
    """Modules applied in order; registered as '0', '1', ... like ``torch.nn.Sequential``."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class Activation(Module):
    """An elementwise activation from a compiled ``@sg.function`` of one argument (one tape node per call)."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        compiled = fn.compiled() if hasattr(fn, "compiled") else fn
        if len(compiled.arg_names) != 1 or compiled.n_outputs != 1:
            raise TypeError(
                f"Activation needs a function of one argument with one output; "
                f"{compiled.name} takes {len(compiled.arg_names)} and returns {compiled.n_outputs}"
            )
        self.fn = compiled

    def forward(self, x: Tensor) -> Tensor:
        return apply_compiled(self.fn, (x,))

    def extra_repr(self) -> str:
        return self.fn.name


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, computed in the stable form."""

    def __init__(self, beta: float = 1.0) -> None:
        super().__init__()
        self.beta = beta

    def forward(self, x: Tensor) -> Tensor:
        return x.softplus() if self.beta == 1 else (x * self.beta).softplus() / self.beta

    def extra_repr(self) -> str:
        return f"beta={self.beta}"
