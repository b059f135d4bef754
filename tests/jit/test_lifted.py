"""Numbers read from module attributes, globals and closures that keep changing become
runtime inputs: the second capture serves every later value (torch.compile: 2 captures),
and each call computes with the value it finds, as eager PyTorch does. An int used as a
slice bound is a symbolic size there."""
import math
import warnings

import numpy as np
import pytest

import tracejit as tj

SCALE = 2.0


@pytest.fixture(autouse=True)
def _errors_on_recompile_limit():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # the recompile-limit warning fails a test
        yield


def _eq(a, b):
    np.testing.assert_allclose(np.asarray(a.detach().numpy()), np.asarray(b.detach().numpy()),
                               rtol=1e-6, atol=1e-6)


class Temp(tj.nn.Module):
    def __init__(self):
        super().__init__()
        self.temp = 1.0
        self.lin = tj.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x) * self.temp


def _torch_temp(m):
    torch = pytest.importorskip("torch")
    ref = torch.nn.Linear(3, 2)
    ref.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.lin.state_dict().items()})
    return torch, ref


@pytest.mark.parametrize("backend", ["interpret", None])
def test_float_attribute_changing_every_call_captures_twice(backend):
    m = Temp()
    torch, ref = _torch_temp(m)
    cm = tj.compile(m, backend=backend)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    for i in range(12):
        m.temp = 0.25 + 0.5 * i
        got = cm(tj.tensor(x))
        want = ref(torch.tensor(x)) * m.temp
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert cm.forward.cache_stats()["compiles"] == 2   # torch.compile: 2
    assert "temp (any float)" in cm.forward.entries[-1].extra.text()


def test_float_attribute_gradient_uses_each_calls_value():
    m = Temp()
    torch, ref = _torch_temp(m)
    cm = tj.compile(m, backend="interpret")
    x = np.ones((4, 3), np.float32)
    for i in range(4):
        m.temp = 0.5 + i
        cm(tj.tensor(x)).sum().backward()
        (ref(torch.tensor(x)) * m.temp).sum().backward()
        np.testing.assert_allclose(m.lin.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-6)
        m.lin.weight.grad = None
        ref.weight.grad = None
    assert cm.forward.cache_stats()["compiles"] == 2


class Quantizer(tj.nn.Module):
    """wav2vec 2.0's Gumbel quantizer returns its annealed temperature with its result."""
    def __init__(self):
        super().__init__()
        self.curr_temp = 2.0
        self.lin = tj.nn.Linear(3, 2)

    def forward(self, x):
        return {"x": self.lin(x) / self.curr_temp, "temp": self.curr_temp}


@pytest.mark.parametrize("backend", ["interpret", None])
def test_a_lifted_number_returned_as_read_is_the_python_number(backend):
    m = Quantizer()
    cm = tj.compile(m, backend=backend)
    for temp in (2.0, 1.2, 0.9, 0.7):
        m.curr_temp = temp
        out = cm(tj.ones(2, 3))
        assert type(out["temp"]) is float and out["temp"] == temp   # not its float32 rounding
        _eq(out["x"], m.lin(tj.ones(2, 3)) / temp)
    assert cm.forward.cache_stats()["compiles"] == 2


def test_python_decisions_on_a_lifted_float_are_guarded():
    class Branchy(tj.nn.Module):
        def __init__(self):
            super().__init__()
            self.t = 1.0

        def forward(self, x):
            y = x * math.sqrt(self.t)     # needs the number: specialized, guarded on it
            return y + 1 if self.t > 3.0 else y - 1

    m = Branchy()
    cm = tj.compile(m, backend="interpret")
    x = tj.ones(3)
    for t in (1.0, 2.0, 4.0, 2.0, 9.0):
        m.t = t
        _eq(cm(x), x * math.sqrt(t) + (1 if t > 3 else -1))


def test_float_global_and_closure_changing_every_call_capture_twice():
    global SCALE

    def f(x):
        return x * SCALE + 1

    def make():
        k = 1.0

        def g(x):
            return x * k

        def set_k(v):
            nonlocal k
            k = v
        return g, set_k

    g, set_k = make()
    cf, cg = tj.compile(f, backend="interpret"), tj.compile(g, backend="interpret")
    x = tj.arange(4.0)
    try:
        for i in range(10):
            SCALE = 2.0 + i
            set_k(0.5 * i + 0.25)
            _eq(cf(x), x * SCALE + 1)
            _eq(cg(x), x * (0.5 * i + 0.25))
        assert SCALE == 11.0 and type(SCALE) is float   # put back after each capture
    finally:
        SCALE = 2.0
    assert cf.cache_stats()["compiles"] == 2 and cg.cache_stats()["compiles"] == 2


def test_lifted_float_that_becomes_an_int_captures_again():
    m = Temp()
    cm = tj.compile(m, backend="interpret")
    x = tj.ones(2, 3)
    for t in (1.0, 2.0, 3.0):
        m.temp = t
        cm(x)
    m.temp = 5
    _eq(cm(x), m.lin(x) * 5)
    assert cm.forward.cache_stats()["compiles"] == 3


