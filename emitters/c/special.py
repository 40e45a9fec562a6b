"""C helpers for the special functions libm lacks: digamma and polygamma, erfinv, erfcx, the modified Bessel
functions I0, I1 and their scaled forms, beta and betaln, the Hurwitz zeta function (``zeta.py``), and the
small ones (sinc, Mod, frac, J0/J1 for float). Templates in the form of ``text.HELPERS`` ((libm functions
called, C text); {T} type, {S} dtype suffix, {f} libm suffix, {one}/{zero}/{half} typed literals), merged
into it.

Each computes in double for both dtypes (the float one rounds once at the end: within 1 ulp of float where
the double one is within a few of double). A template is self-contained: what it needs besides libm it
defines itself, under names that carry its own (``sg_i0_cheb_f64``), so any set of them links together.
Sources are named in each comment; the accuracy measured against mpmath is in docs/numerics.md.
"""

from __future__ import annotations

from fractions import Fraction
from math import factorial

from symgrad.special_tables import (
    D_LARGE,
    D_SMALL,
    DIGAMMA_ASYMPTOTIC,
    I0_LARGE,
    I0_SMALL,
    I1_LARGE,
    I1_SMALL,
)

from .zeta import ZETA_HELPERS

#: B_2 .. B_16, the Bernoulli numbers of the asymptotic series of polygamma
_BERNOULLI = tuple(Fraction(p, q) for p, q in ((1, 6), (-1, 30), (1, 42), (-1, 30), (5, 66), (-691, 2730),
                                               (7, 6), (-3617, 510)))  # fmt: skip
_PI_POWERS = (3.141592653589793, 9.869604401089358, 31.00627668029982, 97.40909103400244, 306.01968478528147)


def _array(values) -> str:
    """A C initializer list, braces doubled for ``str.format``."""
    return "{{" + ", ".join(repr(float(v)) for v in values) + "}}"


def _polygamma_coefficients(n: int) -> list[Fraction]:
    """c_k of psi_n(x) ~ (-1)^(n+1) x^-n [(n-1)! + n!/(2x) + sum_k c_k x^-2k] (A&S 6.4.11), k = 1..8;
    for n = 0, psi(x) ~ log x - 1/(2x) - sum_k c_k x^-2k (A&S 6.3.18)."""
    if n == 0:
        return [b / (2 * k) for k, b in enumerate(_BERNOULLI, 1)]
    return [b * Fraction(factorial(2 * k + n - 1), factorial(2 * k)) for k, b in enumerate(_BERNOULLI, 1)]


_POLYGAMMA = f"""\
/* polygamma(n, x), n = 0..4 (n = 0: digamma), in double. x >= 20: the asymptotic series (Abramowitz & Stegun
   6.3.18, 6.4.11, Bernoulli numbers B2..B16); 0 <= x < 20: the recurrence psi_n(x) = psi_n(x + 1) -
   (-1)^n n!/x^(n+1) (A&S 6.4.6), whose terms all have one sign; x < 0: the reflection
   (-1)^n psi_n(1 - x) - psi_n(x) = pi d^n/dx^n cot(pi x) (A&S 6.4.7), with cot(pi x) from the exact
   reduction of x to [-1/2, 1/2]. */
static inline double @P@_pos_{{S}}(int n, double x)
{{{{
    static const double c[5][8] = {{{{{", ".join(_array(_polygamma_coefficients(n)) for n in range(5))}}}}};
    static const double fact[5] = {{{{1.0, 1.0, 2.0, 6.0, 24.0}}}};
    double acc = 0.0;
    while (x < 20.0) {{{{
        double p = x;
        for (int k = 0; k < n; k++) p *= x;
        acc += 1.0/p;
        x += 1.0;
    }}}}
    const double t = 1.0/x, t2 = t*t;
    double s = 0.0;
    for (int k = 7; k >= 0; k--) s = (s + c[n][k])*t2;
    if (n == 0) return log(x) - 0.5*t - s - acc;
    double tn = t;
    for (int k = 1; k < n; k++) tn *= t;
    return (n % 2 ? 1.0 : -1.0)*(tn*(fact[n - 1] + 0.5*fact[n]*t + s) + fact[n]*acc);
}}}}

static inline {{T}} @P@_{{S}}(int n, {{T}} x_)
{{{{
    const double x = x_;
    if (!(x < 0.0)) return ({{T}}) @P@_pos_{{S}}(n, x);
    double r = x - floor(x);
    if (r > 0.5) r -= 1.0;
    if (r == 0.0) return ({{T}}) (n % 2 ? INFINITY : NAN);  /* a pole: +inf from both sides for odd n */
    const double c = 1.0/tan({_PI_POWERS[0]!r}*r), s = 1.0 + c*c;
    double d;
    switch (n) {{{{
    case 0: d = {_PI_POWERS[0]!r}*c; break;
    case 1: d = -{_PI_POWERS[1]!r}*s; break;
    case 2: d = 2.0*{_PI_POWERS[2]!r}*s*c; break;
    case 3: d = -2.0*{_PI_POWERS[3]!r}*s*(2.0*c*c + s); break;
    default: d = 8.0*{_PI_POWERS[4]!r}*s*c*(c*c + 2.0*s); break;
    }}}}
    return ({{T}}) ((n % 2 ? -1.0 : 1.0)*@P@_pos_{{S}}(n, 1.0 - x) - d);
}}}}"""

