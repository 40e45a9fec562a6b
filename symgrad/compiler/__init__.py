"""The compiler: a traced ``Spec`` (``trace``) -> a ``Derivation`` (``derive``) -> a ``Kernel`` (``lower``).

Every stage is a frozen value you can print; ``compile_spec`` runs them in order.
"""

from __future__ import annotations

from symgrad.compiler.derive import Derivation, derive
from symgrad.compiler.ir import Kernel
from symgrad.compiler.lower import lower
from symgrad.compiler.trace import Spec


def compile_spec(spec: Spec) -> Kernel:
    """``lower(derive(spec))``: every program of one traced function, validated."""
    return lower(derive(spec))


__all__ = ["Derivation", "Kernel", "Spec", "compile_spec", "derive", "lower"]
