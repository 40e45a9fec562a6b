"""Recycled memory for the C kernels' large results, so that a fresh result does not page-fault again.

A result of ``POOL_MIN`` bytes or more is a NumPy view of a block from this pool. When the last reference
to the array goes, its block comes back here instead of going to ``free``: glibc returns large freed blocks
to the system (``munmap``, or trimming the heap's top), and the next ``np.empty`` of that size faults every
page in again, which can cost more than the kernel itself (measurements: docs/performance.md). The same
idea as PyTorch's caching allocators and XLA's buffer pools.

The pool keeps at most ``$SYMGRAD_POOL_MB`` MiB (default 256; 0 turns it off) of unused blocks, reused by
exact size; a block that would not fit evicts the blocks kept longest, oldest size first, until it fits (a
call whose results together exceed the cap keeps its last blocks instead of losing all of them, and a
workload whose sizes change is not pinned to old ones). ``release()`` hands every unused block back to the
system, like ``torch.cuda.empty_cache()``; ``hold_at_least`` raises the cap where the variable does not
set it. Results are ordinary writeable, C-contiguous arrays whose ``base`` is the block's buffer, and start
on an ``ALIGN``-byte boundary: malloc's 16 bytes left 512-bit stores split across cache lines (softplus
``value_and_vjp`` 2-10 % slower, N = 1e5 to 1e6).
"""

from __future__ import annotations

import os
import threading

import _cffi_backend
import numpy as np

#: Results smaller than this (bytes) are plain ``np.empty`` arrays: glibc keeps such blocks mapped.
POOL_MIN = 1 << 18
#: Byte alignment of a pooled result: a cache line, and a 512-bit vector.
ALIGN = 64

_ffi = _cffi_backend.FFI()  # the compiled FFI: cffi.FFI() would import its C parser, slowing the import
_alloc = _ffi.new_allocator(should_clear_after_alloc=False)  # no zero-fill: the kernel writes every element
_UINTPTR = _ffi.typeof("uintptr_t")
_free: dict[int, list] = {}
_held = 0
_lock = threading.Lock()


def _capacity() -> int:
    try:
        return max(0, int(float(os.environ.get("SYMGRAD_POOL_MB") or "256") * (1 << 20)))
    except (ValueError, OverflowError):
        raise ValueError(
            f"SYMGRAD_POOL_MB={os.environ['SYMGRAD_POOL_MB']!r} is not a number of MiB"
        ) from None


_CAPACITY = _capacity()
_EXPLICIT = bool(os.environ.get("SYMGRAD_POOL_MB"))


def hold_at_least(nbytes: int) -> None:
    """Raise the cap to ``nbytes`` unless ``SYMGRAD_POOL_MB`` sets it: a caller that knows its working set
    (a Dask worker: the results of the chunks it runs at once, and one more) keeps those blocks instead of
    page-faulting them in afresh for every chunk. It never lowers the cap."""
    global _CAPACITY
    if not _EXPLICIT and nbytes > _CAPACITY:
        _CAPACITY = nbytes


def _give_back(block) -> None:
    """cffi's destructor of a pooled array's buffer: keep the block for the next result of its size. Runs
    where the last reference dies (any thread, or the cycle collector, maybe while ``empty`` holds the
    lock), so it takes none: a block is appended once, and a race with another thread can only miscount
    ``_held`` (the cap) by a block."""
    global _held
    size = len(block) - ALIGN
    for kept in list(_free):  # dicts keep insertion order: the size pooled first goes first
        blocks = _free.get(kept, [])
        while blocks and _held + size > _CAPACITY:
            blocks.pop(0)  # the block kept longest; cffi frees it
            _held -= kept
        if _held + size <= _CAPACITY:
            break
        _free.pop(kept, None)
    _free.setdefault(size, []).append(block)
    _held += size


def empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, from the pool when it is large (see the module docstring)."""
    size = dtype.itemsize
    for d in shape:
        size *= d
    if size < POOL_MIN or size > _CAPACITY:
        return np.empty(shape, dtype)
    global _held
    block = None
    with _lock:  # two threads must not take the same block
        blocks = _free.get(size)
        if blocks:
            block = blocks.pop()
            _held -= size
    if block is None:
        block = _alloc("char[]", size + ALIGN)
    skip = -int(_ffi.cast(_UINTPTR, block)) % ALIGN
    owner = _ffi.gc(block, _give_back)
    # the array keeps the buffer, the buffer keeps `owner` (not `block`): the destructor runs, and the block
    # comes back, only when the last view of it is gone
    return np.frombuffer(_ffi.buffer(owner, size + ALIGN), dtype, size // dtype.itemsize, skip).reshape(shape)


def release() -> int:
    """Hand every unused pooled block back to the system; returns the bytes released."""
    global _held
    with _lock:
        blocks = list(_free.values())  # a copy: a destructor may add to _free meanwhile
        _free.clear()
        _held = 0
    return sum(len(b) - ALIGN for same_size in blocks for b in same_size)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
