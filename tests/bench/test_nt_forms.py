"""bench/nt_forms.py: every form computes the same NT product, and a run writes one row of
timings per shape."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bench import nt_forms


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_form_is_the_nt_product(dtype):
    rng = np.random.default_rng(2)
    g = rng.standard_normal((8, 64)).astype(dtype)
    b = rng.standard_normal((40, 64)).astype(dtype)
    want = g.astype(np.float64) @ b.T.astype(np.float64)
    for name, form in nt_forms.FORMS.items():
        got = form(g, b)
        assert got.shape == (8, 40) and got.dtype == dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)
    assert nt_forms.FORMS["swap_c"](g, b).flags.c_contiguous
    assert nt_forms.FORMS["swap_nn"](g, b).flags.c_contiguous


def test_a_run_writes_a_row_per_shape(tmp_path, capsys):
    out = tmp_path / "nt.json"
    nt_forms.main(["--rows", "2", "--rounds", "1", "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["dtype"] == "float32" and data["rounds"] == 1
    assert len(data["rows"]) == len(nt_forms.INNER) * len(nt_forms.COLS)
    assert {(r["m"], r["k"], r["n"]) for r in data["rows"]} == {
        (2, k, n) for k in nt_forms.INNER for n in nt_forms.COLS}
    for r in data["rows"]:
        assert set(r["us"]) == set(nt_forms.FORMS) and all(v > 0 for v in r["us"].values())
    assert "one BLAS thread" in capsys.readouterr().out
