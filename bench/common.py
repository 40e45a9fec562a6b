"""Shared by the bench scripts: timing, optional PyTorch/JAX, and the 20-op elementwise formula."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import symgrad as sg  # noqa: E402


def best_time(fn: Callable[[], object], repeats: int, budget: float = 0.05) -> float:
    """Seconds per call: the best of ``repeats`` batches, each about ``budget`` seconds long (after a warm-up
    call; the batch size comes from a second, warm call, not from the first, which may load kernels)."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, min(100_000, int(budget / once)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def best_cpu_time(fn: Callable[[], object], repeats: int, batch: int = 1) -> float:
    """CPU seconds per call (``process_time``: every thread of the process, none of the time spent waiting
    for a CPU, so other load on a shared machine does not inflate it): the best of ``repeats`` batches of
    ``batch`` calls, after a warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(batch):
            fn()
        best = min(best, (time.process_time() - start) / batch)
    return best


def optional_torch(threads: int | None = None):
    """The torch module, or None when it is not installed (the table then has no PyTorch column)."""
    try:
        import torch
    except ImportError:
        return None
    if threads:
        torch.set_num_threads(threads)
    return torch


def optional_jax(x64: bool = False):
    """(jax, jax.numpy), or (None, None) when JAX is not installed."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None, None
    if x64:
        jax.config.update("jax_enable_x64", True)
    return jax, jnp


def formula(x, sin):
    """20 elementwise ops: 5 x (multiply, add, sin, multiply by x)."""
    y = x
    for _ in range(5):
        y = sin(y * 1.1 + 0.2) * x
    return y


@sg.function
def chain20(x):
    return formula(x, sg.sin)
