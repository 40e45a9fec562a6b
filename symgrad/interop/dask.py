"""Dask arrays in, lazy Dask arrays out: every array entry point of a compiled function, chunk by chunk.

    import dask.array as da
    x = da.random.random(200_000_000, chunks=4_000_000).astype(np.float32)
    value, (gx, gp) = m.model.value_and_vjp(x, p, np.ones((), np.float32))   # lazy
    value, gp = dask.compute(value, gp)                                          # one kernel call per chunk

``f(...)``, ``forward``, ``vjp``, ``value_and_vjp``, ``jvp``, ``jacobian`` and ``value_and_jacobian`` take
Dask arrays mixed with NumPy arrays and Python numbers (``symgrad.compiled.lazy`` sends such calls here;
Dask is imported only then). The arguments' chunks are aligned as broadcasting requires
(``dask.array.blockwise``); the trailing per-element axes of vector and matrix arguments are put in one
chunk; numbers, ``uniform`` arguments and NumPy arrays without batch axes go to every chunk by value (those
the kernels read per element, like a cotangent of 1 or a parameter vector, are filled out to the chunk's
shape once per process and shape, not for each chunk). Each chunk runs the in-memory entry point once (a
fused ``value_and_vjp`` is one kernel call per chunk), so every chunk's results are exactly those of the
NumPy path on that chunk. The gradient of a broadcast
argument is a Dask sum over the chunks (a tree reduction: nothing is gathered on one node; its rounding
differs from one ``np.sum`` over the whole batch). Compute the results of one call together
(``dask.compute(value, grads)``): each ``.compute()`` runs the kernel again.

OpenMP: Dask already runs one task per core, so a chunk's kernel runs on one thread by default;
``set_chunk_threads(k)`` (or ``SYMGRAD_DASK_THREADS=k``) gives k OpenMP threads per chunk, 0 leaves
symgrad's setting as it is. It applies to graphs built afterwards (the count travels with the graph to
the workers). Functions travel to worker processes as small references (``symgrad.compiled.reference``).
A worker holds a few chunks' results at once; the C backend's pool of result buffers grows to hold the
most that were alive at once plus one chunk's (``_track``), unless ``SYMGRAD_POOL_MB`` sets its size:
blocks that do not fit are page-faulted in afresh for every chunk (bundle adjustment, 4e6-row chunks:
272 MB of results a chunk, +50% CPU a chunk at the fixed default of 256 MB).

Tasks: the tasks that make a chunk's arguments (``map_blocks``, elementwise steps) fuse into its kernel's
task; each result a graph reads from it is a task more per chunk (with what reduces it there, e.g. the
chunk's ``sum``). A task costs a ``distributed`` scheduler and worker a millisecond or more of CPU: size the
chunks so that a kernel takes tens of milliseconds or more.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import dask.array as da
import numpy as np

from symgrad.backends import c as c_backend
from symgrad.backends.c import pool
from symgrad.compiled.arguments import (
    bind,
    broadcast_batches,
    check_arity,
    is_number,
    split_cotangents,
    sum_to_shape,
)
from symgrad.errors import ArgumentError

_threads = [int(os.environ.get("SYMGRAD_DASK_THREADS", "1"))]


def set_chunk_threads(k: int) -> None:
    """OpenMP threads for each chunk's kernel in graphs built from now on (default 1; 0: unchanged)."""
    _threads[0] = int(k)


def _package(fn: Any, outs: Any) -> tuple:
    return tuple(outs) if fn.returns_tuple else (outs,)


def _forward(fn: Any, values: tuple, option: Any) -> tuple:
    return tuple(fn.forward(*values))


def _vjp(fn: Any, values: tuple, needed: Any) -> tuple:
    return tuple(fn.vjp(*values, needs_input_grad=needed))


def _value_and_vjp(fn: Any, values: tuple, option: Any) -> tuple:
    outs, grads = fn.value_and_vjp(*values)
    return _package(fn, outs) + tuple(grads)


def _jvp(fn: Any, values: tuple, option: Any) -> tuple:
    n = len(fn.arg_names)
    outs, tangents = fn.jvp(values[:n], values[n:])
    return _package(fn, outs) + _package(fn, tangents)


def _value_and_jacobian(fn: Any, values: tuple, wrt: Any) -> tuple:
    outs, jac = fn.value_and_jacobian(*values, wrt=wrt)
    return _package(fn, outs) + (jac,)


