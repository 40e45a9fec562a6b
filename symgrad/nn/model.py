"""``sg.nn``'s own elementwise functions, written as a symgrad model file.

``sg.nn.functional`` compiles this file on first use (as the runtime does ``elementwise_model.py``); every
derivative here is derived by symgrad, none is written by hand. The forms are the stable ones:
- ``gelu``: ``x * Phi(x)`` with the normal CDF ``Phi(x) = erfc(-x/sqrt(2))/2``, equal to PyTorch's
  ``x/2 * (1 + erf(x/sqrt(2)))`` but without its cancellation for negative x (PyTorch's float32 value is
  exactly 0 below about -5.9 and has only a few correct bits before that; this keeps the tail);
- ``gelu_tanh``: PyTorch's ``approximate='tanh'`` with ``(1 + tanh(u))/2`` written as ``sigmoid(2u)``;
- the logistic loss as ``(1 - y) x - logsigmoid(x)`` (PyTorch's ``binary_cross_entropy_with_logits``): no
  overflow for any logit, gradient ``sigmoid(x) - y``.
"""

import symgrad as sg

_SQRT_2_OVER_PI = sg.sqrt(2 / sg.pi)


@sg.function
def gelu(x):
    # the normal CDF from erfc of |x| on both sides (SymPy would rewrite erfc(-x) as 2 - erfc(x))
    tail = sg.erfc(sg.abs(x) / sg.sqrt(2)) / 2
    return x * sg.where(x < 0, tail, 1 - tail)


@sg.function
def gelu_tanh(x):
    return x * sg.sigmoid(2 * _SQRT_2_OVER_PI * (x + 0.044715 * x**3))


@sg.function
def silu(x):
    return x * sg.sigmoid(x)


@sg.function
def bce_with_logits(x, target):
    return (1 - target) * x - sg.logsigmoid(x)


@sg.function
def bce_with_logits_pos_weight(x, target, pos_weight):
    """The positive term weighted: ``(1 - y) x - (1 + (pos_weight - 1) y) logsigmoid(x)``."""
    return (1 - target) * x - (1 + (pos_weight - 1) * target) * sg.logsigmoid(x)
