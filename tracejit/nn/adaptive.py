"""``AdaptiveLogSoftmaxWithLoss``: the adaptive softmax of Grave et al. for large
vocabularies, with PyTorch's parameters, state_dict names, outputs and errors.

The frequent classes (below ``cutoffs[0]``) and one entry per rare cluster form the
head; each cluster's classes get a smaller tail (a projection to
``in_features // div_value**(i+1)`` then to the cluster's size). A target's log
probability is its head entry, plus its entry in its cluster's tail when it is rare.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Sequence

from .. import ops
from ..errors import IndexRangeError
from ..ops.registry import trace_state
from . import functional as F
from .containers import ModuleList, Sequential
from .layers import Linear
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """Adaptive log-softmax over ``n_classes`` split at ``cutoffs``; ``forward(input,
    target)`` returns ``(output, loss)``: each target's log probability and their mean
    negative."""

    def __init__(self, in_features: int, n_classes: int, cutoffs: Sequence[int], div_value: float = 4.0,
                 head_bias: bool = False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if (not cutoffs or cutoffs != sorted(cutoffs) or min(cutoffs) <= 0
                or max(cutoffs) > n_classes - 1 or len(set(cutoffs)) != len(cutoffs)
                or any(int(c) != c for c in cutoffs)):
            raise ValueError("AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of unique, positive "
                             "integers sorted in an increasing order, where each value is between 1 and "
                             f"n_classes-1, got {cutoffs} for n_classes={n_classes}")
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = [int(c) for c in cutoffs] + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        kw = {"device": device, "dtype": dtype}
        self.head = Linear(in_features, self.head_size, bias=head_bias, **kw)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, **kw),
                                        Linear(hsz, osz, bias=False, **kw)))

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for projection in self.tail:
            for layer in projection:
                layer.reset_parameters()

    def forward(self, input, target) -> _ASMoutput:
        batched = target.ndim == 1
        if target.ndim > 1 or (batched and input.ndim != 2) or (not batched and input.ndim != 1):
            raise RuntimeError("AdaptiveLogSoftmaxWithLoss: expected a 2-D input with a 1-D target or a "
                               f"1-D input with a 0-D target, got input {tuple(input.shape)} and target "
                               f"{tuple(target.shape)}")
        if batched and input.shape[0] != target.shape[0]:
            raise RuntimeError("AdaptiveLogSoftmaxWithLoss: input and target should have the same size in "
                               f"the batch dimension, got {input.shape[0]} and {target.shape[0]}")
        if not batched:
            input, target = input.unsqueeze(0), target.unsqueeze(0)
        if trace_state.tracer is not None:   # capture: the targets' values are not known (a bad
            # one fails the gather: IndexRangeError, a RuntimeError, as eager's check raises)
            out = self._dense_output(input, target)
            return _ASMoutput(out if batched else out.squeeze(0), (-out).mean())
        tv = target.detach().numpy()
        if tv.size and (tv.min() < 0 or tv.max() >= self.n_classes):
            raise IndexRangeError(f"AdaptiveLogSoftmaxWithLoss: target values should be in [0, "
                               f"{self.n_classes - 1}], but values in range [{tv.min()}, {tv.max()}] "
                               "were found")
        head_index = tv.copy()
        output = ops.zeros(target.shape[0], dtype=input.dtype)
        for i in range(1, self.n_clusters + 1):
            low, high = self.cutoffs[i - 1], self.cutoffs[i]
            rows = ((tv >= low) & (tv < high)).nonzero()[0]
            if rows.size == 0:
                continue
            head_index[rows] = self.shortlist_size + i - 1
            picked = ops.tensor(rows)
            logprob = F.log_softmax(self.tail[i - 1](input.index_select(0, picked)), dim=1)
            local = logprob.gather(1, ops.tensor(tv[rows] - low).unsqueeze(1)).squeeze(1)
            output = output.index_add(0, picked, local)
        head_logprob = F.log_softmax(self.head(input), dim=1)
        output = output + head_logprob.gather(1, ops.tensor(head_index).unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _dense_output(self, input, target):
        """forward's log probabilities without reading the targets: every cluster's tail runs
        on every row and a row keeps its own cluster's entry (the form a compiled graph can
        hold; eagerly only the rows of each cluster run its tail)."""
        head_index = target
        output = None
        for i in range(1, self.n_clusters + 1):
            low, high = self.cutoffs[i - 1], self.cutoffs[i]
            rows = (target >= low) & (target < high)
            head_index = ops.where(rows, self.shortlist_size + i - 1, head_index)
            logprob = F.log_softmax(self.tail[i - 1](input), dim=1)
            local = logprob.gather(1, (target - low).clamp(0, high - low - 1).unsqueeze(1)).squeeze(1)
            local = ops.where(rows, local, 0.0)
            output = local if output is None else output + local
        head_logprob = F.log_softmax(self.head(input), dim=1)
        return output + head_logprob.gather(1, head_index.unsqueeze(1)).squeeze(1)

    def _full_log_prob(self, input, head_output):
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster = F.log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return ops.cat(parts, dim=1)

    def log_prob(self, input):
        """Log probabilities of every class: (N, n_classes) for (N, in_features), or (n_classes,)."""
        if input.ndim not in (1, 2):
            raise RuntimeError(f"AdaptiveLogSoftmaxWithLoss.log_prob: expected a 1-D or 2-D input, got "
                               f"shape {tuple(input.shape)}")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        out = self._full_log_prob(x, self.head(x))
        return out if batched else out.squeeze(0)

    def predict(self, input):
        """The most likely class of each row: log_prob(input).argmax(-1)."""
        return self.log_prob(input).argmax(dim=-1)