#: By-value arguments filled out to a chunk's full shape, by (value's bytes, its shape, full shape, dtype):
#: the kernels read full arrays, so without these every chunk would fill (and page-fault) a fresh copy of a
#: cotangent of 1 or a parameter vector. Read-only, shared by the chunks of a process; cleared when adding
#: one would pass ``_FILLS_MAX_BYTES``.
_FILLS: dict[tuple, np.ndarray] = {}
_FILLS_MAX_BYTES = 1 << 28


def _filled(value: Any, full: tuple, dtype: np.dtype) -> np.ndarray:
    """``value`` broadcast to ``full`` as a read-only C-contiguous ``dtype`` array, made once per process."""
    v = np.asarray(value, dtype)
    key = (v.tobytes(), v.shape, full, dtype)
    filled = _FILLS.get(key)
    if filled is None:
        filled = np.empty(full, dtype)
        filled[...] = v
        filled.flags.writeable = False
        if sum(a.nbytes for a in _FILLS.values()) + filled.nbytes > _FILLS_MAX_BYTES:
            _FILLS.clear()
        if filled.nbytes <= _FILLS_MAX_BYTES:
            _FILLS[key] = filled
    return filled


#: bytes of pooled chunk results alive in this process now, and the most at once (sizes the result pool)
_alive = [0, 0]
_lock = threading.Lock()


def _track(results: tuple) -> None:
    """Count a chunk's pooled results while they live, and let the C backend's result pool hold the most
    that were alive at once plus one chunk's: a worker holds several chunks' results (their reductions run
    after later kernels), and blocks that do not fit in the pool are page-faulted in afresh (bundle
    adjustment, 4e6-row chunks: 272 MB a chunk against the default 256 MB, +50% CPU a chunk)."""
    pooled = [r for r in results if isinstance(r, np.ndarray) and r.nbytes >= pool.POOL_MIN]
    if not pooled:
        return
    size = sum(r.nbytes for r in pooled)
    with _lock:
        _alive[0] += size
        _alive[1] = max(_alive)
        peak = _alive[1]
    for r in pooled:
        weakref.finalize(r, _died, r.nbytes)
    pool.hold_at_least(peak + size)


def _died(nbytes: int) -> None:
    with _lock:
        _alive[0] -= nbytes


class _Chunk:
    """One task's work: the in-memory entry point on the chunks (arrays) and the values (the rest)."""

    def __init__(
        self, fn: Any, run: Any, option: Any, values: tuple, arrays: tuple, shapes: dict, tails: tuple
    ) -> None:
        self.fn, self.run, self.option, self.threads = fn, run, option, _threads[0]
        self.values, self.arrays, self.tails = values, arrays, tails  # values: None where arrays[k] goes
        self.shapes = shapes  # result position -> rank: a gradient gets leading axes of 1 up to it
        self.n_full = min(shapes, default=0)  # the gradient of argument k is result n_full + k
        n, uniform = len(fn.arg_names), fn.uniform_at  # (a jvp's tangent of a uniform input: also by value)
        uniform = {*uniform, *(k + n for k in uniform)} if run is _jvp else set(uniform)
        #: positions of by-value arguments read per element, filled out to the chunk's shape (``_filled``)
        self.fills = tuple(
            k for k, v in enumerate(values) if k not in arrays and v is not None and k not in uniform
        )

    def __dask_tokenize__(self) -> tuple:
        ref = (self.fn.package.manifest.get("package_hash"), self.fn.name)
        return (ref, self.run.__name__, self.option, self.threads, self.arrays, self.shapes, self.values)

    def _fill(self, values: list, blocks: tuple) -> None:
        """Put the by-value arguments in ``values`` as full arrays of the chunk's batch shape and dtype (the
        dtype the in-memory path promotes to: numbers are weak, arrays are not)."""
        if not self.fills or not blocks:
            return
        batches = [b.shape[: b.ndim - len(self.tails[k])] for k, b in zip(self.arrays, blocks)]
        batch = np.broadcast_shapes(*batches)
        by_value = [np.asarray(values[k]).dtype for k in self.fills if not is_number(values[k])]
        dtype = np.result_type(*(b.dtype for b in blocks), *by_value)
        for k in self.fills:
            values[k] = _filled(values[k], batch + self.tails[k], dtype)

    def __call__(self, *blocks: Any) -> tuple:
        values = list(self.values)
        for k, block in zip(self.arrays, blocks):
            values[k] = block
        self._fill(values, blocks)
        if self.threads:
            self.fn.backend  # loads the kernels: their OpenMP setting is per calling thread
            before = c_backend.get_num_threads()
            c_backend.set_num_threads(self.threads)
        try:
            results = self.run(self.fn, tuple(values), self.option)
        finally:
            if self.threads:
                c_backend.set_num_threads(before)
        _track(results)
        for k in self.fills:  # a filled argument's gradient: summed to its shape, as the in-memory path does
            g = k + self.n_full
            if g in self.shapes and results[g] is not None:
                results = (
                    results[:g] + (sum_to_shape(results[g], np.shape(self.values[k])),) + results[g + 1 :]
                )
        return tuple(
            r if r is None or k not in self.shapes else r.reshape((1,) * (self.shapes[k] - r.ndim) + r.shape)
            for k, r in enumerate(results)
        )


