"""Runtime overhead and MLP training speed, against hand-written NumPy and PyTorch eager when installed.

    python bench/bench_runtime.py [--steps 300] [--repeat 3]

1. The tape table, float64 and float32, 10-element tensors, forward + backward, symgrad vs PyTorch eager in
   interleaved rounds: one op alone (``x * y``, ``sin(x)``, ``x + 1``: backward's fixed cost included), a
   chain of 20 ops per op, the same 20-op formula as one compiled ``@sg.function`` node, and the chain with
   bare NumPy stand-in kernels (the tape's own cost, without the compiled-function boundary).
2. Time per 60k-sample epoch of a 784-128-10 MLP (float32, ReLU, cross-entropy, Adam) at batch 32 and 256,
   extrapolated from ``--steps`` steps on synthetic data: symgrad vs hand-written NumPy vs PyTorch eager.
Targets: <= 5 us per runtime op in the chain (fwd + bwd), <= 10 us per compiled node; MLP epoch within
1.2x of hand-written NumPy.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
from common import chain20, formula, optional_torch  # first: puts the checkout on sys.path

import symgrad as sg
from symgrad.runtime import elementwise

torch = optional_torch()

N_SAMPLES, N_IN, N_HIDDEN, N_OUT = 60_000, 784, 128, 10


class _BareKernel:
    """The compiled-function contract with bare NumPy kernels: isolates the tape's own overhead."""

    n_outputs = 1
    jacobian_saving = False  # the vjp path: forward and vjp are the bare NumPy functions
    origin = "bench_runtime.py"

    def __init__(self, name: str, forward: Callable, vjp: Callable) -> None:
        self.name, self._forward, self._vjp = name, forward, vjp
        self.backward_name = name.capitalize() + "Backward"

    def forward(self, *args):
        return (self._forward(*args),)

    def vjp(self, *args, needs_input_grad=None):
        return self._vjp(*args)


BARE = {
    "mul": _BareKernel("mul", np.multiply, lambda x, y, g: (g * y, g * x)),
    "add": _BareKernel("add", np.add, lambda x, y, g: (g, g)),
    "sin": _BareKernel("sin", np.sin, lambda x, g: (g * np.cos(x),)),
}


CHAIN, NODE = "chain op (20-op formula / 20)", "20-op formula as one node (torch: 20 ops)"


