"""C target: one C99 translation unit per model, with one loop function per kernel, program and dtype.

``void {kernel}__{program}_{f64|f32}(int64_t n, const T *restrict in..., T *restrict out...)`` runs the
program's straight-line body for ``i`` in ``[0, n)`` (a latency-bound body for two rows ``i`` and ``j`` at a
time, see ``loops``). A scalar slot is one array of ``n`` values (``x[i]``); a per-element vector or matrix
slot is ``n`` contiguous rows (``p[i*3 + k]``).

float32 kernels are true float32: ``expf``, ``F`` literals, ``float`` temporaries, no double macro
constants. The stable primitives (sigmoid, softplus, ...) are ``static inline`` helpers, Piecewise is a
ternary (only the chosen branch's value reaches the result), small integer and half powers are expanded.
Each program is a ``static`` loop over rows ``sg_lo..sg_hi-1`` (``SG_SIMD``: ``omp simd``), the exported
function, which runs it on all OpenMP threads from a size threshold on (``SG_ROWS``), else on one, and
``..._ptrs``, the same with its arguments as an array of pointers (for ``symgrad.backends.c.direct``); the
libm functions the file uses get ``declare simd`` prototypes so gcc can call glibc's libmvec; both are
switched on by the build (``symgrad.backends.c.cffi_build``) only when a test compile showed they work.

The modules: ``text`` (dtypes, libm names, helper templates, macros), ``printer`` (expressions),
``loops`` (row cost, two-row and parallel thresholds), ``strides`` (row widths hidden from gcc so that it
vectorizes rows of vectors and matrices), ``module`` (statements, names, functions, the file).
"""

from __future__ import annotations

from .. import register
from .module import CEmitter, function_name
from .printer import SymgradCPrinter
from .text import DTYPES, DType, c_safe

__all__ = ["CEmitter", "SymgradCPrinter", "DTYPES", "DType", "c_safe", "function_name"]

register("c")(CEmitter)
