"""Behaviour on a real GPU: cupy-backed tensors, eager ops through cupy, autograd, the
fused CUDA kernels on cupy arrays. Marked ``gpu`` and skipped without cupy and a GPU
(``pytest -m gpu tests/cuda`` on a machine with one)."""
from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit.errors import DeviceMismatchError

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not tj.cuda.is_available(), reason="needs cupy and a CUDA GPU")]


@pytest.fixture
def cp():
    import cupy
    return cupy


def test_tensors_live_in_cupy_arrays(cp):
    x = tj.tensor([1.0, 2.0, 3.0], device="cuda")
    assert x.device == tj.device("cuda:0") and isinstance(x._data, cp.ndarray)
    assert x.cpu().device == tj.device("cpu") and x.cpu().tolist() == [1.0, 2.0, 3.0]
    y = tj.ones(2, 3).cuda()
    assert isinstance(y._data, cp.ndarray) and y.to("cpu").numpy().sum() == 6
    assert tj.zeros(4, device="cuda").device.type == "cuda"


def test_eager_ops_and_matmul_run_through_cupy(cp):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    ta, tb = tj.tensor(a, device="cuda"), tj.tensor(b, device="cuda")
    out = tj.tanh(ta @ tb) * 2.0 + 1.0
    assert isinstance(out._data, cp.ndarray)
    np.testing.assert_allclose(out.cpu().numpy(), np.tanh(a @ b) * 2 + 1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.sum(1).cpu().numpy(), a.sum(1), rtol=1e-5)
    tj.cuda.synchronize()


def test_autograd_on_cuda_tensors(cp):
    rng = np.random.default_rng(1)
    w = tj.tensor(rng.standard_normal((3, 2)).astype(np.float32), device="cuda", requires_grad=True)
    x = tj.tensor(rng.standard_normal((4, 3)).astype(np.float32), device="cuda")
    loss = (tj.sigmoid(x @ w) ** 2).sum()
    loss.backward()
    assert w.grad.device == tj.device("cuda")
    wc = tj.tensor(w.detach().cpu().numpy(), requires_grad=True)
    (tj.sigmoid(x.cpu() @ wc) ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.cpu().numpy(), wc.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_nn_and_optim_on_cuda():
    model = tj.nn.Sequential(tj.nn.Linear(3, 8), tj.nn.ReLU(), tj.nn.Linear(8, 1)).to("cuda")
    opt = tj.optim.SGD(model.parameters(), lr=0.1)
    x, y = tj.randn(16, 3, device="cuda"), tj.randn(16, 1, device="cuda")
    first = None
    for _ in range(5):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first


def test_mixing_devices_raises_naming_both():
    with pytest.raises(DeviceMismatchError, match="cuda:0"):
        tj.ones(3, device="cuda") + tj.ones(3)


def test_fused_kernel_on_cupy_arrays_matches_cpu(cp):
    from tracejit.compiler import codegen_cuda
    from tracejit.jit.passes import optimize
    from tracejit.jit.tracer import TraceContext
    from tracejit.ops.registry import Aval

    def gelu(x, y, z):
        a = x * y + z
        return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))

    def loss(p, y, b):
        return ((p - y + b) ** 2).sum(), (p * b).sum(1, keepdim=True)

    rng = np.random.default_rng(2)
    for fn, shapes in [(gelu, [(1000, 37)] * 3), (loss, [(300, 17), (300, 17), (17,)])]:
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        ctx = TraceContext()
        with ctx:
            ts = [ctx.new_input(Aval(s, tj.float32), f"a{i}") for i, s in enumerate(shapes)]
            out = fn(*ts)
        outs = out if isinstance(out, tuple) else (out,)
        g = optimize(ctx.graph([ctx.atom(o) for o in outs]))
        got = codegen_cuda.run_graph(g, *[cp.asarray(a) for a in arrays], xp=cp)
        expect = fn(*[tj.tensor(a) for a in arrays])
        expect = expect if isinstance(expect, tuple) else (expect,)
        for gv, ev in zip(got, expect):
            assert isinstance(gv, cp.ndarray)
            np.testing.assert_allclose(cp.asnumpy(gv), ev.numpy(), rtol=1e-4, atol=1e-4)


def test_compiled_function_on_cuda_tensors():
    """The JIT path end to end (needs plan.py to route CUDA groups to codegen_cuda)."""
    def f(x, y, z):
        a = x * y + z
        return 0.5 * a * (1 + tj.tanh(0.79788456 * (a + 0.044715 * a ** 3)))

    xs = [tj.randn(256, 33, device="cuda") for _ in range(3)]
    out = tj.trace(f)(*xs)
    assert out.device == tj.device("cuda")
    np.testing.assert_allclose(out.cpu().numpy(), f(*[x.cpu() for x in xs]).numpy(), rtol=1e-5, atol=1e-5)


def test_compiled_kernels_launch_past_numbas_dispatcher(monkeypatch):
    """The compiled kernels launch through cuda_direct on this numba-cuda, and agree
    with the CPU."""
    from tracejit.compiler import cuda_direct
    calls = []
    real = cuda_direct.DirectKernel.__call__

    def counted(self, *args):
        calls.append(self)
        return real(self, *args)
    monkeypatch.setattr(cuda_direct.DirectKernel, "__call__", counted)

    def f(x, y):
        a = x * y + 1.0
        return tj.softmax(a, -1), (a * a).sum(), a.sum(0)

    xs = [tj.randn(300, 129, device="cuda") for _ in range(2)]
    got = tj.trace(f)(*xs)
    expect = f(*[x.cpu() for x in xs])
    assert calls
    for g, e in zip(got, expect):
        np.testing.assert_allclose(g.cpu().numpy(), e.numpy(), rtol=1e-4, atol=1e-4)
