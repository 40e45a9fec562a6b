"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad`` and ``state_dict`` as in
``torch.optim.Optimizer``; and the compiled update rules of ``optim/model.py``."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from symgrad.compiled import load_model
from symgrad.nn.module import zero_grads
from symgrad.runtime.inplace import bump

_MODEL = Path(__file__).with_name("model.py")
_compiled: dict[str, Any] = {}


def rules() -> dict[str, Any]:
    """The compiled update rules of ``optim/model.py`` by name (compiled on first use, then cached)."""
    if not _compiled:
        _compiled.update(load_model(_MODEL))
    return _compiled


def run_rule(name: str, args: tuple, outputs: tuple[np.ndarray | None, ...]) -> None:
    """Run rule ``name`` on ``args`` and copy its results into ``outputs`` in place (None: a result not
    kept): the parameter's array and its state arrays stay the same objects (large results come from the C
    backend's pool: no page faults); the parameter's version is bumped, as PyTorch's in-place update does."""
    rule = rules()[name]
    results = rule.run_same_shape("forward", args)
    if results is None:  # dtypes or shapes that differ (a float32 grad on a float64 parameter, a 0-d state)
        results = rule.forward(*args)
    for out, r in zip(outputs, results):
        if out is not None:
            out[...] = r
    bump(outputs[0])


class Optimizer:
    """Parameter groups (dicts with 'params' and per-group options) and per-parameter state."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: dict[Any, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        for group in groups if isinstance(groups[0], dict) else [{"params": groups}]:
            self.add_param_group(group)

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters (a dict with 'params'); options it omits take the defaults."""
        full = {**self.defaults, **group, "params": list(group["params"])}
        self.param_groups.append(full)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset ``.grad`` of every parameter: to None by default (as torch 2.x), else to zeros in place."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def _grads(self, group: dict[str, Any]) -> Iterable[tuple[Any, np.ndarray]]:
        """(parameter, gradient with weight decay added) for each parameter that has a gradient."""
        wd = group["weight_decay"]
        for p in group["params"]:
            if p.grad is not None:
                g = p.grad.data
                yield p, (g + wd * p.data if wd else g)

    def _stepped(self, group: dict[str, Any], keys: tuple[str, ...]) -> Iterable[tuple[Any, dict[str, Any]]]:
        """(parameter, its state with ``step`` advanced) for each parameter of ``group`` that has a gradient;
        a first step creates the state: zero arrays named ``keys``, shaped like the parameter."""
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state.get(p)
            if state is None:
                zeros = {k: np.zeros(p.data.shape, p.data.dtype) for k in keys}
                state = self.state[p] = {"step": 0, **zeros}
            state["step"] += 1
            yield p, state

    # -- persistence ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}`` as in PyTorch:
        parameters are numbered in group order; the state arrays are the optimizer's own (not copies)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            groups.append({**{k: v for k, v in group.items() if k != "params"}})
            groups[-1]["params"] = [index[id(p)] for p in group["params"]]
        return {"state": {index[id(p)]: s for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore state and options saved by ``state_dict`` (ours, or PyTorch's: its tensors are converted);
        state arrays are copied and cast to their parameter's dtype, ``step`` stays a number."""
        groups = self.param_groups
        saved = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved)):
            raise ValueError(
                "loaded state dict contains a parameter group "
                "that doesn't match the size of optimizer's group"
            )
        params = {i: p for g, s in zip(groups, saved) for i, p in zip(s["params"], g["params"])}
        self.state = {}
        for key, value in state_dict["state"].items():
            if key in params:
                p = params[key]
                self.state[p] = {k: _state_value(k, v, p.data.dtype) for k, v in value.items()}
        for group, new in zip(groups, saved):
            new["params"] = group["params"]
        self.param_groups = saved

    def __repr__(self) -> str:
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params")
        return "\n".join(lines) + "\n)"


def _state_value(key: str, value: Any, dtype: np.dtype) -> Any:
    """A saved state entry as this optimizer keeps it: arrays copied in the parameter's dtype, the step as a
    number."""
    if key == "step":
        return int(float(np.asarray(value)))
    if isinstance(value, (int, float)) or value is None:
        return value
    arr = np.asarray(value.data if hasattr(value, "_rg") else value)
    return np.array(arr, dtype=dtype if arr.dtype.kind == "f" else arr.dtype, copy=True)
