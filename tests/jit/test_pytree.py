"""A compiled forward's results in the shapes models return them: a dataclass, an
OrderedDict subclass (transformers' ModelOutput, both at once), each call a new object
holding its own tensors, with PyTorch's values and gradients."""
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

import tracejit as tj
from tracejit.jit.pytree import flatten, unflatten

torch = pytest.importorskip("torch")


@dataclass
class Output:
    logits: object
    loss: Optional[object] = None
    steps: int = 0


class ModelOutput(OrderedDict):
    pass


@dataclass
class CausalLMOutput(ModelOutput):   # as transformers declares its outputs
    loss: Optional[object] = None
    logits: Optional[object] = None

    def __post_init__(self):
        for k in ("loss", "logits"):
            if getattr(self, k) is not None:
                self[k] = getattr(self, k)


def _net(lib, kind):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.nn.Linear(3, 2)

        def forward(self, x):
            y = self.fc(x)
            if kind == "dataclass":
                return Output(logits=y, loss=y.pow(2).mean(), steps=1)
            if kind == "mapping":
                out = ModelOutput()
                out["logits"], out["loss"] = y, y.pow(2).mean()
                return out
            return CausalLMOutput(logits=y, loss=y.pow(2).mean())
    return Net()


@pytest.mark.parametrize("kind", ["dataclass", "mapping", "model_output"])
def test_compiled_results_are_new_objects_with_pytorchs_values(kind):
    ref, net = _net(torch, kind), _net(tj, kind)
    net.load_state_dict({k: tj.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    cf = tj.compile(net)
    xs = np.random.default_rng(0).standard_normal((3, 4, 3)).astype(np.float32)
    seen = []
    for x in xs:
        got, want = cf(tj.tensor(x)), ref(torch.tensor(x))
        assert type(got) is type(want) and all(got is not s for s in seen)
        seen.append(got)
        loss_g = got.loss if kind != "mapping" else got["loss"]
        loss_w = want.loss if kind != "mapping" else want["loss"]
        np.testing.assert_allclose(loss_g.item(), loss_w.item(), rtol=1e-5)
        loss_g.backward()
        loss_w.backward()
    np.testing.assert_allclose(net.fc.weight.grad.numpy(), ref.fc.weight.grad.numpy(), rtol=1e-5, atol=1e-7)
    st = cf.cache_stats()
    assert (st["compiles"], st["eager_fallbacks"]) == (1, 0)
    if kind == "model_output":
        assert list(seen[-1].keys()) == ["loss", "logits"] and seen[-1]["logits"] is seen[-1].logits


def test_flatten_takes_objects_only_when_asked():
    out = Output(logits=1, loss=2, steps=3)
    assert flatten(out) == ([out], None)
    leaves, spec = flatten(out, objects=True)
    assert leaves == [1, 2, 3] and unflatten(spec, [4, 5, 6]) == Output(4, 5, 6)
