"""tracejit/tensor_compat.py's ``_foreach_*`` list functions against PyTorch's: in-place
forms (returning the tensors given) with a list, a scalar or a list of scalars, keyword
arguments, and the out-of-place forms."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def test_foreach_functions_match_pytorch():
    r = np.random.default_rng(0)
    a = [r.standard_normal(s).astype(np.float32) for s in ((3,), (2, 4))]
    b = [r.standard_normal(s).astype(np.float32) for s in ((3,), (2, 4))]
    got = {}
    for lib in (torch, tj):
        ema, p = [lib.tensor(x) for x in a], [lib.tensor(x) for x in b]
        out = lib._foreach_lerp_(ema, p, 0.1)       # timm's ModelEmaV3 update
        assert all(o is e for o, e in zip(out, ema))
        lib._foreach_mul_(ema, [0.5, 2.0])
        lib._foreach_add_(ema, p, alpha=-0.25)
        lib._foreach_addcmul_(ema, p, p, value=0.3)
        norms = lib._foreach_norm(ema, 2)
        sq = lib._foreach_mul(p, 3.0)
        got[lib] = [t.numpy() for t in list(ema) + list(norms) + list(sq)]
    for x, y in zip(got[tj], got[torch]):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    with pytest.raises(AttributeError, match="_foreach_no_such_op"):
        tj._foreach_no_such_op