def _pick(results: Any, k: int) -> np.ndarray:
    """Result ``k`` of a chunk's results. ``blockwise`` lists them along the arguments' per-element axes
    (one block each), which the results' own axes replace."""
    while isinstance(results, list):
        (results,) = results
    return results[k]


#: the ``blockwise`` index of axis ``a`` of argument ``k``'s per-element axes: ``_TAIL * (k + 1) + a``
_TAIL = 1000


def _sample(value: Any, tail: tuple) -> Any:
    """A one-row stand-in (zeros of the dtype, batch axes 1, the same trailing axes) for an array."""
    if not isinstance(value, (np.ndarray, da.Array)):
        return value
    cut = max(value.ndim - len(tail), 0)
    return np.zeros(tuple(min(n, 1) for n in value.shape[:cut]) + value.shape[cut:], value.dtype)


def _lazy(fn: Any, run: Any, option: Any, values: tuple, tails: tuple, names: tuple, n_full: int) -> tuple:
    """The results of ``run`` over the chunks, lazily: the first ``n_full`` with the batch shape, then (if
    any) one gradient per argument, summed over the axes the argument was broadcast along."""
    samples = run(fn, tuple(_sample(v, t) for v, t in zip(values, tails)), option)  # the eager checks
    batched = [
        k
        for k, v in enumerate(values)
        if isinstance(v, da.Array) or (isinstance(v, np.ndarray) and v.ndim > len(tails[k]))
    ]
    batches = {k: values[k].shape[: values[k].ndim - len(tails[k])] for k in batched}
    batch = broadcast_batches(fn.name, [names[k] for k in batched], list(batches.values()))
    rank = len(batch)
    inds, pairs, own_tails = tuple(range(rank)), [], ()
    for k in batched:
        v, tail = da.asarray(values[k]), tails[k]
        v = v.rechunk({a: -1 for a in range(v.ndim - len(tail), v.ndim)}) if tail else v
        own_tail = tuple(_TAIL * (k + 1) + a for a in range(len(tail)))
        pairs += [v, tuple(range(rank - len(batches[k]), rank)) + own_tail]
        own_tails += own_tail
    n_grads = len(samples) - n_full
    shapes = {n_full + a: rank + len(tails[a]) for a in range(n_grads)}  # gradients' full ranks
    rest = tuple(None if k in batched else v for k, v in enumerate(values))
    chunk = _Chunk(fn, run, option, rest, tuple(batched), shapes, tails)
    token = f"{fn.name}-{run.__name__.strip('_')}"
    # the chunks' results keep the arguments' per-element axes: a blockwise layer that drops an index
    # (a contraction) is where Dask stops fusing, and the tasks that make the arguments' chunks would each
    # be a task of their own (``dask.blockwise.optimize_blockwise``)
    carrier = inds + own_tails
    results = da.blockwise(chunk, carrier, *pairs, token=token, meta=np.empty((0,) * len(carrier), object))
    lazy = [_result(results, r, sample, carrier, rank, token) for r, sample in enumerate(samples[:n_full])]
    grads = [
        None if s is None else _gradient(results, n_full + a, s, values[a], tails[a], carrier, token)
        for a, s in enumerate(samples[n_full:])
    ]
    return tuple(lazy + grads)


def _result(results: da.Array, r: int, sample: np.ndarray, carrier: tuple, rank: int, token: str) -> da.Array:
    """Result ``r`` of every chunk, with the batch shape and its trailing axes in one chunk."""
    tail = sample.shape[rank:]
    new = {rank + a: n for a, n in enumerate(tail)}
    inds = tuple(range(rank))
    return da.blockwise(
        _pick, inds + tuple(new), results, carrier, r, None, new_axes=new, dtype=sample.dtype,
        meta=np.empty((0,) * (rank + len(tail)), sample.dtype), token=f"{token}-{r}",
    )  # fmt: skip


