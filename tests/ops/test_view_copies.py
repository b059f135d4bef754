"""PyTorch's ``*_copy`` functions (tracejit/ops/view_copies.py) against PyTorch's: values,
memory of their own, row-major layout and the view's gradient. Their out= is tested with the
other out= functions (tests/test_outarg_more.py)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")

X = np.array([[0.3, -1.6, 2.0], [2.2, 0.9, -0.4]], dtype=np.float32)

# torch's *_copy functions: name -> call(m, x, **out)
VIEW_COPIES = {
    "alias_copy": lambda m, x, **o: m.alias_copy(x, **o),
    "as_strided_copy": lambda m, x, **o: m.as_strided_copy(x, (2, 2), (1, 3), 1, **o),
    "detach_copy": lambda m, x, **o: m.detach_copy(x, **o),
    "diagonal_copy": lambda m, x, **o: m.diagonal_copy(x, 1, **o),
    "expand_copy": lambda m, x, **o: m.expand_copy(x[:1], (3, 3), **o),
    "narrow_copy": lambda m, x, **o: m.narrow_copy(x, 1, 1, 2, **o),
    "permute_copy": lambda m, x, **o: m.permute_copy(x, (1, 0), **o),
    "select_copy": lambda m, x, **o: m.select_copy(x, 1, 2, **o),
    "slice_copy": lambda m, x, **o: m.slice_copy(x, 1, 0, 3, 2, **o),
    "squeeze_copy": lambda m, x, **o: m.squeeze_copy(x[:1], 0, **o),
    "t_copy": lambda m, x, **o: m.t_copy(x, **o),
    "transpose_copy": lambda m, x, **o: m.transpose_copy(x, 0, 1, **o),
    "unfold_copy": lambda m, x, **o: m.unfold_copy(x, 1, 2, 1, **o),
    "unsqueeze_copy": lambda m, x, **o: m.unsqueeze_copy(x, 1, **o),
    "view_as_real_copy": lambda m, x, **o: m.view_as_real_copy(m.view_as_complex(x[:, :2].contiguous()), **o),
    "view_as_complex_copy": lambda m, x, **o: m.view_as_complex_copy(x[:, 1:].contiguous(), **o),
    "view_copy": lambda m, x, **o: m.view_copy(x, (3, 2), **o),
}


@pytest.mark.parametrize("name", list(VIEW_COPIES))
def test_view_copies_are_pytorchs_values_in_memory_of_their_own_with_its_gradient(name):
    got = {}
    for m in (torch, tj):
        x = m.tensor(X, requires_grad=name != "view_as_complex_copy")   # (PyTorch's refuses a graph)
        r = VIEW_COPIES[name](m, x)
        assert r.is_contiguous()
        with m.no_grad():
            x.add_(1)   # (a copy: unchanged when its source is written)
        if name not in ("detach_copy", "view_as_complex_copy"):   # (PyTorch's: NotImplemented grad_fns)
            r.sum().backward()
        grad = None if x.grad is None else x.grad.numpy()
        r = m.view_as_real(r) if r.is_complex() else r
        got[m] = (r.detach().numpy(), grad)
    np.testing.assert_array_equal(got[tj][0], got[torch][0])
    if name not in ("detach_copy", "view_as_complex_copy"):
        np.testing.assert_array_equal(got[tj][1], got[torch][1])
