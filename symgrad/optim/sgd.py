"""``SGD``: stochastic gradient descent with momentum, dampening, Nesterov and L2 weight decay (in NumPy, in
place: one or two passes, nothing to fuse)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from symgrad.optim.optimizer import Optimizer
from symgrad.runtime.inplace import bump


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
        """Update every parameter that has a gradient."""
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
                bump(p.data)
