"""Row strides of per-element vector and matrix arguments, hidden from gcc's constant propagation.

With a row of ``w`` values at ``cam[i*w + k]``, gcc's vectorizer treats the accesses to one row as an
interleaved group, which it vectorizes only for some widths (2, 3, 4, 8, 16), and for the others
(the BA camera's 11, its 2 x 15 Jacobian block's 30) gives up on the whole loop: "no vectype" for the
loads. With the width in a variable whose value gcc cannot see, each component's access is a strided one
of its own, which gcc vectorizes for any width (vector lanes filled and emptied element by element). The
row's arithmetic is unchanged, statement for statement: only how the values reach the vector registers.

It pays where a row's arithmetic outweighs the moving of its values in and out of vector lanes one by one
(the BA residual's programs: 1.9-3x faster); a light row (a quaternion rotation's Jacobian) or one of many
values (an LSTM cell with its weights per row) runs faster unvectorized, so keeps the known widths.

Contract: ``hidden_widths(program)`` is the set of row widths the program's loop function keeps in
variables (empty: none): those gcc cannot vectorize as groups, when the row's cost (``loops``) is at least
``MIN_WORK_PER_VALUE`` per value its vector and matrix slots hold. ``stride_lines(names)`` declares
``names[w]`` as the width ``w`` behind ``SG_OPAQUE`` at the top of the function; ``STRIDE_MACROS`` defines
``SG_OPAQUE`` (an empty ``asm`` that claims to change the variable; a no-op for other compilers).
"""

from __future__ import annotations

from symgrad.compiler.ir import Program

from .loops import _row_cost

# Measured on the BA residual, a quaternion rotation, an LSTM cell and a 2-D spring's Hessian:
# docs/performance.md, "## C emitter".
#: Row widths gcc vectorizes as groups when they are known (2, 3, 4, 8 by permutes; 16, a 4 x 4 Hessian,
#: lane by lane, once its stores come last: 1.8-2.1x faster than stored as computed, 7-20 % than hidden)
GROUPED_WIDTHS = frozenset({1, 2, 3, 4, 8, 16})
#: The row cost per vector or matrix value from which hidden widths pay (BA forward: 5.9, 2.7x faster;
#: LSTM hvp: 5.3, 2x slower)
MIN_WORK_PER_VALUE = 5.5

STRIDE_MACROS = """\
/* SG_OPAQUE(v): gcc no longer knows v's value (an empty asm that may change it). Row widths are kept in
   such variables: gcc vectorizes a loop over rows of a width it does not know (strided accesses) but not
   one over rows of a known width other than 2, 3, 4 or 8 (an interleaved group it cannot permute). */
#if defined(__GNUC__)
#define SG_OPAQUE(v) __asm__("" : "+r"(v))
#else
#define SG_OPAQUE(v) ((void)0)
#endif"""


def hidden_widths(program: Program) -> set[int]:
    """The widths of ``program``'s vector and matrix slots that its loop keeps in variables (see above)."""
    slots = [s for s in (*program.inputs, *program.outputs) if s.size > 1 and not s.uniform]
    widths = {s.size for s in slots} - GROUPED_WIDTHS
    if widths and _row_cost(program) >= MIN_WORK_PER_VALUE * sum(s.size for s in slots):
        return widths
    return set()


def stride_lines(names: dict[int, str]) -> list[str]:
    """The declarations of each row width's variable (``names``: width -> C name)."""
    lines = []
    for width, name in sorted(names.items()):
        lines += [f"int64_t {name} = {width};", f"SG_OPAQUE({name});"]
    return lines
