"""Kernel IR: frozen, printable values that every emitter prints and nothing downstream differentiates.

A ``Kernel`` is one user function. It holds several ``Program``s (entry points such as ``forward`` and
``value_and_vjp``); each is a straight-line list of ``Assign``s over per-element scalars, applied
elementwise over a batch. A ``Slot`` is a named array argument or result with a per-element shape, so
vector and matrix arguments (``sg.Vector(3)``) are just slots with more than one element symbol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from math import prod

import sympy

from symgrad.compiler.opcount import count_ops
from symgrad.errors import SymgradError

#: Slot roles. Inputs: 'arg' (a user argument), 'cotangent' (seed of a vjp), 'tangent' (seed of a jvp).
#: Results: 'output', 'grad' (one per argument), 'jvp', 'jacobian'.
INPUT_ROLES = ("arg", "cotangent", "tangent")
RESULT_ROLES = ("output", "grad", "jvp", "jacobian")


@dataclass(frozen=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    symbols: tuple[sympy.Symbol, ...]
    role: str
    of: str = ""  # for grads/cotangents/tangents: the argument or output they belong to
    uniform: bool = False  # an argument with one value per call (a scalar passed by value), not per element

    @property
    def size(self) -> int:
        return prod(self.shape)


@dataclass(frozen=True)
class Assign:
    target: sympy.Symbol
    expr: sympy.Expr
    note: str = ""  # formula comment shown in generated code

    def __str__(self) -> str:
        note = f"    # {self.note}" if self.note else ""
        return f"{self.target} = {self.expr}{note}"


@dataclass(frozen=True)
class Program:
    name: str
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    body: tuple[Assign, ...]

    def op_count(self) -> int:
        """``sympy.count_ops`` of the body (``opcount``: each distinct node counted once per process; every
        program repeats the forward's assignments), computed once per program (the emitters ask per loop and
        dtype)."""
        return self._op_count

    @cached_property
    def _op_count(self) -> int:
        return sum(count_ops(a.expr) for a in self.body)

    def validate(self) -> None:
        """Every symbol is defined once, before use; every result symbol is assigned."""
        defined = {s for slot in self.inputs for s in slot.symbols}
        for a in self.body:
            missing = a.expr.free_symbols - defined
            if missing:
                raise SymgradError(f"IR {self.name}: {a.target} uses undefined {sorted(map(str, missing))}")
            if a.target in defined:
                raise SymgradError(f"IR {self.name}: {a.target} assigned twice")
            defined.add(a.target)
        for slot in self.outputs:
            for s in slot.symbols:
                if s not in defined:
                    raise SymgradError(f"IR {self.name}: result {slot.name} element {s} never assigned")

    def __str__(self) -> str:
        ins = ", ".join(f"{s.name}{list(s.shape) if s.shape else ''}" for s in self.inputs)
        outs = ", ".join(f"{s.name}{list(s.shape) if s.shape else ''}" for s in self.outputs)
        lines = [f"program {self.name}({ins}) -> ({outs}):"]
        lines += [f"    {a}" for a in self.body]
        return "\n".join(lines)


@dataclass(frozen=True)
class Kernel:
    """One compiled user function: its signature, its programs and its display formulas."""

    name: str  # identifier used in generated code (sanitized)
    public_name: str  # the user's function name, as the compiled module exposes it
    origin: str  # 'model.py:12'
    doc: str
    args: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    returns_tuple: bool
    programs: tuple[Program, ...]
    formulas: tuple[tuple[str, str], ...] = ()  # (output name, forward formula in user names)
    derivatives: tuple[tuple[str, str], ...] = ()  # (argument name, closed-form vjp or '')
    second_derivatives: tuple[tuple[str, str], ...] = ()  # ('d2out/dx dy', closed form): the upper triangle
    nondiff: tuple[str, ...] = ()  # arguments without gradient slots or Jacobian columns
    op_counts: tuple[tuple[str, int], ...] = field(default=())

    def program(self, name: str) -> Program:
        for p in self.programs:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no program {name!r}")

    def validate(self) -> Kernel:
        for p in self.programs:
            p.validate()
        return self

    def __str__(self) -> str:
        head = f"kernel {self.name}  [{self.origin}]  ops: {dict(self.op_counts)}"
        return "\n".join([head, *map(str, self.programs)])
