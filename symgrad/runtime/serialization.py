"""``save`` and ``load`` (``torch.save``/``torch.load`` for state dicts and checkpoints): one NumPy ``.npz``
file read back with ``allow_pickle=False``, so loading a file never runs code from it.

A flat dict of name -> Tensor, array or number (a ``state_dict()``) is stored one array per name, readable
by ``np.load`` too. Anything else built of dicts, lists and tuples around tensors, arrays, numbers, strings
and None (``{"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}``) is stored as its
arrays plus a JSON description of the structure. Loading gives Tensors where tensors or arrays were saved.
The file is written to ``path`` exactly (NumPy alone would add ``.npz``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from symgrad.runtime.tensor import Tensor

_TREE = "__symgrad_tree__"
_PLAIN = (str, int, float, bool, type(None))


def _as_array(value: Any) -> np.ndarray | None:
    data = value.data if isinstance(value, Tensor) else value
    if isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind in "biufc":
        return np.asarray(data)
    return None


def _encode(obj: Any, arrays: dict, where: str) -> Any:
    """``obj`` as JSON-ready data, its arrays moved into ``arrays`` (named by number)."""
    array = _as_array(obj)
    if array is not None:
        arrays[str(len(arrays))] = array
        return {"array": str(len(arrays) - 1)}
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise TypeError(f"sg.save: the keys of {where} must be strings or integers")
        return {"dict": [[k, _encode(v, arrays, f"{where}[{k!r}]")] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(obj)]
        return {"list" if isinstance(obj, list) else "tuple": items}
    if isinstance(obj, _PLAIN):
        return {"value": obj}
    raise TypeError(
        f"sg.save: {where} is a {type(obj).__name__}; only tensors, arrays, numbers, strings and None, in "
        "dicts, lists and tuples, can be saved (save model.state_dict() and rebuild the model in code)"
    )


def _decode(node: dict, npz: Any) -> Any:
    kind, body = next(iter(node.items()))
    if kind == "array":
        return Tensor(npz[body])
    if kind == "dict":
        return {k: _decode(v, npz) for k, v in body}
    if kind in ("list", "tuple"):
        items = [_decode(v, npz) for v in body]
        return items if kind == "list" else tuple(items)
    return body


def save(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` (a ``state_dict()``, or a checkpoint of dicts and lists around tensors) to ``path``."""
    flat = isinstance(obj, dict) and all(
        isinstance(k, str) and k != _TREE and (_as_array(v) is not None or isinstance(v, (int, float)))
        for k, v in obj.items()
    )
    if flat:
        arrays = {k: np.asarray(getattr(v, "data", v)) for k, v in obj.items()}
    else:
        arrays = {}
        arrays[_TREE] = np.array(json.dumps(_encode(obj, arrays, "the object")))
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load(path: str | os.PathLike, map_location: Any = None, weights_only: bool = True) -> Any:
    """Read a file written by ``save``, tensors as Tensors (``map_location`` and ``weights_only`` are
    accepted for PyTorch's signature: everything loads to the CPU and only arrays and JSON are read)."""
    with np.load(path, allow_pickle=False) as npz:
        if _TREE in npz.files:
            return _decode(json.loads(str(npz[_TREE])), npz)
        return {name: Tensor(npz[name]) for name in npz.files}
