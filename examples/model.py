"""Example model: forward functions written with SymPy; symgrad derives and compiles their gradients.

    symgrad compile examples/model.py     # -> examples/model_symgrad/
    symgrad show examples/model.py softplus
    symgrad check examples/model.py
Each function is traced once with SymPy symbols; nothing here runs numerically.
"""

import symgrad as sg


@sg.function
def square(x):
    return x**2


@sg.function
def neo_relu(x):
    """NeoReLU: x if x > 0 else -0.1."""
    return sg.where(x > 0, x, -0.1)


@sg.function
def softplus(x):
    """log(1 + exp(x)); symgrad rewrites it to its overflow-free form."""
    return sg.log(1 + sg.exp(x))


@sg.function
def blend(x, y):
    return sg.sin(x) * sg.exp(-(y**2)) + sg.log(1 + x**2 * y**2)


@sg.function
def gelu_tanh(x):
    """GELU, tanh approximation."""
    return 0.5 * x * (1 + sg.tanh(sg.sqrt(2 / sg.pi) * (x + 0.044715 * x**3)))


@sg.function
def polar(r, theta):
    """Two outputs: (x, y) from polar coordinates."""
    return r * sg.cos(theta), r * sg.sin(theta)
