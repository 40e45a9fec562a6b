"""The runtime's own elementwise primitives, written as a symgrad model file.

``sg.compile`` derives and compiles every gradient here; the runtime contains no elementwise derivative
formula of its own. Each Tensor operator or math method is one call of one of these functions.
"""

import symgrad as sg


@sg.function
def neg(x):
    return -x


@sg.function
def add(x, y):
    return x + y


@sg.function
def sub(x, y):
    return x - y


@sg.function
def mul(x, y):
    return x * y


@sg.function
def div(x, y):
    return x / y


@sg.function
def pow(x, y):  # noqa: A001  (the runtime's name for **)
    return x**y


@sg.function
def square(x):
    return x**2


@sg.function
def reciprocal(x):
    return 1 / x


@sg.function
def exp(x):
    return sg.exp(x)


@sg.function
def expm1(x):
    return sg.expm1(x)


@sg.function
def log(x):
    return sg.log(x)


@sg.function
def log1p(x):
    return sg.log1p(x)


@sg.function
def sqrt(x):
    return sg.sqrt(x)


@sg.function
def sin(x):
    return sg.sin(x)


@sg.function
def cos(x):
    return sg.cos(x)


@sg.function
def tan(x):
    return sg.tan(x)


@sg.function
def tanh(x):
    return sg.tanh(x)


@sg.function
def sigmoid(x):
    return sg.sigmoid(x)


@sg.function
def softplus(x):
    return sg.softplus(x)


@sg.function
def relu(x):
    return sg.relu(x)


@sg.function
def abs(x):  # noqa: A001
    return sg.abs(x)


@sg.function
def sign(x):
    return sg.sign(x)


@sg.function
def maximum(x, y):
    return sg.maximum(x, y)


@sg.function
def minimum(x, y):
    return sg.minimum(x, y)
