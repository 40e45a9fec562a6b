"""A direct call into a C kernel for the backend's hot path: ``call(address, n, n_inputs, itemsize, *arrays)``.

cffi's generic call converts every argument to a cdata (``ffi.from_buffer``, ~0.2 us each) and then its
call itself costs ~0.8 us for five pointers: on a 10-element array that is most of a tape op. This small
CPython extension (built once per toolchain and Python, through the same cache as the kernels) takes the
kernel's address and the arrays themselves, reads their data pointers through the buffer protocol,
releases the GIL and calls the kernel with ``n`` and the pointers in order. An array that is not
C-contiguous or not aligned to ``itemsize`` (or a result that is not writable) raises ValueError before
anything runs. The caller has checked dtypes and shapes, as it does for cffi.

``caller()`` is None when the extension cannot be built; the backend then keeps cffi's call.
"""
from __future__ import annotations

import sys
from typing import Callable

from .. import build_c
from ..errors import CompileError
from ..toolchain import CompilerUnavailable, debug

#: The most arrays (inputs + results) one call takes; kernels with more go through cffi.
MAX_ARRAYS = 32
#: The label of its cache entry (``symgrad cache list``).
LABEL = "symgrad's direct kernel call"


def _source() -> str:
    cases = []
    for k in range(1, MAX_ARRAYS + 1):
        params = ", ".join(["int64_t"] + ["void *"] * k)
        args = ", ".join(["n"] + [f"p[{i}]" for i in range(k)])
        cases.append(f"    case {k}: ((void (*)({params}))fn)({args}); break;")
    switch = "\n".join(cases)
    return f"""\
/* symgrad's direct kernel call (see symgrad/backends/direct.py) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define SG_STR2(x) #x
#define SG_STR(x) SG_STR2(x)
#define SG_CAT2(a, b) a##b
#define SG_CAT(a, b) SG_CAT2(a, b)
#define SG_MAX_ARRAYS {MAX_ARRAYS}

static void sg_dispatch(void *fn, int64_t n, Py_ssize_t k, void **p)
{{
    switch (k) {{
{switch}
    }}
}}

/* call(address, n, n_inputs, *arrays): the kernel at address, with n and the arrays' data pointers */
static PyObject *sg_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{{
    Py_buffer views[SG_MAX_ARRAYS];
    void *p[SG_MAX_ARRAYS];
    (void)self;
    if (nargs < 5 || nargs - 4 > SG_MAX_ARRAYS) {{
        PyErr_Format(PyExc_TypeError, "call() takes an address, n, n_inputs, itemsize and 1 to %d arrays",
                     SG_MAX_ARRAYS);
        return NULL;
    }}
    void *fn = PyLong_AsVoidPtr(args[0]);
    if (fn == NULL) {{
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "call(): null kernel address");
        return NULL;
    }}
    const long long n = PyLong_AsLongLong(args[1]);
    const Py_ssize_t n_in = PyLong_AsSsize_t(args[2]);
    const Py_ssize_t itemsize = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (itemsize <= 0) {{
        PyErr_SetString(PyExc_ValueError, "call(): itemsize must be positive");
        return NULL;
    }}
    const Py_ssize_t k = nargs - 4;
    Py_ssize_t got = 0;
    for (; got < k; ++got) {{
        /* PyBUF_SIMPLE: NumPy refuses an array that is not C-contiguous */
        const int flags = got < n_in ? PyBUF_SIMPLE : PyBUF_WRITABLE;
        if (PyObject_GetBuffer(args[4 + got], &views[got], flags) < 0)
            break;
        p[got] = views[got].buf;
        if ((uintptr_t)p[got] % (uintptr_t)itemsize != 0) {{
            PyBuffer_Release(&views[got]);
            PyErr_Format(PyExc_ValueError, "call(): array %zd is not aligned to %zd bytes", got, itemsize);
            break;
        }}
    }}
    if (got == k && n > 0) {{
        Py_BEGIN_ALLOW_THREADS
        sg_dispatch(fn, (int64_t)n, k, p);
        Py_END_ALLOW_THREADS
    }}
    for (Py_ssize_t i = 0; i < got; ++i)
        PyBuffer_Release(&views[i]);
    if (got < k)
        return NULL;
    Py_RETURN_NONE;
}}

static PyMethodDef sg_methods[] = {{
    {{"call", (PyCFunction)(void (*)(void))sg_call, METH_FASTCALL,
     "call(address, n, n_inputs, itemsize, *arrays): run the kernel at address on the arrays' data"}},
    {{NULL, NULL, 0, NULL}}
}};

static struct PyModuleDef sg_module = {{PyModuleDef_HEAD_INIT, SG_STR(SG_MODULE), NULL, -1, sg_methods,
                                       NULL, NULL, NULL, NULL}};

PyMODINIT_FUNC SG_CAT(PyInit_, SG_MODULE)(void)
{{
    return PyModule_Create(&sg_module);
}}
"""


_caller: list = []


def caller() -> Callable[..., None] | None:
    """The extension's ``call``, built on first use; None (cffi's call stays) when it cannot be built."""
    if not _caller:
        try:
            _caller.append(build_c.load_extension(_source(), LABEL).call)
        except (CompileError, CompilerUnavailable, ImportError, OSError) as exc:
            if debug(1):
                print(f"symgrad: the direct kernel call is unavailable ({exc}); using cffi's", file=sys.stderr)
            _caller.append(None)
    return _caller[0]
