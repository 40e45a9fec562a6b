"""Fused array updates a backend may offer the tape, by name, set when the backend loads them.

``MUL_ADD[0]``: ``mul_add(acc, g, j) -> bool``, ``acc += g * j`` in place, rounded as NumPy's two steps are,
on float arrays of one dtype and element count (``acc`` contiguous and writable; ``g`` and ``j`` contiguous or
equally spaced, such as a column of a Jacobian); False, with ``acc`` untouched, for any other arguments. The
C backend's direct-call extension provides it (``symgrad.backends.c.direct``): one call instead of NumPy's
multiply and in-place add, a third of a small tape op's gradient accumulation. None until it is loaded
(the NumPy backend never loads it).

``MUL_ADD_SUM[0]``: ``mul_add_sum(acc, g, jacobian, k) -> bool``, ``acc += np.add.reduce(g * jacobian[..., 0,
k])`` over the leading axes of ``g`` that ``acc`` does not have (a broadcast input's gradient), rounded as
NumPy's reduction is; the caller checks that the summed axes lead (``arguments.leading_sum``). Same
provider and refusals.
"""

from __future__ import annotations

from collections.abc import Callable

MUL_ADD: list[Callable[..., bool] | None] = [None]
MUL_ADD_SUM: list[Callable[..., bool] | None] = [None]