_DIGAMMA_DIFFERENCE = """\
/* digamma(x + h) - digamma(x) in double, without the cancellation of the two digammas when h is small
   against x (the gradients of beta and betaln): for x, x + h > 0 both are shifted by the recurrence (A&S
   6.3.5) to >= 20, their differences summed as h/(x (x + h)); there the asymptotic series (A&S 6.3.18) is
   differenced term by term: log1p(h/x) + h/(2x(x + h)) - sum c_k (y^-2k - x^-2k), with
   a^k - b^k = (a - b) sum_j a^j b^(k-1-j) for a = y^-2, b = x^-2. Elsewhere the plain difference. */
static inline {T} sg_digamma_difference_{S}({T} x_, {T} h_)
{{
    static const double c[8] = @C@;
    double x = x_, y = x_ + (double) h_, acc = 0.0;
    const double h = h_;
    if (!(x > 0.0 && y > 0.0))
        return ({T}) (sg_digamma_difference_psi_{S}(0, y) - sg_digamma_difference_psi_{S}(0, x));
    while (x < 20.0 || y < 20.0) {{
        acc += h/(x*y);
        x += 1.0;
        y += 1.0;
    }}
    const double a = 1.0/(y*y), b = 1.0/(x*x), d = -(h/(x*y))*(1.0/x + 1.0/y);  /* a - b */
    double sk = 1.0, bk = b, sum = c[0];
    for (int k = 1; k < 8; k++) {{
        sk = a*sk + bk;
        bk *= b;
        sum += c[k]*sk;
    }}
    return ({T}) (log1p(h/x) + h/(2.0*x*y) - d*sum + acc);
}}"""

_ERFINV = """\
/* erfinv(x) in double: the single-precision polynomials of M. Giles, "Approximating the erfinv function"
   (GPU Computing Gems Jade, 2011) as the first guess; then for |x| <= 1/2 two Halley steps on erf(y) = |x|,
   above four Newton steps on log(erfc(y)) = log(1 - |x|) (1 - |x| is exact), which keep their relative
   accuracy up to |x| = 1 - 2^-53. */
static inline {T} sg_erfinv_{S}({T} x_)
{{
    const double x = x_, a = fabs(x);
    if (!(a < 1.0)) return ({T}) (a == 1.0 ? copysign(INFINITY, x) : NAN);
    double w = -log((1.0 - a)*(1.0 + a)), p;
    if (w < 5.0) {{
        w -= 2.5;
        p = 2.81022636e-08;
        p = p*w + 3.43273939e-07; p = p*w - 3.5233877e-06; p = p*w - 4.39150654e-06;
        p = p*w + 0.00021858087; p = p*w - 0.00125372503; p = p*w - 0.00417768164;
        p = p*w + 0.246640727; p = p*w + 1.50140941;
    }} else {{
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = p*w + 0.000100950558; p = p*w + 0.00134934322; p = p*w - 0.00367342844;
        p = p*w + 0.00573950773; p = p*w - 0.0076224613; p = p*w + 0.00943887047;
        p = p*w + 1.00167406; p = p*w + 2.83297682;
    }}
    double y = p*a;
    if (a <= 0.5) {{
        for (int k = 0; k < 2; k++) {{
            const double r = erf(y) - a;
            y -= r/(1.1283791670955126*exp(-y*y) + y*r);
        }}
    }} else {{
        const double lq = log(1.0 - a);
        for (int k = 0; k < 4; k++) {{
            const double e = erfc(y);
            y += (log(e) - lq)*e/(1.1283791670955126*exp(-y*y));
        }}
    }}
    return ({T}) copysign(y, x);
}}"""

