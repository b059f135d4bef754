"""TorchScript's annotations (tracejit/jit/torchscript.py) around plain Python, written as
torchvision and timm write them, eager and inside a compiled forward."""
from typing import Dict, List

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn


class DenseLayer(nn.Module):
    """torchvision's _DenseLayer: overloads for TorchScript, then the Python forward."""
    use_scale: tj.jit.Final[bool]

    def __init__(self):
        super().__init__()
        tj._C._log_api_usage_once(f"{self.__module__}.{type(self).__name__}")
        self.lin = nn.Linear(3, 2)
        self.use_scale = True

    @tj.jit.unused
    def checkpointed(self, x):
        return self.lin(x)

    @tj.jit.ignore(drop=True)
    def dropped(self, x):
        return x * 2

    @tj.jit._overload_method  # noqa: F811
    def forward(self, x: List[tj.Tensor]) -> tj.Tensor:
        pass

    @tj.jit._overload_method  # noqa: F811
    def forward(self, x: tj.Tensor) -> tj.Tensor:  # noqa: F811
        pass

    def forward(self, x):  # noqa: F811
        xs = [x] if isinstance(x, tj.Tensor) else x
        out = tj.jit.annotate(Dict[str, tj.Tensor], {})
        tj._assert(xs[0].dim() == 2, f"expected 2-D input, got {xs[0].dim()}-D")
        if tj.jit.is_scripting() or tj.jit.is_tracing():
            raise RuntimeError("not scripted")
        out["y"] = self.dropped(self.checkpointed(tj.cat(xs, 0)))
        return out["y"] * 0.5 if self.use_scale else out["y"]


@pytest.mark.parametrize("compiled", [False, True])
def test_the_python_side_runs_as_written(compiled):
    m = DenseLayer()
    f = tj.compile(m) if compiled else m
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    want = (x.numpy() @ m.lin.weight.detach().numpy().T + m.lin.bias.detach().numpy())
    for arg in (x, [x]):
        np.testing.assert_allclose(f(arg).detach().numpy(), want, rtol=1e-6)
    with pytest.raises(AssertionError, match="expected 2-D input, got 1-D"):
        f(x[0])
    if compiled:
        assert f.cache_stats()["eager_fallbacks"] == 0


def test_decorators_give_the_function_itself():
    def g(x):
        return x + 1
    for deco in (tj.jit.unused, tj.jit.export, tj.jit.interface, tj.jit.script_if_tracing, tj.jit.ignore,
                 tj.jit.ignore(drop=False), tj.jit._overload):
        assert deco(g) is g
    assert tj.jit.annotate(List[int], []) == []


def test_fan_in_and_out_match_pytorch():
    torch = pytest.importorskip("torch")
    for shape in ((4, 3), (8, 4, 3, 3), (5, 2, 7)):
        assert nn.init._calculate_fan_in_and_fan_out(tj.ones(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.ones(*shape))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init._calculate_fan_in_and_fan_out(tj.ones(3))


def test_fork_wait_and_script_classes():
    fut = tj.jit.fork(lambda a, b=1: a + b, 2, b=3)
    assert fut.done() and tj.jit.wait(fut) == 5
    assert not isinstance(tj.nn.Linear(2, 2), tj.jit.ScriptModule)
    assert tj.ScriptModule is tj.jit.ScriptModule and not isinstance(len, tj.ScriptFunction)


def test_freeze_and_optimize_for_inference_as_torch():
    torch = pytest.importorskip("torch")
    ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    for lib, m in ((torch, ref), (tj, model)):
        with pytest.raises(RuntimeError, match="Freezing expects a ScriptModule"):
            lib.jit.freeze(m)
        with pytest.raises(RuntimeError, match="only implemented for modules in eval mode"):
            lib.jit.freeze(lib.jit.script(m.train()))
    want = torch.jit.freeze(torch.jit.script(ref.eval()))(torch.from_numpy(x)).detach().numpy()
    frozen = tj.jit.freeze(tj.jit.script(model.eval()))
    np.testing.assert_allclose(frozen(tj.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    assert all(p.requires_grad for p in model.parameters())   # (a copy was frozen)
    fast = tj.jit.optimize_for_inference(tj.jit.script(model.train()))
    assert not fast.training
    np.testing.assert_allclose(fast(tj.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="preserved_attrs names 'nope'"):
        tj.jit.freeze(frozen, preserved_attrs=["nope"])


def test_jit_isinstance_error_and_attribute_as_torch():
    from typing import Dict, List, Optional, Tuple
    torch = pytest.importorskip("torch")
    cases = [([tj.ones(1)], [torch.ones(1)], List[tj.Tensor], List[torch.Tensor]),
             ({"a": 1}, {"a": 1}, Dict[str, int], Dict[str, int]), (None, None, Optional[int], Optional[int]),
             ((1, "a"), (1, "a"), Tuple[int, str], Tuple[int, str]), ((1, "a"), (1, "a"), Tuple[int, int], Tuple[int, int]),
             ([1], [1], List[str], List[str]), (3, 3, int, int), ({"a": 1}, {"a": 1}, Dict[int, int], Dict[int, int])]
    for ours, theirs, ours_t, theirs_t in cases:
        assert tj.jit.isinstance(ours, ours_t) == torch.jit.isinstance(theirs, theirs_t)
    assert tj.jit.Attribute(3, int) == (3, int) and tj.jit.Attribute(3, int).value == 3
    assert issubclass(tj.jit.Error, Exception) and "isinstance" not in vars(tj.jit)
