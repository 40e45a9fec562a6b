"""A direct call into a C kernel for the backend's hot path:
``call(address, n, n_inputs, itemsize, *arrays)``.

cffi's call converts every array to a cdata first (``ffi.from_buffer``): on small arrays that conversion
is most of a tape op's cost (measurements: docs/performance.md). This small CPython extension (built once
per toolchain and Python, through the same cache as the kernels) takes the address of a kernel's
pointer-array entry (``<kernel>__<program>_<dtype>__ptrs(int64_t n, void *const *p)``, emitted beside
every kernel, so the call is made through its exact type) and the arrays themselves, reads their data
pointers through the buffer protocol, releases the GIL and calls the entry. A uniform input is passed as
a one-element array of the kernel's dtype. An array that is not C-contiguous or not aligned to
``itemsize`` (or a result that is not writable) raises ValueError before anything runs. The caller has
checked dtypes and shapes, as it does for cffi.

The extension's ``mul_add`` (``acc += g * j`` on small float arrays) and ``mul_add_sum`` (the same, summed
over leading axes) become ``symgrad.backends.fused``'s, for the tape's gradient accumulation. ``caller()``
is None when the extension cannot be built; the backend then keeps cffi's call (and the tape NumPy's
accumulation).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from symgrad.backends import fused
from symgrad.backends.c import cffi_build
from symgrad.debug import debug, say
from symgrad.errors import CompileError, CompilerUnavailable

#: The most arrays (inputs + results) one call takes; kernels with more go through cffi.
MAX_ARRAYS = 64
#: The label of its cache entry (``symgrad cache list``).
LABEL = "symgrad's direct kernel call"


def _source() -> str:
    """``direct_call.c`` with ``SG_MAX_ARRAYS`` defined (the build defines ``SG_MODULE``)."""
    text = Path(__file__).with_name("direct_call.c").read_text()
    return f"#define SG_MAX_ARRAYS {MAX_ARRAYS}\n{text}"


_caller: list = []
_fresh: list = [None]


def caller() -> Callable[..., None] | None:
    """The extension's ``call``, built on first use; None (cffi's call stays) when it cannot be built."""
    if not _caller:
        try:
            module = cffi_build.load_extension(_source(), LABEL)
            _caller.append(module.call)
            _fresh[0] = getattr(module, "fresh", None)  # (built without NumPy's headers: none)
            fused.MUL_ADD[0] = module.mul_add
            fused.MUL_ADD_SUM[0] = module.mul_add_sum
        except (CompileError, CompilerUnavailable, ImportError, OSError) as exc:
            if debug(1):
                say(f"the direct kernel call is unavailable ({exc}); using cffi's")
            _caller.append(None)
    return _caller[0]


def fresh() -> Callable[..., tuple | None] | None:
    """The extension's ``fresh`` (None where ``caller()`` is, or NumPy's headers are not installed):
    ``fresh(address, n_inputs, small, typenum, batch, tails, *inputs)`` runs the kernel on per-element
    inputs that are already exact C-contiguous arrays of the dtype and shape ``batch`` (or Python numbers)
    into new arrays allocated in C (NumPy's C API), one per output tail, for fewer than ``small`` elements;
    None, with nothing run, for any other call."""
    caller()
    return _fresh[0]
