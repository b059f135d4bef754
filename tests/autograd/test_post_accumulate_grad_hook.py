"""Tensor.register_post_accumulate_grad_hook: fires after a leaf's .grad is updated,
in eager backward and when the backward is a compiled program (script/trace)."""
import numpy as np
import pytest

import tracejit as tj


def _model():
    tj.manual_seed(0)
    return tj.nn.Sequential(tj.nn.Linear(4, 8), tj.nn.Tanh(), tj.nn.Linear(8, 3))


def _record(model):
    seen = []
    handles = []
    for name, p in model.named_parameters():
        handles.append(p.register_post_accumulate_grad_hook(
            lambda t, name=name: seen.append((name, t.grad.numpy().copy()))))
    return seen, handles


def test_hook_sees_accumulated_grad_each_backward():
    w = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    (w * 2).sum().backward()
    (w * w).sum().backward()
    np.testing.assert_allclose(seen[0], [2, 2, 2])
    np.testing.assert_allclose(seen[1], [2 + 2, 2 + 4, 2 + 6])  # after accumulation
    h.remove()
    (w * 2).sum().backward()
    assert len(seen) == 2


def test_hook_return_value_ignored_and_grad_not_replaced():
    w = tj.tensor([1.0, -1.0], requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda t: tj.zeros(2))
    (w * 3).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3, 3])


def test_hook_errors_on_non_leaf_and_no_grad():
    w = tj.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="does not require grad"):
        tj.tensor([1.0]).register_post_accumulate_grad_hook(lambda t: None)


def test_autograd_grad_does_not_fire_hook():
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(1))
    tj.autograd.grad((w * w).sum(), [w])
    assert seen == [] and w.grad is None


@pytest.mark.parametrize("compile_with", ["script", "trace"])
def test_compiled_backward_fires_the_same_hooks(compile_with):
    x = tj.randn(5, 4)
    y = tj.tensor([0, 1, 2, 1, 0])
    eager = _model()
    seen_e, _ = _record(eager)
    tj.nn.functional.cross_entropy(eager(x), y).backward()

    model = _model()
    seen_c, _ = _record(model)
    compiled = getattr(tj, compile_with)(model)
    for step in range(2):  # the second call is a cache hit of the compiled program
        model.zero_grad()
        seen_c.clear()
        tj.nn.functional.cross_entropy(compiled(x), y).backward()
        assert sorted(n for n, _ in seen_c) == sorted(n for n, _ in seen_e)
        got = dict(seen_c)
        for name, g in seen_e:
            np.testing.assert_allclose(got[name], g, rtol=1e-5, atol=1e-6)
        assert compiled.cache_stats()["entries"] >= 1