_ERFCX = """\
/* erfcx(x) = exp(x^2) erfc(x) in double. |x| < 26: exp(x^2) with x^2 split exactly into hi + lo (Veltkamp
   and Dekker's exact product), exp(hi)*(1 + lo), times libm erfc; x >= 26: the asymptotic series
   (Abramowitz & Stegun 7.1.23), 9 terms; x < 0: erfcx(x) = 2 exp(x^2) - erfcx(-x) (A&S 7.1.2). */
static inline double @P@_expsq_{S}(double x)
{{
    const double c = 134217729.0*x, xh = c - (c - x), xl = x - xh, hi = x*x;
    const double lo = ((xh*xh - hi) + 2.0*xh*xl) + xl*xl;
    return exp(hi)*(1.0 + lo);
}}

static inline double @P@_double_{S}(double x)
{{
    if (x < -26.7) return INFINITY;  /* 2 exp(x^2) overflows from -26.63 on */
    const double a = fabs(x);
    double y;
    if (a < 26.0) {{
        y = @P@_expsq_{S}(a)*erfc(a);
    }} else {{
        const double t = 0.5/a/a;
        double s = 0.0;
        for (int k = 8; k >= 1; k--) s = (2*k - 1)*t*(1.0 - s);  /* 1 - s = sum (-1)^k (2k-1)!! t^k */
        y = (1.0 - s)*0.5641895835477563/a;
    }}
    return x < 0.0 ? 2.0*@P@_expsq_{S}(a) - y : y;
}}"""

_ERFCX_GRAD = """\
/* d erfcx/dx = 2x erfcx(x) - 2/sqrt(pi) in double: so below x = 2 (where it cancels by less than 10x);
   above, -2 K(x) erfcx(x), K(x) = (1/2)/(x + 1/(x + (3/2)/(x + ...))) the tail of the continued fraction
   sqrt(pi) erfcx(x) = 1/(x + K(x)) (Abramowitz & Stegun 7.1.14), 64 terms, which keeps its relative
   accuracy where the difference cancels. */
static inline {T} sg_erfcx_grad_{S}({T} x_)
{{
    const double x = x_, e = sg_erfcx_grad_double_{S}(x);
    if (!(x >= 2.0)) return ({T}) (2.0*x*e - 1.1283791670955126);
    double k = 0.0;
    for (int n = 64; n >= 1; n--) k = 0.5*n/(x + k);
    return ({T}) (-2.0*k*e);
}}"""

_CHEBYSHEV = """\
static inline double @P@_cheb_{S}(const double *c, int n, double t)  /* Clenshaw's recurrence */
{{
    double b1 = 0.0, b2 = 0.0;
    for (int k = n - 1; k >= 1; k--) {{
        const double b = 2.0*t*b1 - b2 + c[k];
        b2 = b1;
        b1 = b;
    }}
    return t*b1 - b2 + c[0];
}}"""


def _bessel_i(order: int, scaled: bool) -> str:
    """I0, I1, or their scaled forms exp(-|x|) I_n(x), in double (I_n(x) = exp(|x|) times the scaled one,
    multiplied in two halves so that it overflows only where I_n does)."""
    name = f"i{order}{'e' if scaled else ''}"
    small, large = (I0_SMALL, I0_LARGE) if order == 0 else (I1_SMALL, I1_LARGE)
    what = f"exp(-|x|) I{order}(x)" if scaled else f"I{order}(x)"
    tail = ["    y = copysign(y, x);"] if order else []
    if not scaled:
        tail += ["    const double h = exp(0.5*a);", "    y = y*h*h;"]
    return _chebyshev(
        name, what, ("a*", small, "/(1.0 + a)") if order else ("", small, ""), ("sqrt(a)", large), tail
    )


