"""Large functions for compile-time measurements (bench/bench_compile.py) and tests: a Lennard-Jones cluster
written as one ``sg.Matrix(N, 3)`` function and a tanh network with its weights as Python floats."""

# no `from __future__ import annotations`: the annotations sg.Matrix(n, 3) read the closure's n
import random

import symgrad as sg


def lennard_jones(n: int, name: str | None = None) -> sg.SymbolicFunction:
    """Energy of an n-atom cluster: the sum over pairs of 4*(r**-12 - r**-6)."""

    def lj(x: sg.Matrix(n, 3)):
        e = 0
        for i in range(n):
            for j in range(i + 1, n):
                r = sg.sqrt(sum((x[i, k] - x[j, k]) ** 2 for k in range(3)))
                e = e + 4 * (r**-12 - r**-6)
        return e

    lj.__name__ = name or f"lj{n}"
    return sg.function(lj)


def tanh_mlp(
    layers: int, width: int, n_in: int = 20, seed: int = 0, name: str | None = None
) -> sg.SymbolicFunction:
    """A tanh network with its weights as Python floats, summed to one output."""
    rng = random.Random(seed)
    sizes = [n_in] + [width] * layers
    w = [[[rng.gauss(0, a**-0.5) for _ in range(a)] for _ in range(b)] for a, b in zip(sizes, sizes[1:])]

    def mlp(x: sg.Vector(n_in)):
        h = [x[i] for i in range(n_in)]
        for layer in w:
            h = [sg.tanh(sum(c * v for c, v in zip(row, h)) + 0.1) for row in layer]
        return sum(h)

    mlp.__name__ = name or f"mlp{layers}x{width}"
    return sg.function(mlp)
