"""The C helper of the Hurwitz zeta function (``sg.zeta``), merged into ``special.SPECIAL_HELPERS``."""

from __future__ import annotations

from symgrad.special_tables import ZETA_EULER_MACLAURIN

_HURWITZ_ZETA = """\
/* Hurwitz zeta(s, q) = sum_k (k + q)^-s in double: the algorithm of Cephes zeta.c (S. L. Moshier), as SciPy's
   scipy.special.zeta runs it. The direct sum to k >= 9 and k + q > 9, then the Euler-Maclaurin tail with the
   Bernoulli terms (2k)!/B_2k (symgrad/special_tables.py); for q > 1e8 the asymptotic expansion (DLMF
   25.11.43) to the q^-2 term (Cephes stops at q^-1, 90 ulp off at s = 50). NaN for s < 1 and for q <= 0
   with s not an integer, +inf at s == 1 and at q = 0, -1, -2, ... (SciPy's domain). */
static inline {T} sg_hurwitz_zeta_{S}({T} s_, {T} q_)
{{
    static const double A[12] = @A@;
    const double x = s_, q = q_, machep = 1.1102230246251565e-16;
    if (x == 1.0) return ({T}) INFINITY;
    if (!(x > 1.0)) return ({T}) NAN;
    if (q <= 0.0) {{
        if (q == floor(q)) return ({T}) INFINITY;
        if (x != floor(x)) return ({T}) NAN;  /* (k + q)^-s is complex */
    }}
    if (q > 1e8) return ({T}) ((1.0/(x - 1.0) + 0.5/q + x/(12.0*q*q))*pow(q, 1.0 - x));
    double sum = pow(q, -x), a = q, b = 0.0;
    int i = 0;
    while (i < 9 || a <= 9.0) {{
        i += 1;
        a += 1.0;
        b = pow(a, -x);
        sum += b;
        if (fabs(b/sum) < machep) return ({T}) sum;
    }}
    const double w = a;
    sum += b*w/(x - 1.0);
    sum -= 0.5*b;
    double f = 1.0, k = 0.0;
    for (int j = 0; j < 12; j++) {{
        f *= x + k;
        b /= w;
        const double t = f*b/A[j];
        sum += t;
        if (fabs(t/sum) < machep) break;
        k += 1.0;
        f *= x + k;
        b /= w;
        k += 1.0;
    }}
    return ({T}) sum;
}}"""

#: name -> (libm functions called, C template)
ZETA_HELPERS = {
    "hurwitz_zeta": (
        ("pow", "floor"),
        _HURWITZ_ZETA.replace("@A@", "{{" + ", ".join(repr(v) for v in ZETA_EULER_MACLAURIN) + "}}"),
    ),
}
