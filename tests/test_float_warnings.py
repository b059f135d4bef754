"""Floating-point edge cases (log(0), 1/0, sqrt(-1), exp overflow, ...) give PyTorch's
inf/nan without numpy's RuntimeWarnings, while the program's own numpy calls still warn."""

import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

CASES = {
    "log0": lambda t: t.log(t.tensor(0.)),
    "div0": lambda t: t.tensor([1., -1., 0.]) / 0,
    "sqrt_neg": lambda t: t.sqrt(t.tensor([-1., 4.])),
    "exp_overflow": lambda t: t.exp(t.tensor([1000.])),
    "cosh": lambda t: t.tensor([1000.]).cosh(),
    "rsqrt0": lambda t: t.tensor([0., -1.]).rsqrt(),
    "floor_div0": lambda t: t.tensor([1., 0.]) // 0,
    "log2_0": lambda t: t.tensor([0.]).log2(),
    "atanh1": lambda t: t.tensor([1., 2.]).atanh(),
    "mean_empty": lambda t: t.tensor([]).mean(),
    "var_one": lambda t: t.tensor([1.]).var(),
    "prod_overflow": lambda t: t.tensor([1e30, 1e30]).prod(),
    "cumprod_overflow": lambda t: t.tensor([1e30, 1e30]).cumprod(0),
    "cumsum_overflow": lambda t: t.tensor([3e38, 3e38]).cumsum(0),
    "half_overflow": lambda t: t.tensor([70000.]).half().float(),
}


def _grads(t):
    out = []
    for f in (lambda x: x.sqrt(), lambda x: x.log(), lambda x: 1 / x):
        x = t.zeros(2, requires_grad=True)
        f(x).sum().backward()
        out.append(x.grad)
    return out


_SCRIPT = """
import json, warnings
import numpy as np
import tracejit as tj
from tests.test_float_warnings import CASES, _grads
warnings.filterwarnings("always", append=True)   # (after tracejit's filter, as a script's default)
with warnings.catch_warnings(record=True) as caught:
    for case in CASES.values():
        case(tj)
    _grads(tj)
    tj.compile(lambda a: tj.log(a) * a)(tj.zeros(3))
    quiet = [str(w.message) for w in caught]
with warnings.catch_warnings(record=True) as caught:
    np.log(np.zeros(1))
    loud = [str(w.message) for w in caught]
print(json.dumps([quiet, loud]))
"""


def test_a_program_sees_no_float_warnings_from_tracejit_but_its_own_numpy_warns():
    """In a fresh interpreter, as a program imports tracejit (pytest's own warning capture
    resets filters made during collection, so this runs apart)."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=root, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    quiet, loud = json.loads(out.stdout.strip().splitlines()[-1])
    assert quiet == []
    assert any("divide by zero" in m for m in loud)


@pytest.mark.parametrize("name", sorted(CASES))
def test_edge_values_match_torch(name):
    np.testing.assert_array_equal(CASES[name](tj).numpy(), CASES[name](torch).numpy())


def test_edge_gradients_match_torch():
    for a, b in zip(_grads(tj), _grads(torch)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
