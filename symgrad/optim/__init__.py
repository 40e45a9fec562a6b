"""Optimizers (``sg.optim``): SGD and Adam with PyTorch's defaults and update rules, in place on NumPy arrays.

Adam's per-element rule is compiled by symgrad itself (``optim/model.py``): one fused kernel per parameter."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from symgrad.compiled import load_model

_MODEL = Path(__file__).with_name("model.py")
_compiled: dict[str, Any] = {}
_ADAM_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")


def _rules() -> dict[str, Any]:
    """The compiled update rules of ``optim/model.py`` by name (compiled on first use, then cached)."""
    if not _compiled:
        _compiled.update(load_model(_MODEL))
    return _compiled


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
        full = {**self.defaults, **group, "params": list(group["params"])}
        self.param_groups.append(full)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset ``.grad`` of every parameter (to None by default, as torch does)."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.data[...] = 0

    def _grads(self, group: dict[str, Any]) -> Iterable[tuple[Any, np.ndarray]]:
        """(parameter, gradient with weight decay added) for each parameter that has a gradient."""
        wd = group["weight_decay"]
        for p in group["params"]:
            if p.grad is not None:
                g = p.grad.data
                yield p, (g + wd * p.data if wd else g)


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (dampening, Nesterov) and L2 weight decay."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(
            params,
            dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov),
        )

    def step(self) -> None:
        for group in self.param_groups:
            momentum, lr = group["momentum"], group["lr"]
            for p, g in self._grads(group):
                if momentum:
                    state = self.state.setdefault(p, {})
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = np.array(g, copy=True)
                    else:
                        buf *= momentum
                        buf += (1 - group["dampening"]) * g
                    g = g + momentum * buf if group["nesterov"] else buf
                p.data -= lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba) exactly as ``torch.optim.Adam``: bias-corrected moments, L2 weight decay,
    amsgrad."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Invalid beta parameters: {betas}")
        super().__init__(
            params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        )

    def step(self) -> None:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            amsgrad = group["amsgrad"]
            rule = _rules()["adam_amsgrad" if amsgrad else "adam"]
            keys = _ADAM_STATE[: 3 if amsgrad else 2]
            for p in group["params"]:
                if p.grad is None:
                    continue
                data = p.data
                state = self.state.get(p)
                if state is None:
                    state = self.state[p] = {"step": 0, **{k: np.zeros(data.shape, data.dtype) for k in keys}}
                state["step"] += 1
                step = state["step"]
                hyper = tuple(
                    map(
                        float,
                        (
                            1 - beta1,
                            beta2,
                            1 - beta2,
                            group["eps"],
                            group["weight_decay"],
                            group["lr"] / (1 - beta1**step),
                            math.sqrt(1 - beta2**step),
                        ),
                    )
                )
                args = (data, p.grad.data, *(state[k] for k in keys), *hyper)
                # one fused kernel, its results copied back in place: the parameter's array and its state
                # arrays stay the same objects (large results come from the C backend's pool: no page faults)
                results = rule.run_same_shape("forward", args)
                if results is None:  # dtypes that differ (a float32 grad on a float64 parameter)
                    results = rule.forward(*args)
                data[...] = results[0]
                for k, r in zip(keys, results[1:]):
                    state[k][...] = r
