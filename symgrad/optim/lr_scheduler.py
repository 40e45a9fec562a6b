"""Learning-rate schedulers (``sg.optim.lr_scheduler``), step for step ``torch.optim.lr_scheduler``'s:
``StepLR``, ``CosineAnnealingLR`` (PyTorch's recursive form) and ``LambdaLR``.

Call ``scheduler.step()`` after ``optimizer.step()``, once per epoch; ``get_last_lr()`` gives the learning
rates it set.
"""

from __future__ import annotations

import math
import types
import warnings
import weakref
from collections.abc import Callable
from functools import wraps
from typing import Any

from symgrad.optim.optimizer import Optimizer

_ORDER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. You should call them in the "
    "opposite order: `optimizer.step()` before `lr_scheduler.step()`.  Failure to do this will result in "
    "skipping the first value of the learning rate schedule (as in PyTorch 1.1.0 and later)."
)


class LRScheduler:
    """Sets ``lr`` of every parameter group of ``optimizer`` at each ``step()`` from ``get_lr()``."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        for i, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise KeyError(
                    f"param 'initial_lr' is not specified in param_groups[{i}] when resuming scheduler with "
                    "last_epoch >= 0."
                )
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        _track_optimizer_steps(optimizer)
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    def get_lr(self) -> list[float]:
        """The learning rates for epoch ``last_epoch`` (already advanced by ``step``)."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step()`` set."""
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or, deprecated in PyTorch, jump to ``epoch``) and set the new rates."""
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            warnings.warn(_ORDER_WARNING, UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", self.get_lr)
            values = closed_form()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """Every attribute except the optimizer."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


def _track_optimizer_steps(optimizer: Optimizer) -> None:
    """Wrap ``optimizer.step`` once so that a scheduler can tell whether it was called (for the warning)."""
    if hasattr(optimizer.step, "_wrapped_by_lr_sched"):
        return
    ref = weakref.ref(optimizer)
    step = type(optimizer).step

    @wraps(step)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        opt = ref()
        opt._opt_called = True  # type: ignore[union-attr]
        return step(opt, *args, **kwargs)

    wrapper._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    optimizer.step = wrapper  # type: ignore[method-assign]


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(
        self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Anneal from the initial rate to ``eta_min`` over ``T_max`` epochs along half a cosine (and back up
    after, periodically), by PyTorch's recursive update."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups, t, t_max, low = self.optimizer.param_groups, self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return [group["lr"] for group in groups]
        if self._step_count == 1 and t > 0:
            return [low + (base - low) * (1 + math.cos(t * math.pi / t_max)) / 2 for base in self.base_lrs]
        if (t - 1 - t_max) % (2 * t_max) == 0:
            return [
                group["lr"] + (base - low) * (1 - math.cos(math.pi / t_max)) / 2
                for base, group in zip(self.base_lrs, groups, strict=True)
            ]
        ratio = (1 + math.cos(math.pi * t / t_max)) / (1 + math.cos(math.pi * (t - 1) / t_max))
        return [ratio * (group["lr"] - low) + low for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        cos = math.cos(math.pi * self.last_epoch / self.T_max)
        return [self.eta_min + (base - self.eta_min) * (1 + cos) / 2 for base in self.base_lrs]


class LambdaLR(LRScheduler):
    """The initial rate times ``lr_lambda(epoch)`` (one function, or one per parameter group)."""

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        groups = optimizer.param_groups
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * len(groups)
        elif len(lr_lambda) != len(groups):
            raise ValueError(f"Expected {len(groups)} lr_lambdas, but got {len(lr_lambda)}")
        else:
            self.lr_lambdas = list(lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        """As the base class, with plain functions left out (None) and callable objects' attributes kept."""
        state = {key: value for key, value in self.__dict__.items() if key not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) else fn.__dict__.copy() for fn in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for fn, saved in zip(self.lr_lambdas, lambdas):
            if saved is not None:
                fn.__dict__.update(saved)


__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR"]
