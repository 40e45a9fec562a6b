"""The C backend: builds a package's ``kernels.c`` with cffi (cached, see ``symgrad.backends.c.cffi_build``)
and runs it.

``run(inputs, batch_shape)`` materializes each input as a contiguous, aligned array of exactly
``batch_shape + slot.shape`` (no copy when it already is one), allocates the results (large ones from
``pool``, which saves their page faults) and calls the kernel once, with the GIL released. The call goes
through ``direct`` (the arrays straight to the kernel's pointer-array entry), or through cffi where
``direct`` cannot be built or a kernel has more than its ``MAX_ARRAYS`` arguments. Neither looks at
dtypes, so the dtype and shape are checked here before any pointer is taken.

Threads: loops above a size threshold (see ``emitters/c/loops.py``) run on every OpenMP thread;
``set_num_threads`` changes the count, ``SYMGRAD_OPENMP=0`` builds without OpenMP. Unless
``OMP_WAIT_POLICY`` is already set, loading C kernels sets it to ``passive``: idle OpenMP threads then
sleep instead of spinning. A spinning thread holds a core that others need: on a busy machine it stalls
the next parallel loop and slows the NumPy code that runs between kernel calls, and even a short spin
starves OpenBLAS's matmul threads. The price is waking the threads for each parallel loop, which the
loops' thresholds account for (measurements: docs/performance.md).

Fork: libgomp's thread pool does not survive ``os.fork`` (the default start method of ``multiprocessing``
on Linux before Python 3.14): a child's first parallel loop on the thread that forked would wait forever
for the parent's pool threads, which the child does not have. So a forked child runs its C kernels on one
thread: ``_after_fork_in_child`` sets one thread for the thread that forked (the child's only one; a
parallel region of one thread wakes no pool thread), modules the child loads later set it too, and
``set_num_threads`` sets one there. Threads the child starts itself get pools of their own.
"""

from __future__ import annotations

import os
from math import copysign, prod

import numpy as np

from symgrad import abi
from symgrad.backends.base import Package, Run
from symgrad.backends.c import cffi_build, direct, entries, pool
from symgrad.errors import BackendUnavailable, PackageError

_loaded: list = []  # cffi modules loaded in this process (for set_num_threads)
_forked = False  # this process is a forked child: its C kernels run on one thread (see the docstring)


def _after_fork_in_child() -> None:
    global _forked
    _forked = True
    for module in _loaded:  # (they share one libgomp, whose setting is per thread: the first suffices)
        module.lib.sg_set_num_threads(1)


if hasattr(os, "register_at_fork"):  # (not on Windows, which has no fork)
    os.register_at_fork(after_in_child=_after_fork_in_child)


def set_num_threads(k: int) -> None:
    """Threads for the OpenMP loops of every C kernel called from this Python thread (no-op without
    OpenMP, and one thread in a forked child). Loops below their size threshold always run on one
    thread."""
    if _forked:
        k = 1
    for module in _loaded:
        module.lib.sg_set_num_threads(int(k))
        return


def get_num_threads() -> int:
    """Threads a large C kernel uses now (1 without OpenMP or before any C kernel was loaded)."""
    for module in _loaded:
        return int(module.lib.sg_get_max_threads())
    return 1


