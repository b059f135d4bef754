"""For every op in the op database: a traced function matches eager, forward and gradients.

The traced program runs through the reference interpreter (``compiler="interpret"``):
this checks capture (shape/dtype rules on tracers, promotion casts, literals, params)
independently of the numba backend, which has its own per-op tests.
"""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from opdb import OPS
from tracejit.errors import TraceError


def _outs(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _arr(t) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def _samples(op):
    """One dtype per op (float32 when it takes it) keeps the sweep fast; every sample of it."""
    dtype = tj.float32 if tj.float32 in op.dtypes else op.dtypes[0]
    return op.sample_inputs(dtype, np.random.default_rng(0))


TRACEABLE = [op for op in OPS if op.traceable]
UNTRACEABLE = [op for op in OPS if not op.traceable]


def _data_dependent(s) -> bool:
    """Samples whose result shape depends on values although the op is traceable."""
    return s.op.name == "one_hot" and s.kwargs.get("num_classes", -1) < 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # nan/inf samples warn in numpy
@pytest.mark.parametrize("op", TRACEABLE, ids=[op.name for op in TRACEABLE])
def test_traced_op_matches_eager(op):
    for s in _samples(op):
        eager_in = s.tensors(requires_grad=True)
        traced_in = s.tensors(requires_grad=True)
        expect = _outs(s.fn(*eager_in))
        fn = tj.trace(s.fn, compiler="interpret")
        if _data_dependent(s):
            with pytest.raises(TraceError, match="item"):
                fn(*traced_in)
            continue
        got = _outs(fn(*traced_in))
        assert fn.cache_stats()["compiles"] == 1, s
        assert len(got) == len(expect), s
        for g, e in zip(got, expect):
            assert g.dtype is e.dtype, (s, g.dtype, e.dtype)
            assert tuple(g.shape) == tuple(e.shape), (s, g.shape, e.shape)
            if not op.random:
                np.testing.assert_allclose(_arr(g), _arr(e), rtol=1e-6, atol=1e-6, err_msg=repr(s))
        if op.random or not op.grad:
            continue
        # Gradients through the interpreted graph equal the eager ones (same cotangent).
        pairs = [(g, e) for g, e in zip(got, expect) if e.requires_grad and e.numel() > 0]
        if not pairs:
            continue
        rng = np.random.default_rng(1)
        cots = [rng.standard_normal(tuple(e.shape)).astype(e.dtype.np) for _, e in pairs]
        loss_e = sum((e * tj.tensor(c)).sum() for (_, e), c in zip(pairs, cots))
        loss_g = sum((g * tj.tensor(c)).sum() for (g, _), c in zip(pairs, cots))
        loss_e.backward()
        loss_g.backward()
        for i in s.grad:
            ge, gg = eager_in[i].grad, traced_in[i].grad
            assert (ge is None) == (gg is None), (s, i)
            if ge is not None:
                np.testing.assert_allclose(_arr(gg), _arr(ge), rtol=1e-5, atol=1e-6,
                                           err_msg=f"grad of input {i}: {s!r}")


@pytest.mark.parametrize("op", UNTRACEABLE, ids=[op.name for op in UNTRACEABLE])
def test_data_dependent_op_raises_trace_error(op):
    """Ops whose output shape depends on values can't be traced: a TraceError says so."""
    s = _samples(op)[0]
    fn = tj.trace(s.fn, compiler="interpret")
    with pytest.raises(TraceError):
        fn(*s.tensors())
    assert fn.cache_stats()["entries"] == 0
