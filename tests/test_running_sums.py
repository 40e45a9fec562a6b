"""Running sums while tracing (``symgrad.compiler.running_sums``): ``e = e + term`` builds the Add SymPy
builds, in time linear in the number of terms (counted work: SymPy's term rebuilds, never wall time)."""

import random
import sys
from pathlib import Path

import pytest
import sympy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import large_models  # noqa: E402

X = sympy.symbols("x0:40", real=True)


def _term(rng: random.Random) -> sympy.Expr:
    """A random term: like terms, numbers, powers of numbers, functions, quotients, nested sums."""
    a, b = rng.sample(X, 2)
    return rng.choice(
        [
            lambda: rng.choice([1, -1, 2, 0.5, sympy.Rational(1, 3)]) * a,
            lambda: 4 * ((a - b) ** 2 + 1) ** -6 - 4 * ((a - b) ** 2 + 1) ** -3,
            lambda: rng.gauss(0, 1) * sympy.sin(a) * b,
            lambda: sympy.sqrt(2) * a + rng.choice([0, 1, 2.5]),
            lambda: sympy.Integer(rng.randint(-3, 3)),
            lambda: a / b - sympy.exp(a),
            lambda: sympy.Mul(2, a + b, evaluate=False),
            lambda: -sympy.tanh(a + 0.1),
            lambda: a * b,
        ]
    )()


@pytest.mark.parametrize("seed", range(6))
def test_running_sums_are_sympys_sums(seed, monkeypatch):
    """Sums built term by term (and a few terms at a time, from either side) are SymPy's own: the same
    arguments in the same order (``srepr``), with like terms that combine or cancel, numbers, infinities
    and unevaluated products among them; most steps take the fast path."""
    from symgrad.compiler import running_sums

    fast = [0]
    appended = running_sums._appended

    def counting(a, b):
        args = appended(a, b)
        fast[0] += args is not None
        return args

    monkeypatch.setattr(running_sums, "_appended", counting)
    rng = random.Random(seed)
    terms = [_term(rng) for _ in range(120)]

    def build() -> list[str]:
        e, sums = sympy.S.Zero, []
        for k, t in enumerate(terms):
            e = t + e if k % 17 == 0 else e + t
            e = e - terms[k // 2] if k % 11 == 0 else e
            sums.append(sympy.srepr(e))
        return sums + [sympy.srepr(e + sympy.oo), sympy.srepr(e + sympy.nan + X[0])]

    expected = build()
    sympy.core.cache.clear_cache()
    with running_sums.appending():
        assert sympy.Add.flatten.__func__ is running_sums._flatten
        assert build() == expected
    assert fast[0] >= 40, fast[0]
    assert sympy.Add.__dict__["flatten"] is running_sums._sympy_flatten


def test_tracing_a_running_sum_rebuilds_no_term(monkeypatch):
    """Tracing a 40-atom Lennard-Jones cluster (780 pairs added one at a time to the energy) evaluates a
    number of products linear in the pairs: SymPy's flatten rebuilt every term of the running sum at each
    step once they no longer fit its cache (373,000 products, 250 s; now under 10 per pair)."""
    built = [0]
    flatten = sympy.Mul.__dict__["flatten"].__func__

    def counting(cls, seq):
        built[0] += 1
        return flatten(cls, seq)

    monkeypatch.setattr(sympy.Mul, "flatten", classmethod(counting))
    sympy.core.cache.clear_cache()
    spec = large_models.lennard_jones(40, name="lj40_rs").trace()
    pairs = 40 * 39 // 2
    assert len(spec.outputs[0].exprs[0].args) == 2 * pairs
    assert built[0] <= 10 * pairs, built[0]
