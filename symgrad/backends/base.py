"""What a backend is: ``load(package) -> KernelSet``, whose ``program(ident, program, dtype)`` is a
``Run``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from symgrad.build.package import Package

Run = Callable[..., tuple]  # run(inputs, batch, out=None) -> results (written into ``out`` when given)


class KernelSet(Protocol):
    def program(self, function: str, program: str, dtype: np.dtype) -> Run: ...


class Backend(Protocol):
    name: str

    def load(self, package: Package) -> KernelSet: ...
