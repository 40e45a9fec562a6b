"""Runtime overhead and MLP training speed, against hand-written NumPy and PyTorch eager when installed.

    python bench/bench_runtime.py [--steps 300] [--repeat 3] [--tape-only] [--baseline /path/to/checkout]

1. The tape table, float64 and float32, 10-element tensors, forward + backward, symgrad vs PyTorch eager in
   interleaved rounds, CPU time (``process_time``: what other load on a shared machine does not add to):
   every elementwise op kind alone (each unary math method, each binary operator on same-shape tensors and
   broadcast against a (1,) or (3, 10) tensor, a Python number; backward's fixed cost included, seeded with
   ones), ``sin(x).sum().backward()``, a chain of 20 ops per op, the same 20-op formula as one compiled
   ``@sg.function`` node, and the chain with bare NumPy stand-in kernels (the tape's own cost).
   ``--baseline PATH``: the symgrad column of another checkout too (before/after), each measured in child
   processes that alternate with this checkout's, best of ``--rounds`` each.
2. Time per 60k-sample epoch of a 784-128-10 MLP (float32, ReLU, cross-entropy, Adam) at batch 32 and 256,
   extrapolated from ``--steps`` steps on synthetic data: symgrad vs hand-written NumPy vs PyTorch eager.
Targets: <= 5 us per runtime op (fwd + bwd), <= 10 us per compiled node; MLP epoch within 1.2x of
hand-written NumPy.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

if "--root" in sys.argv:  # a --baseline child measuring another checkout: its packages, not common's
    sys.path.insert(0, sys.argv[sys.argv.index("--root") + 1])
    import emitters  # noqa: F401
    import symgrad  # noqa: F401

import numpy as np
from common import chain20, formula, optional_torch  # puts this checkout on sys.path (unless --root)

import symgrad as sg
from symgrad.runtime import elementwise

torch = optional_torch()

N_SAMPLES, N_IN, N_HIDDEN, N_OUT = 60_000, 784, 128, 10


class _BareKernel:
    """The compiled-function contract with bare NumPy kernels: isolates the tape's own overhead."""

    n_outputs = 1
    jacobian_saving, jacobian_arity = False, 0  # the vjp path: forward and vjp are the bare NumPy functions
    origin = "bench_runtime.py"

    def __init__(self, name: str, forward: Callable, vjp: Callable) -> None:
        self.name, self._forward, self._vjp = name, forward, vjp
        self.backward_name = name.capitalize() + "Backward"

    def forward(self, *args):
        return (self._forward(*args),)

    def run_same_shape(self, program, arrays):
        return None  # (always through ``forward``)

    def vjp(self, *args, needs_input_grad=None):
        return self._vjp(*args)


BARE = {
    "mul": _BareKernel("mul", np.multiply, lambda x, y, g: (g * y, g * x)),
    "add": _BareKernel("add", np.add, lambda x, y, g: (g, g)),
    "sin": _BareKernel("sin", np.sin, lambda x, g: (g * np.cos(x),)),
}

CHAIN, NODE = "chain op (20-op formula / 20)", "20-op formula as one node (torch: 20 ops)"
UNARY = (
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "softplus",
    "abs",
    "neg",
    "square",
    "reciprocal",
    "sign",
)
BINARY = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "**": lambda a, b: a**b,
    "maximum": lambda a, b: a.maximum(b) if isinstance(a, sg.Tensor) else torch.maximum(a, b),
    "minimum": lambda a, b: a.minimum(b) if isinstance(a, sg.Tensor) else torch.minimum(a, b),
}


def _interleaved(cases: dict, repeat: int) -> dict:
    """CPU seconds per call of each case: the best of ``repeat`` rounds that run every case once in turn, so
    that a busy machine slows every column alike (each batch ~2 ms, after two warm-up calls)."""
    clock = time.process_time
    numbers = {}
    for name, fn in cases.items():
        fn()
        start = time.perf_counter()
        fn()
        numbers[name] = max(1, int(0.002 / max(time.perf_counter() - start, 1e-7)))
    best = dict.fromkeys(cases, math.inf)
    for _ in range(repeat):
        for name, fn in cases.items():
            start = clock()
            for _ in range(numbers[name]):
                fn()
            best[name] = min(best[name], (clock() - start) / numbers[name])
    return best


def _unary(lib: object, name: str) -> Callable:
    if lib is torch and name == "softplus":
        return torch.nn.functional.softplus
    return lambda t: getattr(t, name)()