def test_float_code_needs_as_a_python_float_stays_specialized():
    class Hexed(tj.nn.Module):
        def __init__(self):
            super().__init__()
            self.t = 1.0

        def forward(self, x):
            return x * len(float.hex(self.t))   # a float proper: a traced input cannot be one

    m = Hexed()
    cm = tj.compile(m, backend="interpret", fullgraph=True)
    x = tj.ones(2)
    for t in (1.0, 0.1, 2.0):
        m.t = t
        _eq(cm(x), x * len(float.hex(t)))
    assert cm.forward.cache_stats()["compiles"] == 3


def test_dynamic_false_keeps_floats_specialized():
    m = Temp()
    cm = tj.compile(m, backend="interpret", dynamic=False)
    x = tj.ones(2, 3)
    for t in (1.0, 2.0, 3.0):
        m.temp = t
        _eq(cm(x), m.lin(x) * t)
    assert cm.forward.cache_stats()["compiles"] == 3


def test_an_optimizers_learning_rate_set_by_a_schedule_captures_twice():
    """A hand-written compiled update reading ``opt.param_groups[0]["lr"]`` while a schedule
    changes it every step: the entry becomes a runtime input (not one capture per rate),
    the optimizer keeps its float, and each step uses the rate it finds."""
    lin = tj.nn.Linear(2, 2)
    opt = tj.optim.SGD(lin.parameters(), lr=0.1)
    sched = tj.optim.lr_scheduler.ExponentialLR(opt, 0.5)

    @tj.compile
    def update(p, g):
        return p - opt.param_groups[0]["lr"] * g
    p, g = tj.ones(2), tj.full((2,), 2.0)
    for _ in range(6):
        lr = opt.param_groups[0]["lr"]
        _eq(update(p, g), p - lr * 2.0)
        assert type(opt.param_groups[0]["lr"]) is float
        sched.step()
    assert update.cache_stats()["compiles"] == 2


def test_float_entries_of_a_config_object_and_a_global_dict_capture_twice():
    class Cfg:
        pass
    cfg = Cfg()
    cfg.scale = 1.0
    table = {"shift": 0.0}

    @tj.compile
    def f(x):
        return x * cfg.scale + table["shift"]
    x = tj.ones(2)
    for k in range(6):
        cfg.scale, table["shift"] = 1.0 + k, 0.5 * k
        _eq(f(x), x * (1.0 + k) + 0.5 * k)
    assert f.cache_stats()["compiles"] == 2
    assert type(cfg.scale) is float and type(table["shift"]) is float
    cfg.scale = 3     # an int now: captured again, as a constant
    _eq(f(x), x * 3 + 2.5)
    assert f.cache_stats()["compiles"] == 3


class Queue(tj.nn.Module):
    """MoCo's queue of negatives, its pointer a Python int the training loop advances."""

    def __init__(self, dim=3, k=12):
        super().__init__()
        self.register_buffer("queue", tj.zeros(dim, k))
        self.ptr = 0

    def forward(self, q, keys):
        self.queue[:, self.ptr:self.ptr + keys.shape[0]] = keys.T
        return q @ self.queue.clone() + self.queue[:, self.ptr].sum()


@pytest.mark.parametrize("backend", ["interpret", None])
def test_int_attribute_used_as_a_slice_start_captures_twice(backend):
    torch = pytest.importorskip("torch")
    m = Queue()
    cm = tj.compile(m, backend=backend)
    queue = torch.zeros(3, 12)
    r = np.random.default_rng(0)
    for step in range(9):
        q, keys = (r.standard_normal(s).astype(np.float32) for s in ((2, 3), (4, 3)))
        got = cm(tj.tensor(q), tj.tensor(keys))
        queue[:, m.ptr:m.ptr + 4] = torch.tensor(keys).T
        want = torch.tensor(q) @ queue + queue[:, m.ptr].sum()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        m.ptr = (m.ptr + 4) % 12
    np.testing.assert_allclose(m.queue.numpy(), queue.numpy())
    assert cm.forward.cache_stats()["compiles"] == 2   # ptr 0, then any ptr in [2, 8]
    assert type(m.ptr) is int and "ptr (any int)" in cm.forward.entries[-1].extra.text()


def test_int_closure_code_needs_as_a_python_int_is_guarded_on_its_value():
    def make():
        n = 1

        def f(x):
            for _ in range(n):    # a loop count: specialized, guarded on the value
                x = x * 2
            return x[n:n + 2]     # a slice bound: symbolic

        def set_n(v):
            nonlocal n
            n = v
        return f, set_n

    f, set_n = make()
    cf = tj.compile(f, backend="interpret")
    x = tj.arange(8.0)
    for n in (1, 2, 3, 2, 4, 3):
        set_n(n)
        _eq(cf(x), x[n:n + 2] * 2 ** n)
    assert cf.cache_stats()["compiles"] == 4   # one per loop count
