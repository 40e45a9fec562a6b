"""The ``sg.`` math functions on Tensors (``sg.exp(t)``, ``sg.maximum(t, 0)``, ``sg.where(t > 0, t, 0)``), as
``torch.exp`` works on tensors: one tape node each, differentiable.

Registered in ``symgrad.dispatch`` for ``Tensor``. A function the runtime has as a primitive of its own
(``elementwise_model.py``: ``exp``, ``relu``, ``maximum``, ...) runs that primitive, as the Tensor method
does; any other (``erf``, ``atan2``, ``where``, ``clamp``, ...) runs the compiled ``sg.`` function
(``symgrad.compiled.elementwise``) as one tape node. Boolean and integer tensors (a condition, integer data)
join as constants of the float tensors' dtype (float32 beside numbers only, PyTorch's default).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from symgrad import dispatch
from symgrad.compiled.elementwise import as_floats, elementwise, split_integers
from symgrad.runtime.elementwise import call, primitives
from symgrad.runtime.tensor import Tensor


def _constant(value: Any) -> Any:
    """A boolean or integer tensor as its array (it never requires grad), any other value as it is."""
    if isinstance(value, Tensor) and value.data.dtype.kind in "biu":
        return value.data
    return value


def apply(name: str, args: tuple) -> Any:
    """``sg.<name>(*args)`` with a Tensor among ``args``: a Tensor, recorded on the tape."""
    own = primitives().get(name)
    if own is not None and len(own.arg_names) == len(args):
        return call(name, *args)
    constants, data = split_integers(args)
    values = tuple(_constant(a) for a in data)
    floats = [a.dtype for a in values if isinstance(a, Tensor)]
    converted = as_floats(values, np.result_type(*floats) if floats else np.float32)
    return elementwise(name, len(args), constants)(*converted)


dispatch.register(Tensor, apply, priority=1)
