"""Calls with lazy arrays (Dask): the array entry points of ``CompiledFunction`` hand them to an adapter.

``LAZY_ADAPTERS`` maps the top-level package of an argument's type to the adapter that builds the lazy
result (a plugin table: this stage imports no such package). A package is looked for among the arguments
only once it is imported (a Dask array cannot exist before), so a call on NumPy arrays never imports Dask
and pays one ``sys.modules`` lookup per registered package.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any

#: package of the argument types -> (adapter module, function ``call(fn, method, args, kwargs)``)
LAZY_ADAPTERS = {"dask": ("symgrad.interop.dask", "call")}


#: the top-level package of each argument type met so far (``type.__module__`` costs more than a lookup)
_packages: dict[type, str] = {}


def _holds(package: str, values: Any) -> bool:
    """Whether ``values`` (arguments, one level of tuples and lists included) hold a ``package`` object."""
    for v in values:
        t = type(v)
        owner = _packages.get(t)
        if owner is None:
            owner = _packages[t] = t.__module__.partition(".")[0]
        if owner == package or ((t is tuple or t is list) and _holds(package, v)):
            return True
    return False


def lazy_arrays(method: Callable) -> Callable:
    """Decorate an entry point: a call with an argument of a ``LAZY_ADAPTERS`` package runs that adapter's
    ``call(fn, method.__name__, args, kwargs)`` instead."""
    name = method.__name__

    @functools.wraps(method)
    def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
        for package, (module, attr) in LAZY_ADAPTERS.items():
            if package in sys.modules and (
                _holds(package, args) or (kwargs and _holds(package, kwargs.values()))
            ):
                return getattr(importlib.import_module(module), attr)(self, name, args, kwargs)
        return method(self, *args, **kwargs)

    return entry
