"""Optimizers (``sg.optim``) with PyTorch's defaults and update rules, in place on NumPy arrays, and learning
rate schedulers (``sg.optim.lr_scheduler``).

Adam's, AdamW's and RMSprop's per-element rules are compiled by symgrad itself (``optim/model.py``): one
fused kernel per parameter."""

from symgrad.optim import lr_scheduler
from symgrad.optim.adam import Adam, AdamW
from symgrad.optim.optimizer import Optimizer
from symgrad.optim.rmsprop import RMSprop
from symgrad.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]


def __dir__() -> list[str]:
    """The public names, not the modules and helpers this module imports (``np``, ``Any``, ...)."""
    return sorted(__all__)