def _chebyshev(name: str, what: str, small: tuple, large: tuple, tail: list[str]) -> str:
    """A helper of one argument x, a = |x|: factor*cheb(small, a/4 - 1)/flattening up to 8,
    cheb(large, 16/a - 1)/divisor beyond, then the ``tail`` statements on ``y``."""
    (factor, s, flattening), (divisor, b) = small, large
    lines = [
        f"/* {what} in double: Chebyshev expansions in Cephes' scheme (symgrad/special_tables.py) */",
        _CHEBYSHEV,
        "",
        "static inline {T} @P@_{S}({T} x_)",
        "{{",
        f"    static const double small[{len(s)}] = {_array(s)};",
        f"    static const double large[{len(b)}] = {_array(b)};",
        "    const double x = x_, a = fabs(x);",
        f"    double y = a <= 8.0 ? {factor}@P@_cheb_{{S}}(small, {len(s)}, 0.25*a - 1.0){flattening}",
        f"                        : @P@_cheb_{{S}}(large, {len(b)}, 16.0/a - 1.0)/{divisor};",
        *tail,
        "    return ({T}) y;",
        "}}",
    ]
    return "\n".join(lines).replace("@P@", f"sg_{name}")


_BETALN = """\
/* log Gamma(x) - ((x - 1/2) log x - x + log(2 pi)/2) for x >= 10: Stirling's series (A&S 6.1.41) to x^-13 */
static inline double @P@_corr_{S}(double x)
{{
    const double t = 1.0/(x*x);
    const double u = 1.0/1188 + t*(-691.0/360360 + t/156.0);
    return (1.0/12 + t*(-1.0/360 + t*(1.0/1260 + t*(-1.0/1680 + t*u))))/x;
}}

/* log|B(a, b)| in double. With p <= q: the sum of lgamma while p <= 0 or q < 10; otherwise the Stirling
   terms of Gamma(q) and Gamma(p + q) cancel in closed form (as DiDonato and Morris do, TOMS 708: algdiv,
   betaln), so that large arguments keep their relative accuracy. */
static inline double @P@_ln_{S}(double a, double b)
{{
    const double p = a < b ? a : b, q = a < b ? b : a;
    if (!(p > 0.0) || q < 10.0) return lgamma(p) + lgamma(q) - lgamma(p + q);
    const double d = @P@_corr_{S}(q) - @P@_corr_{S}(p + q);
    if (p < 10.0) return lgamma(p) + d - (q - 0.5)*log1p(p/q) - p*log(p + q) + p;
    return 0.9189385332046728 - 0.5*log(p) + @P@_corr_{S}(p) + d - p*log1p(q/p) - (q - 0.5)*log1p(p/q);
}}"""

_BETA = """\
/* B(a, b) in double: for a, b > 0 exp of the log form where that is below 16 in magnitude (its error is
   |log B| times that of log B) or a + b > 171; else Gamma(a) Gamma(b)/Gamma(a + b), divided first (as
   Cephes beta.c). */
static inline {T} @P@_{S}({T} a_, {T} b_)
{{
    const double a = a_, b = b_;
    if (a > 0.0 && b > 0.0) {{
        const double l = @P@_ln_{S}(a, b);
        if (fabs(l) < 16.0 || a + b > 171.0) return ({T}) exp(l);
    }}
    const double s = tgamma(a + b);
    return ({T}) (a > b ? tgamma(a)/s*tgamma(b) : tgamma(b)/s*tgamma(a));
}}"""