def _gradient(
    results: da.Array, r: int, sample: np.ndarray, arg: Any, tail: tuple, carrier: tuple, token: str
) -> da.Array:
    """The gradient of an argument: each chunk's (summed to the argument's chunk), summed over the chunks
    along the axes the argument was broadcast along, in the argument's shape."""
    shape, rank = tuple(np.shape(arg)), sum(i < _TAIL for i in carrier)
    full = (1,) * (rank - len(shape) + len(tail)) + shape[: len(shape) - len(tail)]
    new = {rank + a: n for a, n in enumerate(tail)}
    inds = tuple(range(rank))
    g = da.blockwise(
        _pick, inds + tuple(new), results, carrier, r, None, new_axes=new, dtype=sample.dtype,
        adjust_chunks={a: 1 for a in range(rank) if full[a] == 1},
        meta=np.empty((0,) * (rank + len(tail)), sample.dtype), token=f"{token}-{r}",
    )  # fmt: skip
    summed = tuple(a for a in range(rank) if full[a] == 1 and results.shape[a] != 1)
    g = g.sum(axis=summed, keepdims=True, dtype=sample.dtype) if summed else g
    return g.reshape(shape) if g.shape != shape else g


def _no_out(fn: Any, out: Any) -> None:
    if out is not None:
        raise ArgumentError(f"{fn.name}: out= takes NumPy arrays; with Dask arrays the results are lazy")


def _call_forward(fn: Any, *args: Any, out: Any = None, **kwargs: Any) -> tuple:
    _no_out(fn, out)
    args = bind(fn.name, fn.arg_names, args, kwargs)
    check_arity(fn.name, fn.arg_names, len(args))
    return _lazy(fn, _forward, None, args, fn.arg_shapes, fn.arg_names, fn.n_outputs)


def _call_vjp(fn: Any, program: str, values: tuple, what: str, out: Any = None, needed: Any = None) -> tuple:
    _no_out(fn, out)
    n_out = fn.n_outputs
    args, cots = split_cotangents(fn.name, what, len(fn.arg_names), n_out, tuple(values))
    names = fn.arg_names + tuple(f"grad of output {k}" if n_out > 1 else "grad_out" for k in range(n_out))
    tails = fn.arg_shapes + fn.out_shapes
    if program == "vjp":
        return (), _lazy(fn, _vjp, needed, args + cots, tails, names, 0)
    results = _lazy(fn, _value_and_vjp, None, args + cots, tails, names, n_out)
    return results[:n_out], results[n_out:]


def _call_jvp(fn: Any, inputs: tuple, tangents: tuple) -> tuple:
    inputs, tangents = tuple(inputs), tuple(tangents)
    if len(inputs) != len(fn.arg_names) or len(tangents) != len(fn.arg_names):
        return fn.jvp.__wrapped__(fn, inputs, tangents)  # the in-memory path's error
    names = fn.arg_names + tuple(f"tangent of {n}" for n in fn.arg_names)
    results = _lazy(fn, _jvp, None, inputs + tangents, fn.arg_shapes * 2, names, 2 * fn.n_outputs)
    n = fn.n_outputs
    return _unpack(fn, results[:n]), _unpack(fn, results[n:])


def _call_value_and_jacobian(fn: Any, *args: Any, out: Any = None, wrt: Any = None, **kwargs: Any) -> tuple:
    _no_out(fn, out)
    args = bind(fn.name, fn.arg_names, args, kwargs)
    check_arity(fn.name, fn.arg_names, len(args))
    results = _lazy(fn, _value_and_jacobian, wrt, args, fn.arg_shapes, fn.arg_names, fn.n_outputs + 1)
    return _unpack(fn, results[:-1]), results[-1]


def _unpack(fn: Any, outs: tuple) -> Any:
    return outs if fn.returns_tuple else outs[0]


#: the entry points of ``CompiledFunction`` that ``symgrad.compiled.lazy`` sends here, by method name
ENTRIES = {
    "forward": _call_forward,
    "_vjp_call": _call_vjp,
    "jvp": _call_jvp,
    "value_and_jacobian": _call_value_and_jacobian,
}


def call(fn: Any, method: str, args: tuple, kwargs: dict) -> Any:
    """``fn.method(*args, **kwargs)`` with Dask arrays among the arguments, as lazy Dask arrays."""
    return ENTRIES[method](fn, *args, **kwargs)
