"""A small seeded sweep of the pooling and window family against PyTorch, eager and
compiled: windows equal to the input, ceil_mode with padding, count_include_pad and
divisor_override, dilation, output size 1, unbatched and non-contiguous inputs; values,
indices and input gradients for a random cotangent (float64)."""
import numpy as np
import pytest

import tracejit as tj

torch = pytest.importorskip("torch", reason="compares with PyTorch")

SP = {1: (7,), 2: (7, 6), 3: (5, 6, 4)}
CASES = [(f"{kind}_pool{n}d", n, kw) for n in (1, 2, 3) for kind, kw in [
    ("max", dict(kernel_size=SP[n])),
    ("max", dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True, return_indices=True)),
    ("avg", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("avg", dict(kernel_size=4, stride=3, padding=2, ceil_mode=True)),
    ("lp", dict(norm_type=2, kernel_size=2, stride=3, ceil_mode=True)),
    ("adaptive_max", dict(output_size=1, return_indices=True)),
    ("adaptive_avg", dict(output_size=(3,) * n))]]
CASES += [("avg_pool2d", 2, dict(kernel_size=3, padding=1, ceil_mode=True, divisor_override=4)),
          ("avg_pool3d", 3, dict(kernel_size=2, stride=1, padding=1, divisor_override=3)),
          ("interpolate", 2, dict(size=(1, 9), mode="bicubic", align_corners=True)),
          ("interpolate", 3, dict(scale_factor=(0.5, 1.5, 2.0), mode="trilinear")),
          ("pixel_shuffle", 2, dict(upscale_factor=1)),
          ("unfold", 2, dict(kernel_size=(7, 6)))]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("layout", ["batched", "unbatched_transposed"])
@pytest.mark.parametrize("name, n, kw", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_matches_pytorch(name, n, kw, layout, compiled):
    rng = np.random.default_rng(len(CASES) * n + len(kw))
    x = rng.standard_normal((2, 3) + SP[n]) if layout == "batched" else rng.standard_normal((3,) + SP[n][::-1])
    xt, xj = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    it, ij = xt, xj
    if layout != "batched":   # a permuted (non-contiguous) view of an unbatched input
        if name in ("interpolate", "unfold") or name.startswith("pixel"):
            pytest.skip("takes a batched input only")
        perm = (0,) + tuple(range(n, 0, -1))
        it, ij = xt.permute(perm), xj.permute(perm)
    ft = lambda a: getattr(torch.nn.functional, name)(a, **kw)  # noqa: E731
    fj = lambda a: getattr(tj.nn.functional, name)(a, **kw)  # noqa: E731
    ot, oj = ft(it), (tj.compile(fj) if compiled else fj)(ij)
    if kw.get("return_indices"):
        np.testing.assert_array_equal(oj[1].numpy(), ot[1].numpy())
        ot, oj = ot[0], oj[0]
    np.testing.assert_allclose(oj.detach().numpy(), ot.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(tuple(ot.shape))
    ot.backward(torch.tensor(g))
    oj.backward(tj.tensor(g))
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