_SMALL = {
    "sinc": (
        ("sin",),
        "/* sinc(x) = sin(x)/x, 1 at 0 (SymPy's, unnormalized) */\n"
        "static inline {T} sg_sinc_{S}({T} x)\n{{\n    return x == {zero} ? {one} : sin{f}(x)/x;\n}}",
    ),
    "Mod": (
        ("fmod",),
        "/* Mod(a, b): a - b*floor(a/b) with the sign of b (Python's %, numpy.mod): fmod, moved into b's\n"
        "   sign */\n"
        "static inline {T} sg_Mod_{S}({T} a, {T} b)\n{{\n    const {T} r = fmod{f}(a, b);\n"
        "    if (r == {zero}) return copysign{f}({zero}, b);\n"
        "    return (r < {zero}) != (b < {zero}) ? r + b : r;\n}}",
    ),
    "frac": (
        ("floor",),
        "/* frac(x) = x - floor(x) */\n"
        "static inline {T} sg_frac_{S}({T} x)\n{{\n    return x - floor{f}(x);\n}}",
    ),
}
for _n in (0, 1):  # glibc's j0f/j1f lose accuracy near their zeros: float rounds the double one
    _SMALL[f"j{_n}"] = (
        (f"j{_n}",),
        f"/* Bessel J{_n}: libm's double j{_n}, for float too (<math.h> declares it in XSI mode only) */\n"
        f"double j{_n}(double);\n"
        f"static inline {{T}} sg_j{_n}_{{S}}({{T}} x)\n{{{{\n    return ({{T}}) j{_n}((double) x);\n}}}}",
    )

_SMALL["root"] = (
    ("pow",),
    """\
/* real_root(x, n), integer n >= 4: pow(|x|, 1/n) corrected by one Newton step y -= (y - |x|/y^(n-1))/n
   (pow with the rounded exponent 1/n errs by 35 ulp at 1e300); the sign of x for odd n, NaN below 0 for
   even n */
static inline {T} sg_root_{S}({T} x_, {T} n_)
{{
    const double x = x_, a = fabs(x);
    const int n = (int) n_;
    if (x < 0.0 && n % 2 == 0) return ({T}) NAN;
    double y = pow(a, 1.0/n);
    if (y > 0.0 && y < INFINITY) {{
        double p = y;
        for (int k = 2; k < n; k++) p *= y;
        y -= (y - a/p)/n;
    }}
    return ({T}) copysign(y, x);
}}""",
)

#: name -> (libm functions called, C template), merged into ``text.HELPERS``
SPECIAL_HELPERS = {
    "polygamma": (("log", "tan", "floor"), _POLYGAMMA.replace("@P@", "sg_polygamma")),
    "digamma_difference": (
        ("log", "tan", "floor", "log1p"),
        _POLYGAMMA.replace("@P@", "sg_digamma_difference_psi")
        + "\n\n"
        + _DIGAMMA_DIFFERENCE.replace("@C@", _array(DIGAMMA_ASYMPTOTIC)),
    ),
    "erfinv": (("log", "sqrt", "erf", "erfc", "exp"), _ERFINV),
    "erfcx": (
        ("exp", "erfc"),
        _ERFCX.replace("@P@", "sg_erfcx")
        + "\n\nstatic inline {T} sg_erfcx_{S}({T} x)\n{{\n    return ({T}) sg_erfcx_double_{S}(x);\n}}",
    ),
    "erfcx_grad": (("exp", "erfc"), _ERFCX.replace("@P@", "sg_erfcx_grad") + "\n\n" + _ERFCX_GRAD),
    **{
        f"i{n}{'e' if s else ''}": (("sqrt", "exp") if not s else ("sqrt",), _bessel_i(n, s))
        for n in (0, 1)
        for s in (False, True)
    },
    "i0e_minus_i1e": (
        ("sqrt",),
        _chebyshev(
            "i0e_minus_i1e",
            "i0e(|x|) - i1e(|x|)",
            ("", D_SMALL, "/((1.0 + a)*sqrt(1.0 + a))"),
            ("(a*sqrt(a))", D_LARGE),
            [],
        ),
    ),
    "betaln": (
        ("lgamma", "log", "log1p"),
        _BETALN.replace("@P@", "sg_betaln")
        + "\n\nstatic inline {T} sg_betaln_{S}({T} a, {T} b)\n"
        + "{{\n    return ({T}) sg_betaln_ln_{S}(a, b);\n}}",
    ),
    "beta": (
        ("lgamma", "tgamma", "log", "log1p", "exp"),
        (_BETALN + "\n\n" + _BETA).replace("@P@", "sg_beta"),
    ),
    **_SMALL,
    **ZETA_HELPERS,  # sg.zeta (emitters/c/zeta.py)
}
