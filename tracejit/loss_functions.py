"""The loss functions of the top-level namespace (``torch.kl_div``,
``torch.binary_cross_entropy_with_logits``, ...), which differ from ``nn.functional``'s:
PyTorch binds them straight to its kernels, so their ``reduction`` is an integer
(0 none, 1 mean, 2 sum), their arguments come in the kernel's order, and without a
reduction they return the unreduced loss. Each calls the ``nn.functional`` definition.
"""
from __future__ import annotations

from .ops import losses as _losses
from .ops import losses_more as _losses_more
from .ops import composite as _composite

__all__ = ["kl_div", "binary_cross_entropy_with_logits", "hinge_embedding_loss", "margin_ranking_loss",
           "triplet_margin_loss", "cosine_embedding_loss", "poisson_nll_loss", "ctc_loss"]

_NAMES = {0: "none", 1: "mean", 2: "sum"}


def _reduction(value, fn: str) -> str:
    if isinstance(value, str) and value in _NAMES.values():
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value in _NAMES:
        return _NAMES[value]
    raise ValueError(f"{fn}: reduction must be 0 (none), 1 (mean) or 2 (sum), got {value!r}")


def kl_div(input, target, reduction=0, *, log_target: bool = False):
    return _losses.kl_div(input, target, reduction=_reduction(reduction, "kl_div"), log_target=log_target)


def binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction=0):
    return _composite.binary_cross_entropy_with_logits(
        input, target, weight, reduction=_reduction(reduction, "binary_cross_entropy_with_logits"),
        pos_weight=pos_weight)


def hinge_embedding_loss(input, target, margin: float = 1.0, reduction=0):
    return _losses.hinge_embedding_loss(input, target, margin,
                                        reduction=_reduction(reduction, "hinge_embedding_loss"))


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, reduction=0):
    return _losses.margin_ranking_loss(input1, input2, target, margin,
                                       reduction=_reduction(reduction, "margin_ranking_loss"))


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, reduction=0):
    return _losses.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                       reduction=_reduction(reduction, "triplet_margin_loss"))


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, reduction=0):
    return _losses.cosine_embedding_loss(input1, input2, target, margin,
                                         reduction=_reduction(reduction, "cosine_embedding_loss"))


def poisson_nll_loss(input, target, log_input: bool, full: bool, eps: float, reduction):
    return _losses_more.poisson_nll_loss(input, target, log_input, full, eps=eps,
                                         reduction=_reduction(reduction, "poisson_nll_loss"))


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank: int = 0, reduction=0,
             zero_infinity: bool = False):
    return _losses_more.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank,
                                 _reduction(reduction, "ctc_loss"), zero_infinity)
