"""``Parameter``: a leaf tensor that a Module registers and an optimizer updates."""

from __future__ import annotations

from typing import Any

from symgrad.runtime.tensor import Tensor


class Parameter(Tensor):
    """A Tensor that requires grad by default and is found by ``Module.parameters()``; shares ``data``."""

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        super().__init__(data, requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