class CKernels:
    def __init__(self, package: Package) -> None:
        manifest = package.manifest
        if "c" not in manifest.get("files", {}):
            raise BackendUnavailable(f"{package.path} has no C kernels (recompile it with symgrad)")
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # before libgomp loads; see the docstring
        source = package.read("c")
        self.module = cffi_build.load(
            source,
            entries.CDEF,
            label=f"{manifest.get('source', package.path.name)} ({package.path / manifest['files']['c']})",
            glue=entries.glue(abi.pointer_entries(manifest)),
        )
        if self.module not in _loaded:
            _loaded.append(self.module)
            if _forked:  # a libgomp that a forked child first uses here may still hold the parent's pool
                self.module.lib.sg_set_num_threads(1)
        self.ffi, self.lib = self.module.ffi, self.module.lib
        # per program: input shapes (None for a uniform input, passed by value) and output shapes
        self.slots = {
            (f.get("ident", f["name"]), p): (
                [None if s.get("uniform") else tuple(s["shape"]) for s in slots["inputs"]],
                [tuple(s["shape"]) for s in slots["outputs"]],
            )
            for f in manifest["functions"]
            for p, slots in f["programs"].items()
        }
        self._runs: dict[tuple, Run] = {}

    def program(self, function: str, program: str, dtype: np.dtype) -> Run:
        dtype = np.dtype(dtype)
        key = (function, program, dtype)
        if key not in self._runs:
            try:
                suffix = abi.DTYPE_SUFFIX[dtype]
            except KeyError:
                raise TypeError(f"{function}: the C kernels take float32 or float64, not {dtype}") from None
            in_shapes, out_shapes = self.slots[(function, program)]
            name = abi.kernel_symbol(function, program, suffix) + abi.POINTERS_SUFFIX
            address = int(self.ffi.cast("uintptr_t", self.lib.sg_entry(name.encode())))
            if not address:
                raise PackageError(f"{name} is not in the compiled C module of this package")
            call = direct.caller()
            if call is not None and len(in_shapes) + len(out_shapes) <= direct.MAX_ARRAYS:
                run = _direct_run(call, address, dtype, in_shapes, out_shapes)
                fresh = direct.fresh()
                if fresh is not None and all(s == () for s in in_shapes):  # per-element, no uniform input
                    run = _fresh_run(fresh, run, address, dtype, len(in_shapes), out_shapes)
                self._runs[key] = run
            else:
                self._runs[key] = _cffi_run(address, self.ffi, dtype, in_shapes, out_shapes)
        return self._runs[key]


def _small(dtype: np.dtype, out_shapes: list[tuple]) -> int:
    """Batches of fewer elements than this get plain ``np.empty`` results, without the pool's call."""
    return pool.POOL_MIN // dtype.itemsize // max([1, *(prod(t) for t in out_shapes)])


def _fresh_run(fresh, general: Run, address: int, dtype: np.dtype, n_in: int, out_shapes: list[tuple]) -> Run:
    """``general`` with ``direct.fresh`` first: a small batch of ready per-element inputs (the tape's ops)
    runs with its results allocated in C; anything else takes ``general``."""
    outs, small, typenum = tuple(out_shapes), _small(dtype, out_shapes), dtype.num

    def run(inputs: tuple, batch: tuple, out: tuple | None = None) -> tuple:
        if out is None:
            results = fresh(address, n_in, small, typenum, batch, outs, *inputs)
            if results is not None:
                return results
        return general(inputs, batch, out)

    return run


def _direct_run(call, address: int, dtype: np.dtype, in_shapes: list[tuple], out_shapes: list[tuple]) -> Run:
    """``run`` through ``direct.call``: the arrays go to the kernel as they are, a uniform input (a number)
    as a one-element array."""
    ndarray, empty, pooled = np.ndarray, np.empty, pool.empty
    ins, outs = tuple(in_shapes), tuple(out_shapes)
    n_in, itemsize = len(ins), dtype.itemsize
    elementwise = all(s == () for s in ins)  # (no uniform input either)
    single = len(outs) == 1 and outs[0] == ()
    pair = outs if len(outs) == 2 else None  # (value, Jacobian) and other two-result programs
    small = _small(dtype, out_shapes)

    def run(inputs: tuple, batch: tuple, out: tuple | None = None) -> tuple:
        if len(inputs) != n_in:  # the kernel would read or write past the pointers it is given
            raise TypeError(f"kernel takes {n_in} inputs, got {len(inputs)}")
        n = 1
        for d in batch:
            n *= d
        args = [address, n, n_in, itemsize]
        if elementwise:
            for a in inputs:
                if type(a) is not ndarray or a.dtype is not dtype or a.shape != batch:
                    a = _materialize(a, batch, dtype)
                args.append(a)
        else:
            for a, tail in zip(inputs, ins):
                if tail is None:  # uniform: one number (the boundary checked it is one), 0-d
                    args.append(np.array(a, dtype))
                    continue
                full = batch + tail
                if type(a) is not ndarray or a.dtype is not dtype or a.shape != full:
                    a = _materialize(a, full, dtype)
                args.append(a)
        if out is None:
            make = empty if n < small else pooled
            if single:
                out = (make(batch, dtype),)
            elif pair:  # no comprehension: it costs as much as an allocation
                out = (make(batch + pair[0], dtype), make(batch + pair[1], dtype))
            else:
                out = tuple([make(batch + tail, dtype) for tail in outs])
        elif type(out) is not tuple:
            out = tuple(out)
        if n:
            args += out
            try:
                call(*args)
            except ValueError:  # an input that is not C-contiguous or not aligned: copy it, retry
                for k in range(n_in):
                    a = args[4 + k]
                    if not _usable(a.flags):
                        args[4 + k] = _materialize(a, a.shape, dtype)
                call(*args)  # (out= results were checked at the boundary)
        return out

    return run


