"""Neural-network building blocks (``sg.nn``), shaped like ``torch.nn``."""

from symgrad.nn import functional
from symgrad.nn.layers import Activation, Linear, ReLU, Sequential, Sigmoid, Softplus, Tanh
from symgrad.nn.module import Module
from symgrad.nn.parameter import Parameter

__all__ = [
    "Module",
    "Parameter",
    "Linear",
    "Sequential",
    "Activation",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "Softplus",
    "functional",
]