def _interleaved(cases: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Seconds per call of each case: the best of ``repeat`` rounds that run every case once in turn, so
    that a busy machine slows every column alike (each batch ~2 ms, after two warm-up calls)."""
    numbers = {}
    for name, fn in cases.items():
        fn()
        start = time.perf_counter()
        fn()
        numbers[name] = max(1, int(0.002 / max(time.perf_counter() - start, 1e-7)))
    best = dict.fromkeys(cases, math.inf)
    for _ in range(repeat):
        for name, fn in cases.items():
            start = time.perf_counter()
            for _ in range(numbers[name]):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / numbers[name])
    return best


def _tape_cases(x: object, y: object, seed: object, sin: Callable) -> dict[str, Callable[[], object]]:
    """The tape table's cases for one library (symgrad or torch) on tensors ``x``, ``y`` requiring grad."""
    return {
        "x * y": lambda: (x * y).backward(seed),
        "sin(x)": lambda: sin(x).backward(seed),
        "x + 1": lambda: (x + 1).backward(seed),
        CHAIN: lambda: formula(x, sin).backward(seed),
    }


def bench_tape(repeat: int) -> list[tuple[str, float, float]]:
    """(case, symgrad us, torch us) per case and dtype: one elementwise op forward + backward on 10-element
    tensors (a lone op pays backward's fixed cost; the chain spreads it over 20 ops), the 20-op formula as
    one compiled node, and the chain's ops with bare NumPy kernels (the tape's own cost)."""
    rows = []
    node = chain20.compiled()
    compiled = elementwise.primitives()
    for dtype in (np.float64, np.float32):
        a, b = np.linspace(0.1, 1.0, 10, dtype=dtype), np.linspace(1.0, 2.0, 10, dtype=dtype)
        x, y = sg.tensor(a, requires_grad=True), sg.tensor(b, requires_grad=True)
        seed = sg.tensor(np.ones(10, dtype))
        cases = {("sg", k): f for k, f in _tape_cases(x, y, seed, sg.Tensor.sin).items()}
        cases["sg", NODE] = lambda: node(x).backward(seed)
        if torch is not None:
            tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
            tseed = torch.ones(10, dtype=tx.dtype)
            cases.update({("torch", k): f for k, f in _tape_cases(tx, ty, tseed, torch.sin).items()})
        best = _interleaved(cases, repeat)
        saved = {k: compiled[k] for k in BARE}
        compiled.update(BARE)
        try:
            bare = _interleaved({"bare": cases["sg", CHAIN]}, repeat)["bare"]
        finally:
            compiled.update(saved)
        best["torch", NODE] = best.get(("torch", CHAIN), math.nan)  # torch: the formula's 20 ops, eager
        for name in dict.fromkeys(k for _, k in cases):
            per = 20 if name == CHAIN else 1
            t = best.get(("torch", name), math.nan)
            rows.append((f"{name}, {np.dtype(dtype).name}", best["sg", name] * 1e6 / per, t * 1e6 / per))
        rows.append((f"chain op, bare NumPy kernels, {np.dtype(dtype).name}", bare * 1e6 / 20, math.nan))
    return rows


# -- MLP --------------------------------------------------------------------------------------------------
def init_params(rng: np.random.Generator) -> list[np.ndarray]:
    """Linear layers' default init (U(-1/sqrt(fan_in), 1/sqrt(fan_in))): w1, b1, w2, b2."""
    shapes = [
        ((N_HIDDEN, N_IN), N_IN),
        ((N_HIDDEN,), N_IN),
        ((N_OUT, N_HIDDEN), N_HIDDEN),
        ((N_OUT,), N_HIDDEN),
    ]
    return [
        rng.uniform(-1, 1, shape).astype(np.float32) / np.float32(math.sqrt(fan_in))
        for shape, fan_in in shapes
    ]


class NumpyMLP:
    """The same network, loss and Adam written by hand in NumPy (the reference for the 1.2x target)."""

    def __init__(self, params: list[np.ndarray], lr: float = 1e-3) -> None:
        self.p = [p.copy() for p in params]
        self.m = [np.zeros_like(p) for p in self.p]
        self.v = [np.zeros_like(p) for p in self.p]
        self.t, self.lr = 0, lr

    def step(self, x: np.ndarray, y: np.ndarray) -> None:
        w1, b1, w2, b2 = self.p
        h = x @ w1.T
        h += b1
        a = np.maximum(h, 0)
        logits = a @ w2.T
        logits += b2
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        probs[np.arange(len(y)), y] -= 1
        probs /= len(y)
        da = probs @ w2
        da *= h > 0
        grads = [da.T @ x, da.sum(0), probs.T @ a, probs.sum(0)]
        self.t += 1
        c1, c2 = 1 - 0.9**self.t, math.sqrt(1 - 0.999**self.t)
        for p, g, m, v in zip(self.p, grads, self.m, self.v):
            m *= 0.9
            m += 0.1 * g
            v *= 0.999
            v += 0.001 * (g * g)
            denom = np.sqrt(v)
            denom /= c2
            denom += 1e-8
            update = m / denom
            update *= self.lr / c1
            p -= update


def symgrad_mlp(params: list[np.ndarray]) -> Callable[[np.ndarray, np.ndarray], None]:
    model = sg.nn.Sequential(sg.nn.Linear(N_IN, N_HIDDEN), sg.nn.ReLU(), sg.nn.Linear(N_HIDDEN, N_OUT))
    model.load_state_dict(dict(zip(("0.weight", "0.bias", "2.weight", "2.bias"), params)))
    opt = sg.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad()
        sg.nn.functional.cross_entropy(model(sg.from_numpy(x)), y).backward()
        opt.step()

    return step


def torch_mlp(params: list[np.ndarray]) -> Callable[[np.ndarray, np.ndarray], None]:
    model = torch.nn.Sequential(
        torch.nn.Linear(N_IN, N_HIDDEN), torch.nn.ReLU(), torch.nn.Linear(N_HIDDEN, N_OUT)
    )
    model.load_state_dict(
        {k: torch.tensor(p) for k, p in zip(("0.weight", "0.bias", "2.weight", "2.bias"), params)}
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()

    return step


def bench_mlp(batch: int, steps: int, repeat: int) -> dict[str, float]:
    """Seconds per 60k-sample epoch for each implementation."""
    rng = np.random.default_rng(0)
    x = rng.random((steps * batch, N_IN), dtype=np.float32)
    y = rng.integers(0, N_OUT, steps * batch)
    batches = [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(x), batch)]
    params = init_params(rng)
    steppers = {"symgrad": symgrad_mlp(params), "numpy": NumpyMLP(params).step}
    if torch is not None:
        steppers["torch"] = torch_mlp(params)
    for step in steppers.values():
        step(*batches[0])
    best = dict.fromkeys(steppers, math.inf)
    for _ in range(repeat):  # interleaved, so that a busy machine slows every column alike
        for name, step in steppers.items():
            start = time.perf_counter()
            for xb, yb in batches:
                step(xb, yb)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: seconds * N_SAMPLES / (steps * batch) for name, seconds in best.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=300, help="MLP steps timed per batch size (extrapolated)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100 MLP steps, 2 rounds")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeat = 100, 2

    print(
        f"backend: {sg.get_backend()}; torch: {torch.__version__ if torch is not None else 'not installed'}\n"
    )
    print(
        f"{'tape: fwd + bwd, 10 elements, us (best round)':<52} {'symgrad':>9} {'torch':>9} {'sg/torch':>9}"
    )
    for name, ours, theirs in bench_tape(max(args.repeat, 5)):
        print(f"{name:<52} {ours:>9.2f} {theirs:>9.2f} {ours / theirs:>9.2f}")
    print(
        f"\n{'MLP 784-128-10, s per 60k epoch':<32} {'symgrad':>9} {'numpy':>9} {'torch':>9} "
        f"{'sg/numpy':>9} {'sg/torch':>9}"
    )
    for batch in (32, 256):
        r = bench_mlp(batch, args.steps, args.repeat)
        t = r.get("torch", float("nan"))
        print(
            f"{'batch ' + str(batch):<32} {r['symgrad']:>9.3f} {r['numpy']:>9.3f} {t:>9.3f} "
            f"{r['symgrad'] / r['numpy']:>9.2f} {r['symgrad'] / t:>9.2f}"
        )


if __name__ == "__main__":
    main()
