"""Loss modules: ``MSELoss``, ``CrossEntropyLoss``, ``NLLLoss`` and ``BCEWithLogitsLoss`` around
``nn.functional``."""

from __future__ import annotations

from typing import Any

from symgrad.nn import functional as F
from symgrad.nn.module import Module
from symgrad.nn.reduction import check_reduction
from symgrad.runtime.tensor import Tensor


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        check_reduction(reduction)
        self.reduction = reduction


class MSELoss(_Loss):
    """Squared error, averaged (``reduction='mean'``), summed or per element (``'none'``)."""

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002  (torch's names)
        return F.mse_loss(input, target, self.reduction)


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits against class indices or class probabilities (``F.cross_entropy``)."""

    def __init__(
        self,
        weight: Any = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(reduction)
        self.weight, self.ignore_index, self.label_smoothing = weight, ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.cross_entropy(
            input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing
        )


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities at class indices (``F.nll_loss``)."""

    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Logistic loss of logits against targets in [0, 1] (stable for any logit); ``weight`` rescales each
    element's loss, ``pos_weight`` the positive term (broadcast over the last dimension, as in PyTorch)."""

    def __init__(self, weight: Any = None, reduction: str = "mean", pos_weight: Any = None) -> None:
        super().__init__(reduction)
        self.weight, self.pos_weight = weight, pos_weight

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)
