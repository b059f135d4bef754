"""tracejit.library (torch.library): a custom op with a numpy kernel, a registered
backward and keyword-only arguments gives torch's values and gradients; the older
Library/define/impl spelling; the op under ``tracejit.ops.<ns>``; errors."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _numpy_sin(m, ns):
    @m.library.custom_op(f"{ns}::numpy_sin", mutates_args=())
    def numpy_sin(x: m.Tensor, *, scale: float = 1.0) -> m.Tensor:
        return m.from_numpy(np.sin(x.detach().numpy()) * scale)

    @numpy_sin.register_fake
    def _(x, *, scale=1.0):
        return m.empty_like(x)

    def setup_context(ctx, inputs, keyword_only_inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.scale = keyword_only_inputs["scale"]

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * ctx.scale
    numpy_sin.register_autograd(backward, setup_context=setup_context)
    return numpy_sin


def test_custom_op_with_autograd_matches_torch():
    got = []
    for m, ns in ((torch, "libtest_torch"), (tj, "libtest_tj")):
        op = _numpy_sin(m, ns)
        x = m.tensor([0.1, 0.5, 1.0], requires_grad=True)
        y = op(x, scale=2.0)
        y.sum().backward()
        got.append((y.detach().numpy(), x.grad.numpy()))
        assert getattr(m.ops, ns).numpy_sin.default(x.detach()).numpy().tolist() == \
            pytest.approx(np.sin([0.1, 0.5, 1.0]).tolist())
    for a, b in zip(*got):
        np.testing.assert_allclose(b, a, rtol=1e-6)
    f = tj.compile(lambda v: tj.ops.libtest_tj.numpy_sin(v) + 1)   # (a numpy kernel: runs eagerly)
    with pytest.warns(RuntimeWarning, match="cannot be captured"):
        out = f(tj.tensor([0.5]))
    assert out.item() == pytest.approx(np.sin(0.5) + 1)


def test_library_define_and_impl_per_device():
    lib = tj.library.Library("libtest_lib", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    with pytest.raises(NotImplementedError, match="libtest_lib::twice: no implementation"):
        tj.ops.libtest_lib.twice(tj.ones(2))

    @tj.library.impl("libtest_lib::twice", "cpu")
    def twice(x):
        return x * 2
    assert tj.ops.libtest_lib.twice(tj.ones(2)).tolist() == [2.0, 2.0]
    lib.impl("twice", lambda x: x * 3, "CPU")
    assert tj.ops.libtest_lib.twice(tj.ones(1)).tolist() == [3.0]


def test_bad_names_and_unknown_ops_are_refused():
    with pytest.raises(ValueError, match="of the form 'namespace::op_name', got 'no_namespace'"):
        tj.library.custom_op("no_namespace", mutates_args=())
    with pytest.raises(ValueError, match="no custom op 'libtest_x::missing' is defined"):
        tj.library.register_fake("libtest_x::missing", lambda x: x)
    with pytest.raises(ValueError, match="kind must be 'DEF', 'IMPL' or 'FRAGMENT'"):
        tj.library.Library("libtest_y", "NEW")


def _numpy_ops(m, tag):
    @m.library.custom_op(f"{tag}::np_sin", mutates_args=())
    def np_sin(x: m.Tensor, k: float) -> m.Tensor:
        return m.from_numpy(np.sin(x.detach().numpy()) * k)

    @np_sin.register_fake
    def _(x, k):
        return m.empty_like(x)

    @m.library.custom_op(f"{tag}::np_pair", mutates_args=())
    def np_pair(x: m.Tensor, y: m.Tensor) -> tuple[m.Tensor, m.Tensor]:
        return m.from_numpy(x.numpy() + y.numpy()), m.from_numpy((x.numpy() * y.numpy()).sum(-1))

    @np_pair.register_fake
    def _(x, y):
        return m.empty_like(x), x.new_empty(x.shape[:-1])

    def f(x, y):
        b, c = np_pair(np_sin(x + 1, 2.0) * 2, y)
        return b.relu(), c + 1
    return f


def test_a_numpy_kernel_runs_as_one_step_of_a_compiled_function():
    """A kernel a capture cannot trace (numpy) runs as it is, shaped by register_fake; the
    function around it still compiles as one graph (fullgraph=True), as torch.compile's."""
    r = np.random.default_rng(0)
    f_tj, f_torch = _numpy_ops(tj, "tjnp"), _numpy_ops(torch, "tjnp")
    compiled = tj.compile(f_tj, fullgraph=True)
    for _ in range(2):
        x, y = r.standard_normal((3, 4)).astype(np.float32), r.standard_normal((3, 4)).astype(np.float32)
        want = f_torch(torch.tensor(x), torch.tensor(y))
        for got in (compiled(tj.tensor(x), tj.tensor(y)), f_tj(tj.tensor(x), tj.tensor(y))):
            for a, b in zip(got, want):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
