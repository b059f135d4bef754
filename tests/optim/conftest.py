"""Helpers shared by the optimizer tests."""
import pytest


@pytest.fixture
def fused_launches(monkeypatch):
    """``watch(name)``: every fused update launch (`foreach.run`) of the optimizer form
    `name` ("adam", "sgd"; None: any) appends its parameters' sizes to the list it returns,
    then runs."""
    from tracejit.compiler.cpu.kernels import foreach

    def watch(name=None):
        calls = []
        real = foreach.run

        def run(form, key, columns, *a, **k):
            if name is None or key[0] == name:
                calls.append([p.size for p in columns[0]])
            return real(form, key, columns, *a, **k)
        monkeypatch.setattr(foreach, "run", run)
        return calls
    return watch


@pytest.fixture
def one_big_one_small():
    """``make(opt_cls, lr, calls, **kw)``: see `_one_big_one_small`."""
    return _one_big_one_small


def _one_big_one_small(opt_cls, lr: float, calls: list, **kw):
    """A parameter of `FUSED_MIN` elements and one of 10, both with gradient 1, stepped once
    by ``opt_cls([big, small], lr=lr, **kw)``: the default fused path takes them in one
    launch (the small one joins the big one), which `calls` (a `fused_launches` list) shows.
    Returns (optimizer, big, small)."""
    import tracejit as tj
    from tracejit import nn, optim
    big = nn.Parameter(tj.zeros(optim.FUSED_MIN))
    small = nn.Parameter(tj.zeros(10))
    opt = opt_cls([big, small], lr=lr, **kw)
    big.grad, small.grad = tj.ones(optim.FUSED_MIN), tj.ones(10)
    opt.step()
    assert calls == [[optim.FUSED_MIN, 10]]
    return opt, big, small
