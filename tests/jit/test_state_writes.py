"""Module state written inside a compiled forward: buffers updated in place (BatchNorm's
running statistics) and tensors cached on attributes (``self.mask = ...``) are graph
outputs written back after each call, as eager would leave them; no tracer escapes."""

from __future__ import annotations

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.jit.tracer import Tracer


class RunningNorm(nn.Module):
    """BatchNorm's state handling in miniature."""

    def __init__(self, n):
        super().__init__()
        self.register_buffer("running_mean", tj.zeros(n))
        self.register_buffer("num_batches_tracked", tj.tensor(0, dtype=tj.int64))
        self.weight = nn.Parameter(tj.ones(n) * 1.5)
        self.positive = None

    def forward(self, x):
        if self.training:
            m = x.mean(0)
            with tj.no_grad():
                self.running_mean.mul_(0.9).add_(0.1 * m)
                self.num_batches_tracked += 1
        else:
            m = self.running_mean
        y = (x - m) * self.weight
        self.positive = y > 0          # a tensor cached on the module
        return y


@pytest.mark.parametrize("mode", ["trace", "script"])
def test_buffer_updates_and_cached_attributes_match_eager(mode, compiler):
    rng = np.random.default_rng(0)
    eager, model = RunningNorm(3), RunningNorm(3)
    compiled = getattr(tj, mode)(model, compiler=compiler)
    for step in range(4):
        x = tj.tensor(rng.standard_normal((5, 3)).astype(np.float32))
        ye, yc = eager(x), compiled(x)
        (ye * ye).sum().backward()
        (yc * yc).sum().backward()
        np.testing.assert_allclose(yc.detach().numpy(), ye.detach().numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(model.running_mean.numpy(), eager.running_mean.numpy(), rtol=1e-6)
        assert model.num_batches_tracked.item() == eager.num_batches_tracked.item() == step + 1
        assert type(model.positive) is tj.Tensor and not isinstance(model.positive, Tracer)
        np.testing.assert_array_equal(model.positive.numpy(), eager.positive.numpy())
        np.testing.assert_allclose(model.weight.grad.numpy(), eager.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.forward.cache_stats()["compiles"] == 1
    eager.eval()
    model.eval()
    x = tj.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    np.testing.assert_allclose(compiled(x).detach().numpy(), eager(x).detach().numpy(), rtol=1e-6, atol=1e-6)
    assert model.num_batches_tracked.item() == 4      # eval does not count


def test_backward_reads_the_buffer_value_the_forward_saw():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("s", tj.tensor([2.0, 3.0]))

        def forward(self, x):
            y = x * self.s                 # the backward needs s as it was here ...
            with tj.no_grad():
                self.s.mul_(10.0)          # ... and the call then updates it
            return y

    x = tj.tensor([1.0, 1.0], requires_grad=True)
    m = Scale()
    tj.script(m)(x).sum().backward()
    assert x.grad.tolist() == [2.0, 3.0] and m.s.tolist() == [20.0, 30.0]


class CachedMask(nn.Module):
    """The word-language-model Transformer's pattern: build a mask once, keep it on self."""

    def __init__(self):
        super().__init__()
        self.mask = None
        self.builds = 0

    def forward(self, x):
        if self.mask is None or self.mask.shape[0] != x.shape[0]:
            self.builds += 1
            self.mask = tj.where(tj.arange(x.shape[0]) > 0, 1.0, 0.0)
        return x * self.mask


def test_a_tensor_cached_on_self_is_written_back_not_leaked():
    m = CachedMask()
    cm = tj.trace(m)
    x = tj.ones(4)
    assert cm(x).tolist() == [0.0, 1.0, 1.0, 1.0]
    assert type(m.mask) is tj.Tensor and m.mask.tolist() == [0.0, 1.0, 1.0, 1.0]
    assert m(x).tolist() == [0.0, 1.0, 1.0, 1.0]        # a later eager call sees a real tensor
    assert cm(x * 2).tolist() == [0.0, 2.0, 2.0, 2.0]
    assert cm.forward.cache_stats()["compiles"] == 1


def test_a_failed_capture_leaves_no_tracer_on_the_module():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = None

        def forward(self, x):
            self.cache = x * 2
            return x @ tj.ones(3, 3)   # wrong shape: the capture fails

    m = Broken()
    with pytest.raises(Exception, match="matmul"):
        tj.trace(m)(tj.ones(2, 2))
    assert m.cache is None


def _bumped(nn_, lib, no_grad: bool):
    class Bumped(nn_.Module):
        def __init__(self):
            super().__init__()
            self.w = nn_.Parameter(lib.ones(2))

        def forward(self, x):
            if no_grad:
                with lib.no_grad():
                    self.w.add_(1.0)
            else:
                self.w.add_(1.0)
            return x * self.w
    return Bumped()


def test_updating_a_parameter_in_place_under_no_grad_matches_torch():
    # an EMA or a weight clip inside the compiled function: written back into the
    # parameter by each call, later reads see the new values with the gradient to the leaf
    torch = pytest.importorskip("torch")
    mine, ref = tj.compile(_bumped(nn, tj, True)), _bumped(torch.nn, torch, True)
    for k in range(3):
        x = np.full(2, 0.5 + k, np.float32)
        out, want = mine(tj.tensor(x)), ref(torch.tensor(x))
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy())
        out.sum().backward()
        want.sum().backward()
    np.testing.assert_allclose(mine.w.detach().numpy(), [4.0, 4.0])
    np.testing.assert_allclose(mine.w.grad.numpy(), ref.w.grad.numpy())
    assert mine.cache_stats()["eager_fallbacks"] == 0


def test_updating_a_parameter_in_place_with_grad_on_is_refused_as_eagerly():
    with pytest.raises(RuntimeError, match="requires grad.*no_grad"):
        tj.trace(_bumped(nn, tj, False))(tj.ones(2))


def test_a_parameter_read_after_a_write_through_its_data_matches_torch():
    # the reads after the write see the masked weight (the capture read the old one, a
    # silently wrong output), and its gradient goes to the weight as to a leaf
    torch = pytest.importorskip("torch")

    def run(m, compiled):
        class Masked(m.nn.Conv2d):
            def forward(self, x):
                before = (self.weight ** 2).sum()     # a read before the write: old values
                self.weight.data *= self.mask
                return super().forward(x) * self.weight.sum() + before
        conv = Masked(1, 2, 3, bias=False)
        r = np.random.default_rng(0)
        with m.no_grad():
            conv.weight.copy_(m.from_numpy(r.standard_normal((2, 1, 3, 3)).astype(np.float32)))
        conv.mask = m.zeros(2, 1, 3, 3)
        conv.mask[0] = 1.0
        f = tj.compile(conv) if compiled else conv
        out = []
        for _ in range(2):
            y = f(m.from_numpy(r.standard_normal((1, 1, 5, 5)).astype(np.float32)))
            (y * y).sum().backward()
            out += [y.detach().numpy(), conv.weight.grad.numpy().copy(), conv.weight.detach().numpy().copy()]
            with m.no_grad():
                conv.weight -= 0.1 * conv.weight.grad
            conv.weight.grad = None
        return out, f
    want, _ = run(torch, False)
    got, f = run(tj, True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    stats = f.cache_stats()
    assert (stats["compiles"], stats["eager_fallbacks"]) == (1, 0)


def test_writes_through_data_are_seen_by_later_reads_and_written_back():
    class Decay(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("r", tj.ones(3))
            self.w = nn.Parameter(tj.tensor([0.5, -2.0, 3.0]))

        def forward(self, x):
            self.r.data.mul_(2.0)        # a buffer: read after, through itself and .data
            y = x * self.r + self.r.data.sum() + x @ self.w
            self.w.data.clamp_(-1, 1)    # a parameter clipped after its last read
            return y

    eager, comp = Decay(), Decay()
    f = tj.compile(comp)
    for _ in range(3):
        want, got = eager(tj.ones(3)), f(tj.ones(3))
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    np.testing.assert_array_equal(comp.r.numpy(), [8.0, 8.0, 8.0])
    np.testing.assert_array_equal(comp.w.detach().numpy(), eager.w.detach().numpy())
    stats = f.cache_stats()
    assert (stats["compiles"], stats["eager_fallbacks"]) == (1, 0)


def _queue(nn_mod, lib):
    class Queue(nn_mod.Module):
        """MoCo's key queue with its pointer in an int attribute, a call counter and a
        decaying float, all set in forward."""
        def __init__(self, K=12, d=3):
            super().__init__()
            self.register_buffer("queue", lib.zeros(d, K))
            self.ptr, self.K, self.calls, self.temp = 0, K, 0, 1.0

        def forward(self, keys):
            self.calls += 1
            self.temp = self.temp * 0.5
            out = (keys @ self.queue).sum() / self.temp
            with lib.no_grad():
                self.queue[:, self.ptr:self.ptr + keys.shape[0]] = keys.T
            self.ptr = (self.ptr + keys.shape[0]) % self.K
            return out
    return Queue()


def test_numbers_set_in_forward_stay_compiled_and_match_torch():
    torch = pytest.importorskip("torch")
    m, e, t = _queue(nn, tj), _queue(nn, tj), _queue(torch.nn, torch)
    c = tj.compile(m, fullgraph=True)
    rng = np.random.default_rng(0)
    for _ in range(8):
        k = rng.standard_normal((4, 3)).astype(np.float32)
        got, want = c(tj.tensor(k)), t(torch.tensor(k))
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        assert (m.ptr, m.calls, m.temp) == (t.ptr, t.calls, t.temp)
        assert type(m.ptr) is int and type(m.temp) is float
        np.testing.assert_allclose(m.queue.numpy(), t.queue.numpy())
        e(tj.tensor(k))
        assert (e.ptr, e.calls, e.temp) == (m.ptr, m.calls, m.temp)
    s = c.cache_stats()
    # constants, then the changed numbers as runtime inputs, then the pointer back at 0
    assert s["compiles"] <= 3 and s["hits"] >= 5 and s["eager_fallbacks"] == 0


def test_numbers_set_in_forward_stay_equal_to_eager_across_entries():
    m, e = _queue(nn, tj), _queue(nn, tj)
    m.K = e.K = 8   # (the pointer wraps early enough for every batch size to fit)
    c = tj.compile(m, fullgraph=True)
    rng = np.random.default_rng(1)
    for n in (4, 4, 2, 4, 3, 2, 2, 4, 3, 3, 4, 2):   # batch sizes: entries per size and pointer
        k = tj.tensor(rng.standard_normal((n, 3)).astype(np.float32))
        np.testing.assert_allclose(c(k).item(), e(k).item(), rtol=1e-5)
        assert (m.ptr, m.calls, m.temp) == (e.ptr, e.calls, e.temp)
        np.testing.assert_allclose(m.queue.numpy(), e.queue.numpy())
    assert c.cache_stats()["eager_fallbacks"] == 0


def test_a_size_kept_in_an_int_attribute_follows_a_symbolic_batch():
    class Counting(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.seen, self.last = 0, 0

        def forward(self, x):
            self.seen += x.shape[0]
            self.last = x.shape[0]
            return self.lin(x)

    m = Counting()
    c = tj.compile(m, fullgraph=True)
    sizes = (4, 5, 3, 7, 2, 9, 6)
    for b in sizes:
        x = tj.randn(b, 3)
        np.testing.assert_allclose(c(x).detach().numpy(), m.lin(x).detach().numpy(), rtol=1e-6)
        assert m.last == b and type(m.last) is int
    assert m.seen == sum(sizes) and c.cache_stats()["compiles"] == 2


def test_a_number_computed_from_tensor_values_is_still_a_graph_break():
    class Peak(nn.Module):
        def __init__(self):
            super().__init__()
            self.peak = 0

        def forward(self, x):
            self.peak = max(self.peak, int(x.argmax()))
            return x * 2

    m = Peak()
    c = tj.compile(m)
    with pytest.warns(RuntimeWarning, match="cannot be captured"):
        c(tj.tensor([1.0, 5.0, 2.0]))
    c(tj.tensor([1.0, 2.0, 3.0, 9.0]))
    assert m.peak == 3 and c.cache_stats()["eager_fallbacks"] == 1


class SampledLayer(nn.Module):
    """Bayes by Backprop's layer: a log-probability kept on the module, a tensor in
    training and the number 0 in eval, set before anything reads it."""

    def __init__(self):
        super().__init__()
        self.mu = nn.Parameter(tj.tensor([0.5, -1.0, 2.0]))
        self.log_prior = 0

    def forward(self, x):
        if self.training:
            self.log_prior = -(self.mu ** 2).sum()
        else:
            self.log_prior = 0
        return x * self.mu


def test_a_number_set_on_self_is_set_again_by_every_call_not_a_graph_break():
    import warnings
    m = SampledLayer()
    cm = tj.compile(m)
    x = tj.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")    # no "runs eagerly from now on"
        # (eval first: its capture sets 0 over the 0 there, which it must still record)
        for training in (False, True, False, True, False, False):
            m.train(training)
            assert cm(x).tolist() == [0.5, -1.0, 2.0]
            if training:
                assert type(m.log_prior) is tj.Tensor and m.log_prior.item() == -5.25
            else:
                assert type(m.log_prior) is int and m.log_prior == 0
            m.log_prior = "stale"          # a call sets it again even when its guard holds
    assert cm.cache_stats()["compiles"] == 2 and cm.cache_stats().get("eager_fallbacks", 0) == 0


def test_a_number_set_and_then_read_in_forward_is_the_value_set():
    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.k = 3

        def forward(self, x):
            self.k = 3
            return x * self.k

    m = Fixed()
    c = tj.compile(m, fullgraph=True)
    x = tj.tensor([1.0, 2.0])
    for k in (1, 5, 7, 9):   # (a changing number: the next capture reads it as an input)
        m.k = k
        assert c(x).tolist() == [3.0, 6.0] and m.k == 3


def test_a_call_setting_equal_values_leaves_the_module_guards_epoch_alone():
    from tracejit.nn.module import state_epoch

    class Marks(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", tj.zeros(1))
            self.k = 0.0

        def forward(self, x):
            self.k = float("nan")   # (equal to itself for the guards: NaN)
            self.seen = None        # (a buffer: still one after the call)
            return x + 1

    m = Marks()
    c = tj.compile(m, fullgraph=True)
    x = tj.tensor([1.0, 2.0])
    c(x)
    assert m.k != m.k and "seen" in m._buffers and m.seen is None
    for _ in range(3):   # nothing changes: every call is a hit that sets nothing
        before = state_epoch[0]
        assert c(x).tolist() == [2.0, 3.0]
        assert state_epoch[0] == before
    assert c.cache_stats()["compiles"] == 1


class KeepsBlockOutputs(nn.Module):
    """N-BEATS keeps each block's forecast in a list it sets on itself in forward."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
        self.parts = []

    def forward(self, x):
        self.parts = []
        for b in self.blocks:
            x = x - b(x)
            self.parts.append(x.sum(1))
        self.last = {"x": x, "n": len(self.parts)}
        return x


def test_a_list_set_on_self_then_appended_to_is_set_again_by_every_call():
    import warnings
    tj.manual_seed(0)
    m = KeepsBlockOutputs()
    cm = tj.compile(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")    # no "runs eagerly from now on"
        for scale in (1.0, 2.0, 3.0):
            x = tj.ones(2, 3) * scale
            want = m(x)
            want_parts = [p.tolist() for p in m.parts]
            got = cm(x)
            assert np.allclose(got.tolist(), want.tolist())
            assert np.allclose([p.tolist() for p in m.parts], want_parts)
            assert m.last["n"] == 3 and not any(isinstance(p, Tracer) for p in m.parts)
            m.parts = ["stale"]
    (g,) = tj.autograd.grad(cm(tj.ones(2, 3)).sum() * 0 + m.parts[0].sum(), [m.blocks[0].weight])
    (w,) = tj.autograd.grad(m(tj.ones(2, 3)).sum() * 0 + m.parts[0].sum(), [m.blocks[0].weight])
    assert np.allclose(g.tolist(), w.tolist())
    assert cm.cache_stats()["compiles"] == 1


def test_a_loss_kept_on_self_carries_its_gradient():
    """A mixture-of-experts' auxiliary loss set on the module, added to the loss after the call."""
    class WithAux(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.aux_loss = None

        def forward(self, x):
            y = self.lin(x)
            self.aux_loss = y.pow(2).mean()
            return y.sum()

    grads = []
    for compiled in (False, True):
        tj.manual_seed(0)
        m = WithAux()
        f = tj.compile(m) if compiled else m
        (f(tj.ones(4, 3)) + m.aux_loss).backward()
        grads.append(m.lin.weight.grad.tolist())
    assert np.allclose(grads[0], grads[1])


_SHARED_LOG: list = []


def test_a_global_list_set_on_self_stays_that_list():
    """Setting an existing container on the module shares it, as eagerly: each call's
    append lands in the global list, and the attribute is that list."""
    class Logs(nn.Module):
        def forward(self, x):
            self.log = _SHARED_LOG
            self.log.append(x.sum())
            return x * 2

    _SHARED_LOG.clear()
    m = Logs()
    cm = tj.compile(m)
    for k in range(3):
        cm(tj.ones(2) * k)
    assert m.log is _SHARED_LOG
    assert [float(v) for v in _SHARED_LOG] == [0.0, 2.0, 4.0]


class _Carry(nn.Module):
    """A tensor attribute each call reads and sets anew (a carried state), started as
    None (`lazy`) or as a tensor; `buffer`: a registered buffer rebound the same way."""

    def __init__(self, lazy: bool, buffer: bool = False):
        super().__init__()
        self.lazy = lazy
        if buffer:
            self.register_buffer("state", tj.zeros(2) if not lazy else None)
        else:
            self.state = None if lazy else tj.zeros(2)

    def forward(self, x):
        if self.state is None:
            self.state = x.new_zeros(2)
        self.state = 0.5 * self.state + x.mean(0)
        return x.sum() + self.state.sum()


@pytest.mark.parametrize("lazy", [False, True])
@pytest.mark.parametrize("buffer", [False, True])
def test_a_tensor_attribute_set_from_itself_carries_over_calls(lazy, buffer):
    """Each call must read the tensor the call before set, not the one the capture saw
    (the recurrence ``state = 0.5 * state + mean`` gave mean alone from the second call on)."""
    torch = pytest.importorskip("torch", reason="compares with PyTorch")

    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.state = None

        def forward(self, x):
            if self.state is None:
                self.state = x.new_zeros(2)
            self.state = 0.5 * self.state + x.mean(0)
            return x.sum() + self.state.sum()
    ref, m = Ref(), _Carry(lazy, buffer)
    f = tj.compile(m)
    for i in range(4):
        x = np.arange(6, dtype=np.float32).reshape(3, 2) * (i - 1.5)
        want = ref(torch.tensor(x))
        np.testing.assert_allclose(f(tj.tensor(x)).item(), want.item(), rtol=1e-6)
        np.testing.assert_allclose(m.state.numpy(), ref.state.numpy(), rtol=1e-6)
    assert f.cache_stats()["compiles"] <= 2   # (None, then a tensor: one capture each)


class _Reader(nn.Module):
    def __init__(self, carry):
        super().__init__()
        self.carry = carry
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x) * self.carry.state


def test_a_rebound_attribute_makes_only_the_trees_holding_it_look_again(monkeypatch):
    """A compiled call that sets its module's tensor attribute anew leaves other compiled
    modules' guards on their one-compare path; a tree holding that module looks again and
    reads the new tensor."""
    from tracejit.jit import module_guard
    carry = _Carry(lazy=False, buffer=False)
    other = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    reader = _Reader(carry)
    fc, fo, fr = tj.compile(carry), tj.compile(other), tj.compile(reader)
    x = tj.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    with tj.no_grad():
        fc(x), fo(x), fr(x)
        looks = []
        real = module_guard._StateCheck._look
        monkeypatch.setattr(module_guard._StateCheck, "_look",
                            lambda self: looks.append(type(self.root).__name__) or real(self))
        for i in range(3):
            fc(x * i)
            np.testing.assert_array_equal(fo(x).numpy(), other(x).numpy())
            np.testing.assert_allclose(fr(x).numpy(), reader(x).numpy(), rtol=1e-6)
    assert "Sequential" not in looks and "_Reader" in looks
    assert fr.cache_stats()["compiles"] == 1
