"""``Adam`` and ``AdamW`` exactly as ``torch.optim``'s: bias-corrected moments, L2 (Adam) or decoupled
(AdamW) weight decay, amsgrad; one fused compiled kernel per parameter (``optim/model.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from symgrad.optim.optimizer import Optimizer, run_rule

_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")


class Adam(Optimizer):
    """Adam (Kingma & Ba); ``decoupled_weight_decay=True`` is AdamW (Loshchilov & Hutter)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        decoupled_weight_decay: bool = False,
    ) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, {**defaults, "decoupled_weight_decay": decoupled_weight_decay})

    def step(self) -> None:
        """Update every parameter that has a gradient."""
        for group in self.param_groups:
            amsgrad = group["amsgrad"]
            keys = _STATE[: 3 if amsgrad else 2]
            for p, state in self._stepped(group, keys):
                data = p.data
                arrays = (data, p.grad.data, *(state[k] for k in keys))
                run_rule(
                    "adam_amsgrad" if amsgrad else "adam",
                    (*arrays, *_constants(group, state["step"])),
                    (data, *(state[k] for k in keys)),
                )


def _constants(group: dict[str, Any], step: int) -> tuple[float, ...]:
    """The rule's per-step constants, in float64: 1 - beta1, beta2, 1 - beta2, eps, L2 decay, decoupled
    decay factor, step size, sqrt of the second bias correction."""
    beta1, beta2 = group["betas"]
    lr, wd = group["lr"], group["weight_decay"]
    decoupled = group.get("decoupled_weight_decay", False)
    values = (
        1 - beta1,
        beta2,
        1 - beta2,
        group["eps"],
        0.0 if decoupled else wd,
        1 - lr * wd if decoupled else 1.0,
        lr / (1 - beta1**step),
        math.sqrt(1 - beta2**step),
    )
    return tuple(map(float, values))


class AdamW(Adam):
    """Adam with decoupled weight decay: the parameter shrinks by ``1 - lr * weight_decay`` each step
    (default 0.01) instead of the gradient receiving ``weight_decay * param``."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, decoupled_weight_decay=True)
