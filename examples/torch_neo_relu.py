"""NeoReLU in PyTorch, with the backward derived by symgrad instead of written by hand.

    python examples/torch_neo_relu.py [--epochs 20] [--full-source] [--no-article]

The article's MLP (784 -> 128 -> 10 on MNIST; here 64 -> 128 -> 10 on scikit-learn's bundled 8x8 digits, no
download) with NeoReLU(x) = x if x > 0 else -0.1. The article writes the activation as a hand-made
``torch.autograd.Function`` (``NeoReLUArticle`` below, kept as written) whose backward sets the gradient to 1
where x > 0 instead of passing ``grad_output`` through. Here the forward is ``neo_relu`` in ``model.py``,
symgrad derives and compiles its backward, and ``m.neo_relu.to_torch()`` makes it a PyTorch op.

The script prints symgrad's derivative and generated C backward next to the article's hand-written one,
runs ``symgrad check`` against the hand-written backward (NumPy transcription:
``neo_relu_backward_article`` below), which catches the bug:

    symgrad check examples/model.py neo_relu --against examples/torch_neo_relu.py:neo_relu_backward_article

and trains the MLP with the symgrad op (and, for comparison, with the article's Function).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import symgrad as sg

HERE = Path(__file__).resolve().parent
CHECK_COMMAND = [sys.executable, "-m", "symgrad", "check", str(HERE / "model.py"), "neo_relu", "--against"]


# -- the article's hand-written activation, as written (bug included) ----------------------------------------
class NeoReLUArticle(torch.autograd.Function):
    """NeoReLU with a hand-written backward, as in the article."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.where(x > 0, x, torch.full_like(x, -0.1))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x > 0] = 1  # the bug: this should be grad_output where x > 0, not 1
        grad_input[x <= 0] = 0
        return grad_input


def neo_relu_backward_article(x: np.ndarray, grad_output: np.ndarray) -> np.ndarray:
    """``NeoReLUArticle.backward`` in NumPy, for ``symgrad check --against``: backward(x, grad_output)."""
    grad_input = np.array(grad_output, dtype=float, copy=True)
    grad_input[x > 0] = 1
    grad_input[x <= 0] = 0
    return grad_input


def neo_relu_backward_fixed(x: np.ndarray, grad_output: np.ndarray) -> np.ndarray:
    """What the article meant: the chain rule passes grad_output through where x > 0."""
    return np.where(x > 0, grad_output, 0.0)


# -- the model ----------------------------------------------------------------------------------------------
class Activation(nn.Module):
    def __init__(self, fn, name: str) -> None:
        super().__init__()
        self.fn, self.name = fn, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return self.name


def mlp(n_in: int, activation: nn.Module, hidden: int = 128) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), activation, nn.Linear(hidden, 10))


def load_digits(seed: int) -> tuple[torch.Tensor, ...]:
    """sklearn's 1,797 8x8 digits, split 80/20 per class, standardised with the training statistics."""
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    data = sklearn_digits()
    x = (data.data / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, data.target, test_size=0.2, stratify=data.target, random_state=seed
    )
    mean, std = x_tr.mean(axis=0), x_tr.std(axis=0) + 0.1
    return (
        torch.from_numpy((x_tr - mean) / std),
        torch.from_numpy((x_te - mean) / std),
        torch.from_numpy(y_tr),
        torch.from_numpy(y_te),
    )


def train(model: nn.Module, data: tuple, epochs: int, seed: int, lr: float = 1e-3, batch: int = 32) -> float:
    x_tr, x_te, y_tr, y_te = data
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        order = torch.randperm(len(x_tr))
        for i in range(0, len(x_tr), batch):
            idx = order[i : i + batch]
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
            optimizer.step()
    with torch.no_grad():
        return float((model(x_te).argmax(dim=1) == y_te).float().mean())


def c_function(source: str, name: str) -> str:
    """One function of a generated C file."""
    match = re.search(rf"^void {re.escape(name)}\(.*?^}}\n", source, flags=re.S | re.M)
    return match.group(0) if match else source


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full-source", action="store_true", help="print all of m.neo_relu.source('c')")
    parser.add_argument("--no-article", action="store_true", help="do not train the article's version")
    args = parser.parse_args(argv)

    m = sg.compile(HERE / "model.py")
    neo_relu = m.neo_relu.to_torch()

    print("== symgrad's backward, derived from model.py:neo_relu")
    print(f"m.neo_relu.derivatives = {m.neo_relu.derivatives}")
    source = m.neo_relu.source("c")
    print(source if args.full_source else c_function(source, "neo_relu__vjp_f32"))
    print("== the article's hand-written backward")
    print(inspect.getsource(NeoReLUArticle.backward))

    print("== symgrad check against the hand-written backward (NumPy transcription)")
    root = str(Path(sg.__file__).resolve().parent.parent)  # the CLI child imports this symgrad
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    for name in ("neo_relu_backward_article", "neo_relu_backward_fixed"):
        spec = f"{Path(__file__).resolve()}:{name}"
        shown = f"symgrad check examples/model.py neo_relu --against examples/{Path(__file__).name}:{name}"
        result = subprocess.run([*CHECK_COMMAND, spec], capture_output=True, text=True, env=env, check=False)
        print(f"$ {shown}\n{result.stdout}{result.stderr}(exit status {result.returncode})\n")

    data = load_digits(args.seed)
    n_in = data[0].shape[1]
    models = [("symgrad NeoReLU", mlp(n_in, Activation(neo_relu, "symgrad neo_relu")))]
    if not args.no_article:
        models.append(("article NeoReLU", mlp(n_in, Activation(NeoReLUArticle.apply, "hand-written"))))
    print(
        f"== training {n_in} -> 128 -> 10 on {len(data[0])} digits, testing on {len(data[1])}, "
        f"{args.epochs} epochs, Adam"
    )
    accuracy = 0.0
    for label, model in models:
        torch.manual_seed(args.seed)
        for layer in model:  # the same initial weights for both
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()
        start = time.perf_counter()
        acc = train(model, data, args.epochs, args.seed)
        print(f"{label:<16} test accuracy {acc:.4f}  ({time.perf_counter() - start:.1f} s)")
        if label.startswith("symgrad"):
            accuracy = acc
    return accuracy


if __name__ == "__main__":
    main()
