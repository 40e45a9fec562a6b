"""Random tensors from one module-level NumPy ``Generator``, reseeded by ``manual_seed`` (as in PyTorch).

The streams are NumPy's, not PyTorch's: the same seed gives the same numbers from run to run in symgrad,
not the numbers PyTorch draws. As in PyTorch the generator starts from a fixed seed, so an unseeded program
is reproducible too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad.runtime import dtypes
from symgrad.runtime.factories import leaf, sizes
from symgrad.runtime.tensor import Tensor

#: PyTorch's default seed (``torch.initial_seed()`` in a fresh process)
DEFAULT_SEED = 67280421310721

_state = {"generator": np.random.default_rng(DEFAULT_SEED), "seed": DEFAULT_SEED}


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the generator behind ``rand``, ``randn`` and ``randint``; returns it."""
    _state["generator"] = np.random.default_rng(int(seed))
    _state["seed"] = int(seed)
    return _state["generator"]


def initial_seed() -> int:
    """The seed the generator was last seeded with."""
    return _state["seed"]


def default_generator() -> np.random.Generator:
    """The module-level generator (reseeded by ``manual_seed``)."""
    return _state["generator"]


def _floating(dtype: Any) -> np.dtype:
    dtype = dtypes.resolve(dtype, dtypes.DEFAULT_FLOAT)
    if dtype.kind != "f":
        raise TypeError(f"expected a floating point dtype, got {dtype}")
    return dtype


def rand(
    *size: Any,
    dtype: Any = None,
    requires_grad: bool = False,
    generator: np.random.Generator | None = None,
    device: Any = None,
) -> Tensor:
    """Uniform samples on [0, 1) (float32 unless ``dtype`` says otherwise)."""
    rng = generator or _state["generator"]
    data = rng.random(sizes(size, "rand"), dtype=_floating(dtype))
    return leaf(data, requires_grad, device)


def randn(
    *size: Any,
    dtype: Any = None,
    requires_grad: bool = False,
    generator: np.random.Generator | None = None,
    device: Any = None,
) -> Tensor:
    """Standard normal samples (float32 unless ``dtype`` says otherwise)."""
    rng = generator or _state["generator"]
    data = rng.standard_normal(sizes(size, "randn"), dtype=_floating(dtype))
    return leaf(data, requires_grad, device)


def randint(
    low: int,
    high: int | None = None,
    size: Any = None,
    *,
    dtype: Any = None,
    generator: np.random.Generator | None = None,
    device: Any = None,
) -> Tensor:
    """Integers uniform in [low, high) (``randint(high, size)`` starts at 0); int64 unless given."""
    if size is None:
        low, high, size = 0, low, high
    rng = generator or _state["generator"]
    data = rng.integers(low, high, sizes((size,), "randint"), dtype=np.int64)
    return leaf(data.astype(dtypes.resolve(dtype, dtypes.int64), copy=False), False, device)


def rand_like(t: Any, *, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """``rand`` of ``t``'s shape and (unless given) dtype."""
    return rand(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def randn_like(t: Any, *, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """``randn`` of ``t``'s shape and (unless given) dtype."""
    return randn(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)
