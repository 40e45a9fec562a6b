"""How a loss reduces its per-element values: ``reduction='mean' | 'sum' | 'none'`` (PyTorch's names)."""

from __future__ import annotations

from symgrad.runtime.tensor import Tensor

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def reduce_loss(losses: Tensor, reduction: str) -> Tensor:
    """The mean, the sum, or the per-element losses themselves."""
    check_reduction(reduction)
    if reduction == "mean":
        return losses.mean()
    return losses.sum() if reduction == "sum" else losses
