"""Activation and loss functions as users write them (naive forms on purpose: symgrad must stabilise them)."""

import symgrad as sg


@sg.function
def sigmoid(x):
    return 1 / (1 + sg.exp(-x))


@sg.function
def tanh(x):
    return sg.tanh(x)


@sg.function
def softplus(x):
    return sg.log(1 + sg.exp(x))


@sg.function
def silu(x):
    return x / (1 + sg.exp(-x))


@sg.function
def mish(x):
    return x * sg.tanh(sg.log(1 + sg.exp(x)))


@sg.function
def gelu_erf(x):
    return 0.5 * x * (1 + sg.erf(x / sg.sqrt(2)))


@sg.function
def gelu_tanh(x):
    return 0.5 * x * (1 + sg.tanh(sg.sqrt(2 / sg.pi) * (x + 0.044715 * x**3)))


@sg.function
def elu(x):
    return sg.where(x > 0, x, sg.exp(x) - 1)


@sg.function
def selu(x):
    return 1.0507009873554805 * sg.where(x > 0, x, 1.6732632423543772 * (sg.exp(x) - 1))


@sg.function
def celu(x):
    return sg.where(x > 0, x, 1.5 * (sg.exp(x / 1.5) - 1))


@sg.function
def hardswish(x):
    return x * sg.clamp(x + 3, 0, 6) / 6


@sg.function
def hardsigmoid(x):
    return sg.clamp(x / 6 + 0.5, 0, 1)


@sg.function
def logsigmoid(x):
    return sg.log(1 / (1 + sg.exp(-x)))


@sg.function
def softsign(x):
    return x / (1 + sg.Abs(x))


@sg.function
def tanhshrink(x):
    return x - sg.tanh(x)


@sg.function
def leaky_relu(x):
    return sg.where(x > 0, x, 0.01 * x)


@sg.function
def relu(x):
    return sg.Max(x, 0)


@sg.function
def relu6(x):
    return sg.Min(sg.Max(x, 0), 6)


@sg.function
def softshrink(x):
    return sg.where(x > 0.5, x - 0.5, sg.where(x < -0.5, x + 0.5, 0))


@sg.function
def gaussian(x):
    return sg.exp(-(x**2))


@sg.function
def sinc(x):
    return sg.where(sg.Ne(x, 0), sg.sin(x) / x, 1)


@sg.function
def swish_beta(x):
    return x * sg.sigmoid(1.5 * x)


@sg.function
def atan2(y, x):
    return sg.atan2(y, x)


@sg.function
def hypot(x, y):
    return sg.sqrt(x**2 + y**2)


@sg.function
def logaddexp(x, y):
    return sg.log(sg.exp(x) + sg.exp(y))


@sg.function
def power(x, y):
    return x**y


@sg.function
def xlogy(x, y):
    return sg.xlogy(x, y)


@sg.function
def huber(x, t):
    d = x - t
    return sg.where(sg.Abs(d) < 1, 0.5 * d**2, sg.Abs(d) - 0.5)


@sg.function
def bce_with_logits(x, t):
    return sg.Max(x, 0) - x * t + sg.log(1 + sg.exp(-sg.Abs(x)))


@sg.function
def mse(x, t):
    return (x - t) ** 2
