"""How the C target runs a program's loop, decided from the program alone: the cost of a row, the longest
chain of dependent math calls, whether a loop does two rows per iteration and from how many rows it runs on
all OpenMP threads.

Contract: ``_parallel_min_rows(program, dtype)`` is ``PARALLEL_WORK[dtype] / row cost`` clamped to
``[PARALLEL_MIN_ROWS_FLOOR, PARALLEL_MIN_ROWS]``, a row's cost counting arithmetic as 1 and a math
function call (sin, exp, log1p, a helper that calls one, pow) as ``CALL_COST``. ``_two_rows(program,
dtype)`` holds when the row is latency-bound: a chain of math calls that each need the previous result, at
least ``TWO_ROWS_DEPTH[dtype]`` calls long and at least a quarter of the row's cost. Both only change speed,
never results.
"""

from __future__ import annotations

import sympy

from symgrad.compiler.ir import Program

from .text import HELPERS, DType

# How these constants were calibrated, and what they measured: docs/performance.md, "## C emitter".
#: Work units per row count from which a loop runs on all threads (rows = PARALLEL_WORK / row cost)
PARALLEL_WORK = {"f32": 5_000_000, "f64": 2_500_000}
#: The bounds of that row count
PARALLEL_MIN_ROWS = 200_000
PARALLEL_MIN_ROWS_FLOOR = 1_000
#: A math function call's weight in a row's cost (arithmetic: 1)
CALL_COST = 10
#: The shortest chain of dependent math calls for which a loop does two rows per iteration
TWO_ROWS_DEPTH = {"f32": 1, "f64": 3}
#: Functions that print as a compare, a select or one instruction, not a call
_INLINE_FUNCTIONS = frozenset({"Abs", "Piecewise", "floor", "ceiling"}) | frozenset(
    name for name, (calls, _) in HELPERS.items() if not calls
)


def _is_call(node: sympy.Basic) -> bool:
    """Whether ``node`` prints as a call of a math function (sin, exp, a helper that calls log, pow, ...)."""
    if isinstance(node, sympy.Pow):  # integer and half powers print as products and sqrt
        e = node.exp
        return not (e.is_number and e.is_extended_real and float(2 * e).is_integer())
    return isinstance(node, sympy.Function) and type(node).__name__ not in _INLINE_FUNCTIONS


def _row_cost(program: Program) -> int:
    """A row's work in arithmetic operations, a math function call counting ``CALL_COST``."""
    calls = sum(1 for a in program.body for node in sympy.preorder_traversal(a.expr) if _is_call(node))
    return max(program.op_count() + (CALL_COST - 1) * calls, 1)


def _call_depth(program: Program) -> int:
    """The longest chain of math calls in a row that each need the previous one's result."""
    depth: dict[sympy.Basic, int] = {}

    def of(expr: sympy.Basic) -> int:
        if expr not in depth:
            inner = max((of(arg) for arg in expr.args), default=0)
            depth[expr] = inner + _is_call(expr)
        return depth[expr]

    for a in program.body:
        depth[a.target] = of(a.expr)
    return max(depth.values(), default=0)


def _two_rows(program: Program, dtype: DType) -> bool:
    """Whether the loop does two rows per iteration (see ``TWO_ROWS_DEPTH``)."""
    depth = _call_depth(program)
    return depth >= TWO_ROWS_DEPTH[dtype.suffix] and 4 * CALL_COST * depth >= _row_cost(program)


def _parallel_min_rows(program: Program, dtype: DType) -> int:
    """Rows from which a loop runs on all OpenMP threads (see ``PARALLEL_WORK``)."""
    rows = PARALLEL_WORK[dtype.suffix] // _row_cost(program)
    return max(PARALLEL_MIN_ROWS_FLOOR, min(PARALLEL_MIN_ROWS, rows))