def _cffi_run(address: int, ffi, dtype: np.dtype, in_shapes: list[tuple], out_shapes: list[tuple]) -> Run:
    """``run`` through cffi's call of the entry at ``address`` (where ``direct`` cannot be built, or for more
    arrays than its MAX_ARRAYS): the arrays' data pointers in one array, a uniform input as a pointer to its
    value."""
    entry = ffi.cast(entries.ENTRY_TYPE, address)
    ctype = ffi.typeof(f"{abi.C_TYPES[abi.DTYPE_SUFFIX[dtype]]}[]")
    from_buffer, new = ffi.from_buffer, ffi.new
    ndarray, empty = np.ndarray, pool.empty
    ins = tuple(in_shapes)
    outs = tuple(out_shapes)

    def run(inputs: tuple, batch: tuple, out: tuple | None = None) -> tuple:
        if len(inputs) != len(ins):
            raise TypeError(f"kernel takes {len(ins)} inputs, got {len(inputs)}")
        arrays = []
        for a, tail in zip(inputs, ins):
            if tail is None:  # uniform: one number (the boundary checked it is one)
                arrays.append(np.full(1, a, dtype))
                continue
            full = batch + tail
            # fast path: already a contiguous, aligned array of this exact dtype and shape (`is`: the
            # builtin float dtypes are singletons; any other equal dtype just takes the copying path)
            if type(a) is not ndarray or a.dtype is not dtype or a.shape != full or not _usable(a.flags):
                a = _materialize(a, full, dtype)
            arrays.append(a)
        results = list(out) if out is not None else [empty(batch + tail, dtype) for tail in outs]
        n = prod(batch)
        if n:
            buffers = [from_buffer(ctype, a) for a in (*arrays, *results)]  # alive through the call
            entry(n, new("void *[]", buffers))
        return tuple(results)

    return run


def _usable(flags) -> bool:
    return flags.c_contiguous and flags.aligned


#: Python numbers filled out to small batches, by (number, sign, shape, dtype): the runtime's ``x * 1.1`` and
#: ``y + 1`` repeat their constants on every call. Read-only (kernels only read inputs); cleared when full.
_FILLED: dict[tuple, np.ndarray] = {}
_FILLED_MAX_ENTRIES, _FILLED_MAX_SIZE = 256, 4096


def _materialize(a, full: tuple, dtype: np.dtype) -> np.ndarray:
    """``a`` broadcast to ``full`` as a C-contiguous, aligned array of ``dtype`` (the documented copy)."""
    if type(a) is float or type(a) is int:
        key = (a, copysign(1.0, a), full, dtype)  # the sign keeps -0.0 apart from 0.0
        filled = _FILLED.get(key)
        if filled is None:
            filled = np.full(full, a, dtype)
            if filled.size <= _FILLED_MAX_SIZE:
                if len(_FILLED) >= _FILLED_MAX_ENTRIES:
                    _FILLED.clear()
                filled.flags.writeable = False
                _FILLED[key] = filled
        return filled
    if type(a) is np.ndarray and a.ndim == 0:
        return np.full(full, a, dtype)  # a scalar: much cheaper than broadcast_to + copy
    a = np.ascontiguousarray(np.broadcast_to(a, full), dtype=dtype)
    return a if a.flags.aligned else a.copy()


class CBackend:
    name = "c"

    def load(self, package: Package) -> CKernels:
        return CKernels(package)
