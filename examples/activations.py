"""Symbolic activations for ``mlp_digits.py``: symgrad derives and compiles their gradients."""

import symgrad as sg


@sg.function
def neo_relu(x):
    """x where x > 0, else the constant -0.1 (gradient exactly 0 there; no NaN from the untaken branch)."""
    return sg.where(x > 0, x, -0.1)


@sg.function
def softplus(x):
    """log(1 + exp(x)), written naively: symgrad emits the overflow-free form and derives sigmoid(x)."""
    return sg.log(1 + sg.exp(x))
