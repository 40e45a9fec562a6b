"""Neural-network building blocks (``sg.nn``), shaped like ``torch.nn``."""

from symgrad.nn import functional, utils
from symgrad.nn.containers import ModuleDict, ModuleList
from symgrad.nn.layers import (
    GELU,
    Activation,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
    Softplus,
    Tanh,
)
from symgrad.nn.loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from symgrad.nn.module import Module
from symgrad.nn.parameter import Parameter

__all__ = [
    "Module",
    "Parameter",
    "Linear",
    "Sequential",
    "ModuleList",
    "ModuleDict",
    "Activation",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "Softplus",
    "GELU",
    "SiLU",
    "Dropout",
    "LayerNorm",
    "Embedding",
    "MSELoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCEWithLogitsLoss",
    "functional",
    "utils",
]


def __dir__() -> list[str]:
    """The public names, not the modules and helpers this module imports (``np``, ``Any``, ...)."""
    return sorted(__all__)
