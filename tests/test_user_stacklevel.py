"""Warnings raised inside tracejit point at the user's line (errors.user_stacklevel), as
PyTorch's do, however many of our frames lie between."""
import warnings

import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.utils.checkpoint import checkpoint

_CASES = {
    "loss broadcast": lambda: F.mse_loss(tj.ones(3, 4), tj.ones(1, 4)),
    "kl_div mean": lambda: F.kl_div(tj.zeros(2, 3), tj.ones(2, 3), reduction="mean"),
    "implicit softmax dim": lambda: F.softmax(tj.ones(2, 3)),
    "checkpoint reentrant": lambda: checkpoint(lambda x: x * 2, tj.ones(2, requires_grad=True)),
    "dropout2d 3-D": lambda: F.dropout2d(tj.ones(2, 3, 4), 0.5),
    "instance norm features": lambda: tj.nn.InstanceNorm1d(5)(tj.ones(2, 3, 4)),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_warning_points_at_the_callers_line(case):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _CASES[case]()
    assert seen, f"{case}: no warning"
    assert all(w.filename == __file__ for w in seen), [(w.filename, w.lineno) for w in seen]
