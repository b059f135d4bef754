"""tracejit/linalg.py against PyTorch: the ``*_ex`` functions (LAPACK's info per matrix, no
error unless ``check_errors``, PyTorch's result field names) and empty matrices' norms and
factors."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

_SINGULAR = [[[1.0, 2.0], [2.0, 4.0]], [[1.0, 0.0], [0.0, 2.0]], [[0.0, 0.0], [0.0, 0.0]]]
_NOT_PD = [[[4.0, 2.0, 1.0], [2.0, 1.0, 3.0], [1.0, 3.0, 5.0]], np.eye(3) * 2, -np.eye(3)]


@pytest.mark.parametrize("name, data, field", [("inv_ex", _SINGULAR, "inverse"), ("solve_ex", _SINGULAR, "result"),
                                               ("cholesky_ex", _NOT_PD, "L")])
def test_ex_functions_report_failures_in_info(name, data, field):
    got = {}
    for m in (torch, tj):
        a = m.tensor(np.array(data, dtype=np.float32))
        args = (a, m.ones(3, 2)) if name == "solve_ex" else (a,)
        out = getattr(m.linalg, name)(*args)
        got[m] = (out.info.tolist(), getattr(out, field).numpy())
        with pytest.raises(RuntimeError if m is torch else tj.linalg.LinAlgError):
            getattr(m.linalg, name)(*args, check_errors=True)
    assert got[tj][0] == got[torch][0] == ([2, 0, 1] if name != "cholesky_ex" else [2, 0, 1])
    np.testing.assert_allclose(got[tj][1][1], got[torch][1][1], rtol=1e-6)   # (the one that succeeds)
    assert np.isnan(got[tj][1][[0, 2]]).all()


@pytest.mark.parametrize("fn", [lambda m, x: m.linalg.matrix_norm(x, 2), lambda m, x: m.linalg.matrix_norm(x, 1),
                                lambda m, x: m.linalg.matrix_norm(x, float("inf"), keepdim=True),
                                lambda m, x: m.linalg.cond(x), lambda m, x: m.linalg.matrix_rank(x),
                                lambda m, x: m.linalg.lu(x)[0], lambda m, x: m.linalg.lu_factor(x)[1]])
@pytest.mark.parametrize("shape", [(2, 0, 0), (2, 3, 0)])
def test_empty_matrices_give_pytorchs_norms_and_factors(fn, shape):
    got, want = [fn(m, m.zeros(*shape)) for m in (tj, torch)]
    assert tuple(got.shape) == tuple(want.shape) and got.tolist() == want.tolist()