def _tape_cases(lib: object, x: object, w: object, seed: object) -> dict[str, Callable[[], object]]:
    """The tape table's cases for one library (symgrad or torch) on 10-element tensors ``x``, ``w``
    requiring grad (x in [0.1, 1], w in [1, 2]); ``seed``: ones."""
    dtype = np.dtype(str(x.dtype).removeprefix("torch."))
    w1 = lib.tensor(np.full(1, 1.5, dtype), requires_grad=True)
    w3 = lib.tensor(np.linspace(1, 2, 30).reshape(3, 10).astype(dtype), requires_grad=True)
    seed3 = lib.ones(3, 10, dtype=x.dtype)
    cases = {}
    for name in UNARY:
        f = _unary(lib, name)
        cases[f"{name}(x)"] = lambda f=f: f(x).backward(seed)
    for sym, f in BINARY.items():
        cases[f"x {sym} w"] = lambda f=f: f(x, w).backward(seed)
    for sym, f in BINARY.items():
        cases[f"x {sym} w(1,)"] = lambda f=f: f(x, w1).backward(seed)
    cases["x + w(3,10)"] = lambda: (x + w3).backward(seed3)
    cases["x * w(3,10)"] = lambda: (x * w3).backward(seed3)
    cases["x * 2.0"] = lambda: (x * 2.0).backward(seed)
    cases["x + 1"] = lambda: (x + 1).backward(seed)
    cases["sin(x).sum().backward() (2 ops)"] = lambda: x.sin().sum().backward()
    sin = sg.Tensor.sin if lib is sg else torch.sin
    cases[CHAIN] = lambda: formula(x, sin).backward(seed)
    return cases


def bench_tape(repeat: int, with_torch: bool = True) -> list[tuple[str, float, float]]:
    """(case, symgrad us, torch us) per case and dtype (``_tape_cases``, per op for the chain), then the
    20-op formula as one compiled node and the chain's ops with bare NumPy kernels (the tape's own cost)."""
    rows = []
    node = chain20.compiled()
    compiled = elementwise.primitives()
    for dtype in (np.float64, np.float32):
        a, b = np.linspace(0.1, 1.0, 10, dtype=dtype), np.linspace(1.0, 2.0, 10, dtype=dtype)
        x, y = sg.tensor(a, requires_grad=True), sg.tensor(b, requires_grad=True)
        seed = sg.tensor(np.ones(10, dtype))
        cases = {("sg", k): f for k, f in _tape_cases(sg, x, y, seed).items()}
        cases["sg", NODE] = lambda: node(x).backward(seed)
        if torch is not None and with_torch:
            tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
            tseed = torch.ones(10, dtype=tx.dtype)
            cases.update({("torch", k): f for k, f in _tape_cases(torch, tx, ty, tseed).items()})
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


def _child_rows(root: str | None, repeat: int) -> dict[str, float]:
    """The symgrad column measured in a child process, for checkout ``root`` (this one when None)."""
    cmd = [sys.executable, __file__, "--tape-json", "--repeat", str(repeat)]
    out = subprocess.run(cmd + (["--root", root] if root else []), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_baseline(baseline: str, rounds: int, repeat: int) -> None:
    """Before/after: the symgrad column of checkout ``baseline`` and of this one, child processes in
    alternation, best of ``rounds`` each (PyTorch's column from this process)."""
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for _ in range(rounds):
        for store, root in ((before, str(Path(baseline).resolve())), (after, None)):
            for name, us in _child_rows(root, repeat).items():
                store[name] = min(store.get(name, math.inf), us)
    theirs = {name: t for name, _, t in bench_tape(repeat)}
    print(f"{'tape: fwd + bwd, 10 elements, CPU us (best)':<52} {'before':>8} {'after':>8} {'torch':>8}")
    for name, us in after.items():
        print(f"{name:<52} {before.get(name, math.nan):>8.2f} {us:>8.2f} {theirs.get(name, math.nan):>8.2f}")


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
    parser.add_argument("--tape-only", action="store_true", help="the tape table only, no MLP")
    parser.add_argument("--baseline", help="another checkout: its tape table beside this one's")
    parser.add_argument("--rounds", type=int, default=3, help="child processes per checkout for --baseline")
    parser.add_argument("--tape-json", action="store_true", help=argparse.SUPPRESS)  # a --baseline child
    parser.add_argument("--root", help=argparse.SUPPRESS)  # (read before the imports)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeat = 100, 2
    if args.tape_json:
        print(json.dumps({name: ours for name, ours, _ in bench_tape(max(args.repeat, 5), with_torch=False)}))
        return
    print(
        f"backend: {sg.get_backend()}; torch: {torch.__version__ if torch is not None else 'not installed'}\n"
    )
    if args.baseline:
        print_baseline(args.baseline, args.rounds, max(args.repeat, 5))
    else:
        head = f"{'tape: fwd + bwd, 10 elements, CPU us (best)':<52}"
        print(f"{head} {'symgrad':>9} {'torch':>9} {'sg/torch':>9}")
        for name, ours, theirs in bench_tape(max(args.repeat, 5)):
            print(f"{name:<52} {ours:>9.2f} {theirs:>9.2f} {ours / theirs:>9.2f}")
    if args.tape_only:
        return
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
