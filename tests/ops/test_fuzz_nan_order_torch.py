"""Differential fuzzing of NaN and infinity through the ordering ops against PyTorch:
max/min (whole and along a dim), amax/amin, argmax/argmin, sort/argsort/msort, topk,
kthvalue, median/nanmedian, quantile/nanquantile, cummax/cummin, maximum/minimum/fmax/
fmin, clamp, unique, aminmax, logsumexp, eagerly and through ``tj.compile``, values,
indices and gradients. Rows hold distinct finite values, so an index is never a tie
that PyTorch leaves unspecified; NaN and +-inf are placed at random (several NaN in a
row included: PyTorch's sort keeps them in order, last)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tests.fn_fuzz import check, pick

torch = pytest.importorskip("torch")

OPS = {
    "max": lambda lib, x: x.max(), "min": lambda lib, x: x.min(), "max_dim": lambda lib, x: x.max(-1),
    "min_dim": lambda lib, x: x.min(0, keepdim=True), "amax": lambda lib, x: x.amax(-1),
    "amin": lambda lib, x: x.amin(0), "argmax": lambda lib, x: x.argmax(), "argmin_dim": lambda lib, x: x.argmin(-1),
    "sort": lambda lib, x: x.sort(-1), "sort_desc": lambda lib, x: x.sort(0, descending=True),
    "argsort": lambda lib, x: x.argsort(dim=-1, stable=True), "msort": lambda lib, x: lib.msort(x),
    "topk": lambda lib, x: x.topk(2, -1), "topk_small": lambda lib, x: x.topk(2, 0, largest=False),
    "kthvalue": lambda lib, x: x.kthvalue(2, -1), "median_dim": lambda lib, x: x.median(-1),
    "nanmedian_dim": lambda lib, x: x.nanmedian(0), "median": lambda lib, x: x.median(),
    "quantile": lambda lib, x: lib.quantile(x, 0.4, dim=-1), "quantile_all": lambda lib, x: lib.quantile(x, 0.75),
    "quantile_qs": lambda lib, x: lib.quantile(x, lib.tensor([0.0, 0.5, 1.0], dtype=x.dtype), dim=0, keepdim=True),
    "quantile_near": lambda lib, x: lib.quantile(x, 0.5, dim=-1, interpolation="nearest"),
    "nanquantile": lambda lib, x: lib.nanquantile(x, 0.3, dim=-1),
    "cummax": lambda lib, x: x.cummax(-1), "cummin": lambda lib, x: x.cummin(0),
    "maximum": lambda lib, x: lib.maximum(x, x.flip(-1)), "minimum": lambda lib, x: lib.minimum(x, x.flip(0)),
    "fmax": lambda lib, x: lib.fmax(x, x.flip(-1)), "fmin": lambda lib, x: lib.fmin(x, x.flip(0)),
    "clamp": lambda lib, x: x.clamp(-0.5, 0.5), "clamp_t": lambda lib, x: x.clamp(min=x.flip(-1)),
    "unique": lambda lib, x: lib.unique(x.detach()), "aminmax": lambda lib, x: lib.aminmax(x, dim=-1),
    "logsumexp": lambda lib, x: x.logsumexp(-1), "nan_to_num": lambda lib, x: lib.nan_to_num(x, posinf=9.0),
}


def _case(r):
    name = sorted(OPS)[int(r.integers(len(OPS)))]
    rows, cols = int(r.integers(1, 4)), int(r.integers(2, 6))
    x = r.permutation(rows * cols).astype("float64").reshape(rows, cols) - rows * cols / 2
    for _ in range(int(r.integers(0, 4))):
        x[int(r.integers(rows)), int(r.integers(cols))] = pick(r, [np.nan, np.nan, np.inf, -np.inf])
    op = OPS[name]
    return (lambda lib, x: op(lib, x)), [x.astype(pick(r, ["float32", "float64"]))], name


@pytest.mark.parametrize("block", range(4))
def test_nan_and_inf_through_ordering_ops(block):
    for seed in range(block * 60, block * 60 + 60):
        check(torch, _case, seed, compiled=seed % 3 == 0)


@pytest.mark.parametrize("dim", [None, -1])
@pytest.mark.parametrize("compiled", [False, True])
def test_quantile_of_a_row_holding_nan_is_nan(dim, compiled):
    """PyTorch: a row holding a NaN has NaN quantiles, and the gradient goes to the NaN
    (the last of the sorted row); nanquantile skips it."""
    case = lambda r: ((lambda lib, x: (lib.quantile(x, lib.tensor([0.0, 0.5], dtype=x.dtype), dim=dim),
                                       lib.nanquantile(x, 0.5, dim=dim))),
                      [np.array([[3.0, np.nan, 1.0, 2.0], [0.5, 4.0, -1.0, 2.0]])], "quantile")
    check(torch, case, 0, compiled)


@pytest.mark.parametrize("fill", [2.0, np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("compiled", [False, True])
def test_median_of_all_elements_shares_its_gradient_among_ties(fill, compiled):
    """PyTorch's median() (no dim) sends the gradient evenly to every element equal to
    the median, as max() does; nanmedian() too."""
    x = np.array([[1.0, fill, fill, 0.0], [fill, 5.0, fill, -3.0]])
    case = lambda r: ((lambda lib, x: (x.median(), (x * 2).nanmedian())), [x], "median")
    check(torch, case, 0, compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_lerp_is_pytorchs_two_sided_form(compiled):
    """end exactly at weight 1 (0.1 + (0.3 - 0.1) is not 0.3), NaN where an infinite end
    meets a weight it does not multiply by 0; scalar and tensor weights."""
    a = np.array([0.1, -2.0, 1.0, np.inf, 3.0])
    b = np.array([0.3, np.inf, 2.0, np.inf, -1.0])
    case = lambda r: ((lambda lib, a, b: [lib.lerp(a, b, w) for w in (0.0, 0.25, 0.5, 0.75, 1.0)]
                       + [lib.lerp(a, b, lib.tensor([1.0, 0.5, 0.75, 0.0, 0.4], dtype=a.dtype))]), [a, b], "lerp")
    check(torch, case, 0, compiled)


@pytest.mark.parametrize("shape, dim", [((0,), None), ((2, 0), 1), ((0, 2), 1)])
def test_quantile_of_an_empty_tensor_is_refused_as_pytorch_refuses_it(shape, dim):
    with pytest.raises(RuntimeError, match="non-empty"):
        torch.quantile(torch.ones(shape), 0.5, dim=dim)
    with pytest.raises(RuntimeError, match="non-empty"):
        tj.quantile(tj.ones(shape), 0.5, dim=dim)
