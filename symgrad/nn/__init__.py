"""Neural-network building blocks (``sg.nn``), shaped like ``torch.nn``."""
from . import functional
from .layers import Activation, Linear, ReLU, Sequential, Sigmoid, Softplus, Tanh
from .module import Module
from .parameter import Parameter

__all__ = ["Module", "Parameter", "Linear", "Sequential", "Activation", "ReLU", "Tanh", "Sigmoid", "Softplus",
           "functional"]
