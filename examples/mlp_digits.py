"""Train a 64-128-10 MLP with a symbolic activation on scikit-learn's bundled 8x8 digits (no download).

    python examples/mlp_digits.py [--activation neo_relu|softplus] [--epochs 30] [--mnist PATH]

``--mnist PATH`` trains on MNIST instead: a directory with the four IDX files (optionally .gz) or an .npz
with x_train, y_train, x_test, y_test. The activation comes from ``activations.py`` via ``sg.compile``.
"""

from __future__ import annotations

import argparse
import gzip
import struct
import sys
import time
from pathlib import Path

import numpy as np

import symgrad as sg

HERE = Path(__file__).resolve().parent
IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def load_digits(seed: int) -> tuple[np.ndarray, ...]:
    """sklearn's 1,797 8x8 digits scaled to [0, 1], split 80/20 per class."""
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    data = sklearn_digits()
    x = (data.data / 16.0).astype(np.float32)
    return tuple(train_test_split(x, data.target, test_size=0.2, stratify=data.target, random_state=seed))


def read_idx(path: Path) -> np.ndarray:
    """One IDX array (the MNIST file format): magic, big-endian dimensions, then unsigned bytes."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_mnist(path: Path) -> tuple[np.ndarray, ...]:
    """(x_train, x_test, y_train, y_test) from an .npz or a directory of IDX files.

    Images are flattened, with values in [0, 1]."""
    if path.suffix == ".npz":
        with np.load(path) as f:
            arrays = f["x_train"], f["x_test"], f["y_train"], f["y_test"]
    else:

        def find(name: str) -> Path:
            for candidate in (path / name, path / f"{name}.gz", path / name.replace("-idx", ".idx")):
                if candidate.exists():
                    return candidate
            raise FileNotFoundError(f"{path}: no {name}[.gz]")

        xtr, ytr, xte, yte = (read_idx(find(n)) for n in IDX_NAMES)
        arrays = xtr, xte, ytr, yte
    xtr, xte, ytr, yte = arrays
    flat = [(x.reshape(len(x), -1) / 255.0).astype(np.float32) for x in (xtr, xte)]
    return flat[0], flat[1], ytr.astype(np.int64), yte.astype(np.int64)


def progress(epoch: int, epochs: int, done: int, total: int, loss: float) -> None:
    width = 30
    filled = width * done // total
    sys.stdout.write(f"\repoch {epoch:2d}/{epochs} [{'#' * filled}{'.' * (width - filled)}] loss {loss:.4f}")
    sys.stdout.flush()


def accuracy(model: sg.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with sg.no_grad():
        return float((model(sg.from_numpy(x)).data.argmax(axis=1) == y).mean())


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activation", choices=("neo_relu", "softplus"), default="neo_relu")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mnist", type=Path, help="MNIST as an .npz or a directory of IDX files")
    args = parser.parse_args(argv)

    np.random.seed(args.seed)  # the batch order
    sg.manual_seed(args.seed)  # the initial weights
    x_train, x_test, y_train, y_test = load_mnist(args.mnist) if args.mnist else load_digits(args.seed)
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 0.1  # per-pixel standardisation (train stats)
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    activation = getattr(sg.compile(HERE / "activations.py"), args.activation)
    model = sg.nn.Sequential(
        sg.nn.Linear(x_train.shape[1], args.hidden),
        sg.nn.Activation(activation),
        sg.nn.Linear(args.hidden, 10),
    )
    optimizer = sg.optim.Adam(model.parameters(), lr=args.lr)
    print(f"{len(x_train)} training / {len(x_test)} test samples, model {model}")

    start = time.perf_counter()
    n = len(x_train)
    for epoch in range(1, args.epochs + 1):
        order = np.random.permutation(n)
        total = 0.0
        for done, i in enumerate(range(0, n, args.batch_size), 1):
            batch = order[i : i + args.batch_size]
            optimizer.zero_grad()
            loss = sg.nn.functional.cross_entropy(model(sg.from_numpy(x_train[batch])), y_train[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
            if done % 10 == 0 or i + args.batch_size >= n:
                progress(
                    epoch, args.epochs, min(i + args.batch_size, n), n, total / min(i + args.batch_size, n)
                )
        print(f"  test accuracy {accuracy(model, x_test, y_test):.4f}")
    final = accuracy(model, x_test, y_test)
    print(
        f"final test accuracy {final:.4f} ({args.activation}, {args.epochs} epochs, "
        f"{time.perf_counter() - start:.1f} s)"
    )
    return final


if __name__ == "__main__":
    main()
