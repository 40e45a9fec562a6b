"""The special functions, one per function, for tests/test_special_functions.py."""

import symgrad as sg


@sg.function
def loggamma(x):
    return sg.loggamma(x)


@sg.function
def lgamma(x):
    return sg.lgamma(x)


@sg.function
def gamma(x):
    return sg.gamma(x)


@sg.function
def digamma(x):
    return sg.digamma(x)


@sg.function
def polygamma1(x):
    return sg.polygamma(1, x)


@sg.function
def polygamma2(x):
    return sg.polygamma(2, x)


@sg.function
def polygamma3(x):
    return sg.polygamma(3, x)


@sg.function
def beta(a, b):
    return sg.beta(a, b)


@sg.function
def betaln(a, b):
    return sg.betaln(a, b)


@sg.function
def exp2(x):
    return sg.exp2(x)


@sg.function
def log2(x):
    return sg.log2(x)


@sg.function
def log10(x):
    return sg.log10(x)


@sg.function
def cbrt(x):
    return sg.cbrt(x)


@sg.function
def real_root5(x):
    return sg.real_root(x, 5)


@sg.function
def heaviside(x):
    return sg.Heaviside(x)


@sg.function
def sinc(x):
    return sg.sinc(x)


@sg.function
def mod(x, y):
    return x % y


@sg.function
def frac(x):
    return sg.frac(x)


@sg.function
def erfinv(x):
    return sg.erfinv(x)


@sg.function
def erfcx(x):
    return sg.erfcx(x)


@sg.function
def j0(x):
    return sg.besselj(0, x)


@sg.function
def j1(x):
    return sg.besselj(1, x)


@sg.function
def i0(x):
    return sg.besseli(0, x)


@sg.function
def i1(x):
    return sg.besseli(1, x)


@sg.function
def i0e(x):
    return sg.i0e(x)


@sg.function
def i1e(x):
    return sg.i1e(x)


@sg.function(nondiff=("s",))
def zeta(s, q):
    return sg.zeta(s, q)
