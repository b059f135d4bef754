"""Products of a thin depth (router.matmul's `THIN_DEPTH`: a convolution of few input
channels, LeNet's first, 32x10 @ 10x43264) on the GEMM template's serial entry (compiler/cpu/gemm/template_panels.py)
where the policy gives one thread: which products go there, that their values are numpy's
(the depth summed in order: the same bits as an AVX-512 OpenBLAS, within a few ulps of any),
and that the conv's output and gradients
stay PyTorch's."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
import tracejit.nn.functional as F
from tracejit.compiler.cpu.gemm import router
from tracejit.compiler.cpu.runtime import coreshare
from tracejit.compiler.cpu.gemm import template_panels

pytest.importorskip("numba", reason="the register-tile kernel is numba code")
pytestmark = pytest.mark.usefixtures("kernels_in_session_tmp")


@pytest.fixture
def kernel_calls(monkeypatch) -> list:
    """The policy at one thread and the kernel loaded; records each thin product the
    register-tile kernel ran, as (m, k, n)."""
    for dt in ("float32", "float64"):
        assert template_panels.serial_kernel(dt).load_now()
    monkeypatch.setattr(coreshare, "adapt", lambda: 1)
    monkeypatch.setattr(coreshare, "adapt_blas", lambda: 1)
    calls: list = []
    real = router._serial_product

    def spy(a, b, thin=False):
        out = real(a, b, thin=thin)
        if thin and out is not None:
            calls.append((a.shape[0], a.shape[1], b.shape[1]))
        return out
    monkeypatch.setattr(router, "_serial_product", spy)
    return calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_thin_depth_products_run_on_the_kernel_with_numpys_values(kernel_calls, dtype):
    rng = np.random.default_rng(0)
    for m, k, n in [(32, 10, 43264), (200, 16, 8192), (33, 3, 65536)]:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        got = router.matmul(a, b)
        assert kernel_calls[-1] == (m, k, n)
        assert got.shape == (m, n) and got.flags.c_contiguous
        # The depth summed in order: the same bits as OpenBLAS's AVX-512 kernels give here;
        # an AVX2 OpenBLAS (Haswell core) rounds some sums differently, so against numpy the
        # check is a few ulps, not bits (the suite must not depend on the instruction set)
        tight = dict(rtol=1e-6, atol=1e-5) if dtype == "float32" else dict(rtol=1e-14, atol=1e-13)
        np.testing.assert_allclose(got, np.matmul(a, b), **tight)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, **tight)


def test_other_products_do_not_take_the_thin_route(kernel_calls):
    rng = np.random.default_rng(1)
    cases = [((32, 17), (17, 43264), "C"),     # deeper than THIN_DEPTH
             ((32, 10), (10, 2048), "C"),      # too few columns
             ((32, 10), (10, 43264), "F"),     # b not C-contiguous
             ((8, 10), (10, 4096), "C")]       # below router.SERIAL_MIN_MNK
    for sa, sb, layout in cases:
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        if layout == "F":
            b = np.asfortranarray(b)
        got = router.matmul(a, b)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    assert kernel_calls == []


def test_two_threads_without_halves_leave_it_to_blas(monkeypatch):
    from tracejit.compiler.cpu.gemm import halves
    monkeypatch.setattr(halves, "two_cores", lambda: False)
    a = np.ones((32, 10), np.float32)
    b = np.arange(10 * 8192, dtype=np.float32).reshape(10, 8192)
    assert router._thin_depth(a, b, 2) is None
    np.testing.assert_array_equal(router.matmul(a, b), np.matmul(a, b))


def test_first_conv_of_one_channel_matches_torch(kernel_calls):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    w0 = (rng.standard_normal((32, 1, 3, 3)) * 0.3).astype(np.float32)
    b0 = rng.standard_normal(32).astype(np.float32)
    g0 = rng.standard_normal((64, 32, 26, 26)).astype(np.float32)
    w, b = tj.tensor(w0, requires_grad=True), tj.tensor(b0, requires_grad=True)
    out = F.conv2d(tj.tensor(x0), w, b)
    assert (32, 10, 64 * 26 * 26) in kernel_calls   # the forward's product (bias row: depth 10)
    (out * tj.tensor(g0)).sum().backward()
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    tout = torch.nn.functional.conv2d(torch.tensor(x0), tw, tb)
    (tout * torch.tensor(g0)).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-2)
