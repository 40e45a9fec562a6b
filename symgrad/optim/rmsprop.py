"""``RMSprop`` exactly as ``torch.optim.RMSprop``: running mean of squared gradients, optional centering,
momentum and L2 weight decay; one fused compiled kernel per parameter (``optim/model.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from symgrad.optim.optimizer import Optimizer, run_rule


class RMSprop(Optimizer):
    """RMSprop (Hinton); ``centered`` divides by the gradient's running standard deviation instead."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
    ) -> None:
        for name, value in (
            ("learning rate", lr),
            ("epsilon value", eps),
            ("momentum value", momentum),
            ("weight_decay value", weight_decay),
            ("alpha value", alpha),
        ):
            if not 0.0 <= value:
                raise ValueError(f"Invalid {name}: {value}")
        defaults = dict(
            lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered, weight_decay=weight_decay
        )
        super().__init__(params, defaults)

    def step(self) -> None:
        """Update every parameter that has a gradient."""
        for group in self.param_groups:
            momentum, centered = group["momentum"], group["centered"]
            keys = ("square_avg",) + (("momentum_buffer",) if momentum > 0 else ())
            keys += ("grad_avg",) if centered else ()
            for p, state in self._stepped(group, keys):
                data = p.data
                grad_avg, buf = state.get("grad_avg", 0.0), state.get("momentum_buffer", 0.0)
                hyper = (group["alpha"], 1 - group["alpha"], group["eps"], group["weight_decay"], group["lr"])
                hyper += (momentum, 1.0 if centered else 0.0)
                args = (data, p.grad.data, state["square_avg"], grad_avg, buf, *map(float, hyper))
                outs = (data, state["square_avg"], grad_avg if centered else None)
                run_rule("rmsprop", args, (*outs, buf if momentum > 0 else None))
