"""Layers: ``Linear`` (torch's default init), ``Sequential``, activations, ``Dropout``, ``LayerNorm`` and
``Embedding``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from symgrad.nn import functional as F
from symgrad.nn.module import Module
from symgrad.nn.parameter import Parameter
from symgrad.runtime.compiled_node import apply_compiled
from symgrad.runtime.rng import default_generator
from symgrad.runtime.tensor import Tensor


class Linear(Module):
    """y = x @ weight.T + bias; weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)) (torch's default: kaiming_uniform
    with a=sqrt(5)), drawn from symgrad's generator: seed with ``sg.manual_seed``."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, dtype: Any = np.float32
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0
        rng = default_generator()
        self.weight = Parameter(rng.uniform(-bound, bound, (out_features, in_features)).astype(dtype))
        self.bias = Parameter(rng.uniform(-bound, bound, out_features).astype(dtype)) if bias else None

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


class GELU(Module):
    """x * Phi(x) (``approximate='tanh'``: PyTorch's tanh approximation), a compiled symgrad function."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """x * sigmoid(x), a compiled symgrad function."""

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Dropout(Module):
    """Zeroes elements with probability ``p`` while ``training`` (scaling the rest by 1/(1-p)); the identity
    after ``eval()``."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class LayerNorm(Module):
    """Normalizes over the last dimensions ``normalized_shape``; learnable ``weight`` (ones) and ``bias``
    (zeros) when ``elementwise_affine``."""

    def __init__(
        self,
        normalized_shape: Any,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        dtype: Any = np.float32,
    ) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        self.has_bias = bias
        self.weight = Parameter(np.ones(shape, dtype)) if elementwise_affine else None
        self.bias = Parameter(np.zeros(shape, dtype)) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        affine = f"elementwise_affine={self.elementwise_affine}, bias={self.has_bias}"
        return f"{self.normalized_shape}, eps={self.eps}, {affine}"


class Embedding(Module):
    """A lookup table: ``weight`` (num_embeddings, embedding_dim) ~ N(0, 1) from symgrad's generator
    (``sg.manual_seed``); the row ``padding_idx`` starts at zero and gets no gradient."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        dtype: Any = np.float32,
    ) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        weight = default_generator().standard_normal((num_embeddings, embedding_dim)).astype(dtype)
        if padding_idx is not None:
            weight[padding_idx] = 0
        self.weight = Parameter(weight)

    def forward(self, indices: Any) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"
