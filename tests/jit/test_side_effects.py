"""Python side effects inside tracejit.compile: state a forward changes (a counter, a
list, a hook storing activations) changes on every call, as with torch.compile, because a
capture that sees one runs the function eagerly instead (a cache object passed in and
updated, or one made and returned holding traced tensors, included), except traced
tensors stored into a global or closure list or dict (hooks keeping activations), which
each compiled call stores, as it stores what the function puts into lists and dicts passed
to it (an incremental_state dict); trace/script keep torch.jit.trace's meaning (the Python code
runs once, at capture)."""
import warnings

import numpy as np
import pytest

import tracejit as tj
from tracejit import nn
from tracejit.errors import TraceError

LOG = []


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.steps = 0
        self.history = []

    def forward(self, x):
        self.steps += 1
        y = self.lin(x)
        self.history.append(1)
        return y


def _quiet(fn, *args):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in seen]


def test_module_state_changes_on_every_call():
    m = Counter()
    c = tj.compile(m)
    _, msgs = _quiet(c, tj.ones(1, 2))
    for _ in range(2):
        c(tj.ones(1, 2))
    assert m.steps == 3 and m.history == [1, 1, 1]
    assert any("changes the list attribute Counter.history" in s for s in msgs)


def test_a_forward_hook_storing_activations_sees_every_call():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    acts = []
    model[1].register_forward_hook(lambda mod, i, o: acts.append(o.detach().clone()))
    c = tj.compile(model)
    for k in range(3):
        _quiet(c, tj.full((1, 2), float(k)))
    assert len(acts) == 3
    np.testing.assert_allclose(acts[2].numpy(), model[1](model[0](tj.full((1, 2), 2.0))).detach().numpy())


FEATS: dict = {}
STORED: list = []


def test_hooks_storing_traced_tensors_stay_compiled_with_their_gradients():
    """A feature-matching loss on activations a forward hook stores (a dict set, a global
    list appended to): one capture, no eager fallback; each call stores its own tensors,
    which carry their gradients, into the container the name holds at that call."""
    def run(compiled):
        tj.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        m[1].register_forward_hook(lambda mod, i, o: FEATS.__setitem__("tanh", o))
        m[2].register_forward_hook(lambda mod, i, o: STORED.append(o.detach()))
        f = tj.compile(m, fullgraph=True) if compiled else m
        got = []
        for k in range(3):
            y = f(tj.full((2, 3), 0.3 * k + 0.1))
            loss = y.sum() + (FEATS["tanh"] ** 2).sum()
            m.zero_grad()
            loss.backward()
            got.append((loss.item(), m[0].weight.grad.numpy().copy(), STORED[-1].numpy()))
        return got, f
    global STORED
    want, _ = run(False)
    STORED = []   # rebound: the compiled calls store into the new list
    got, f = run(True)
    assert len(STORED) == 3 and f.cache_stats()["compiles"] == 1
    for (lg, gg, sg), (lw, gw, sw) in zip(got, want):
        np.testing.assert_allclose([lg], [lw], rtol=1e-6)
        np.testing.assert_allclose(gg, gw, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(sg, sw, rtol=1e-6)


STEP = 0


def test_a_hook_deciding_on_a_global_number_runs_eagerly():
    global STEP
    acts = []

    def hook(mod, i, o):
        if STEP % 2 == 0:
            acts.append(o.detach())
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    m[1].register_forward_hook(hook)
    c = tj.compile(m)
    for STEP in range(4):
        _quiet(c, tj.ones(1, 2))
    assert len(acts) == 2


def test_a_global_list_appended_to_grows_per_call():
    LOG.clear()

    def f(x):
        LOG.append(1)
        return x + 1
    cf = tj.compile(f)
    for _ in range(3):
        _quiet(cf, tj.ones(2))
    assert LOG == [1, 1, 1]


def test_fullgraph_raises_naming_the_effect():
    with pytest.raises(TraceError, match="changes the list attribute Counter.history"):
        tj.compile(Counter(), fullgraph=True)(tj.ones(1, 2))


def test_trace_keeps_capture_once_semantics():
    m = Counter()
    t = tj.trace(m, compiler="interpret")
    for _ in range(3):
        t(tj.ones(1, 2))
    assert m.steps == 1   # as torch.jit.trace: the Python code ran once, at capture


def test_pure_forwards_and_tracejits_own_hooks_stay_compiled():
    m = nn.utils.weight_norm(nn.Linear(3, 2))
    c = tj.compile(m, backend="eager")
    _, msgs = _quiet(c, tj.ones(4, 3))
    c(tj.ones(4, 3))
    assert not msgs and c.cache_stats()["eager_fallbacks"] == 0
    np.testing.assert_allclose(c(tj.ones(4, 3)).detach().numpy(), m(tj.ones(4, 3)).detach().numpy(), rtol=1e-6)


def test_print_of_a_tensor_prints_its_values_on_every_call(capsys):
    def f(x):
        y = x * 2
        print(y)
        print(f"sum={y.sum():.1f}")
        return y + 1
    cf = tj.compile(f)
    outs = [_quiet(cf, tj.full((2,), float(k)))[0].tolist() for k in (1, 2)]
    assert outs == [[3.0, 3.0], [5.0, 5.0]]
    assert capsys.readouterr().out.split("\n")[:4] == ["tensor([2., 2.])", "sum=4.0", "tensor([4., 4.])",
                                                       "sum=8.0"]
    with pytest.raises(TraceError, match="printing a tensor"):
        tj.compile(f, fullgraph=True)(tj.ones(2))


def test_a_print_runs_at_capture_and_says_compiled_calls_skip_it(capsys):
    def f(x):
        print("x is", tuple(x.shape))
        return x * 2.0
    for mk in (tj.compile, tj.trace, tj.script):
        g = mk(f)
        with pytest.warns(UserWarning, match=r"f: print\(\) at .*test_side_effects.py:\d+ ran once, while the "
                                             r"function was captured; compiled calls do not run it") as seen:
            out = g(tj.ones(3))
        assert [w.filename for w in seen if "print()" in str(w.message)] == [__file__]   # the user's call
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal(g(tj.ones(3)).numpy(), out.numpy())   # a hit: no print, no warning
        assert capsys.readouterr().out == "x is (3,)\n"
        assert g.cache_stats()["eager_fallbacks"] == 0
    import builtins
    assert type(builtins.print).__name__ == "builtin_function_or_method"   # put back after the captures


def test_python_random_and_clock_values_are_not_baked_in_silently():
    import random
    import time

    def jitter(x):
        return x * random.uniform(0.5, 1.5) + float(np.random.rand()) + (time.time() - time.time())
    c = tj.compile(jitter)   # runs eagerly: a fresh value on every call, as eagerly
    with pytest.warns(RuntimeWarning, match=r"runs eagerly from now on: .*it calls random.uniform\(\) at "
                                            r".*test_side_effects.py:\d+, whose result a graph would keep; "
                                            r"it calls numpy.random.rand\(\)"):
        a = c(tj.ones(3))
    b = c(tj.ones(3))
    assert not np.allclose(a.numpy(), b.numpy())
    assert c.cache_stats()["eager_fallbacks"] == 1
    t = tj.trace(jitter)     # torch.jit.trace's meaning: the value is kept, and said so
    with pytest.warns(UserWarning, match=r"jitter: random.uniform\(\) at .*, numpy.random.rand\(\) at .*, "
                                         r"time.time\(\) at .* ran once, while the function was captured; "
                                         r"compiled calls reuse the values returned then"):
        a = t(tj.ones(3))
    np.testing.assert_array_equal(t(tj.ones(3)).numpy(), a.numpy())
    assert random.uniform.__self__ is random._inst and not hasattr(np.random.rand, "_tracejit_wrapper")
    with warnings.catch_warnings():   # tracejit's own random ops are graph ops: no warning
        warnings.simplefilter("error")
        d = tj.compile(lambda x: tj.nn.functional.dropout(x, 0.5) + tj.randn(3))
        assert not np.allclose(d(tj.ones(100, 3)).numpy(), d(tj.ones(100, 3)).numpy())


def test_a_refused_capture_leaves_pythons_and_numpys_random_streams_as_eager():
    import random

    def teacher_forced(x, y):   # a seq2seq decoder's coin flip per step
        for _ in range(3):
            x = y if random.random() < 0.5 else x * 2 + float(np.random.randn())
        return x
    random.seed(1); np.random.seed(1)
    want = [teacher_forced(tj.ones(2), tj.zeros(2)).numpy() for _ in range(3)] + [random.random()]
    random.seed(1); np.random.seed(1)
    c = tj.compile(teacher_forced)
    with pytest.warns(RuntimeWarning, match="random.random"):
        got = [c(tj.ones(2), tj.zeros(2)).numpy() for _ in range(3)] + [random.random()]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


class Jitter(nn.Module):
    def __init__(self):
        super().__init__()
        self.rng = np.random.RandomState(3)

    def forward(self, x, rng):   # a numpy Generator passed in, a RandomState kept as an attribute
        return x * tj.from_numpy(rng.random(3).astype(np.float32)) + float(self.rng.randn())


def test_draws_from_numpy_generator_objects_are_not_baked_in():
    rng = np.random.default_rng(0)
    m = Jitter()
    c = tj.compile(m)
    with pytest.warns(RuntimeWarning, match=r"it draws from the Generator argument, whose numbers a graph would "
                                            r"keep; it draws from `Jitter.rng`"):
        got = [c(tj.ones(3), rng).numpy(), c(tj.ones(3), rng).numpy()]
    again, g = Jitter(), np.random.default_rng(0)   # the eager reruns draw from the states before the capture
    want = [again(tj.ones(3), g).numpy(), again(tj.ones(3), g).numpy()]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert c.cache_stats()["eager_fallbacks"] >= 1


class _Sampler:   # (a plain object keeping a generator)
    def __init__(self):
        self.rng = np.random.default_rng(0)


class _Noisy(nn.Module):
    def __init__(self, where):
        super().__init__()
        self.where, self.held = where, _Sampler() if where == "object" else {"rng": np.random.default_rng(0)}

    def forward(self, x):
        rng = self.held.rng if self.where == "object" else self.held["rng"]
        return x + float(rng.random())


@pytest.mark.parametrize("where", ["object", "dict", "closure"])
def test_draws_from_a_generator_kept_in_an_object_or_dict_are_not_baked_in(where):
    held = _Sampler()
    c = tj.compile(_Noisy(where) if where != "closure" else lambda x: x + float(held.rng.random()))
    with pytest.warns(RuntimeWarning, match="it draws from"):
        first = c(tj.zeros(3)).numpy()
    assert not np.array_equal(c(tj.zeros(3)).numpy(), first)


P = nn.Parameter(tj.ones(2))


def _reseed(x):
    tj.manual_seed(0)
    return x + tj.rand(2)


def _set_grad(x):
    P.grad = x * 2
    return x


Q = nn.Parameter(tj.ones(2))


def _set_data(x):
    Q.data = tj.cat([x, x]) * 2   # (a new shape: Q's memory is replaced)
    return x


@pytest.mark.parametrize("fn, state", [(_reseed, None), (_set_grad, lambda: P.grad),
                                       (_set_data, lambda: Q.data)])
def test_direct_writes_to_outside_state_happen_on_every_call(fn, state):
    # Reseeding, .grad and a resizing .data change state that no graph output carries: the
    # function runs eagerly, so a second call repeats them instead of replaying without them.
    cf = tj.compile(fn)
    with pytest.warns(RuntimeWarning, match="outside the graph"):
        cf(tj.zeros(2))
    for k in (1.0, 3.0):
        got = cf(tj.full((2,), k))
        got = got if state is None else state()
        want = fn(tj.full((2,), k))
        want = want if state is None else state()
        np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    Q.data = tj.ones(2)
    with pytest.raises(TraceError, match="outside the graph"):
        tj.compile(fn, fullgraph=True)(tj.zeros(2))


def test_gradients_read_inside_a_compiled_function_are_each_calls():
    # (a capture would keep the first call's gradient tensor, or its absence, for good)
    lin = nn.Linear(3, 2)

    def halve(params):
        for p in params:
            if p.grad is not None:
                p.grad.mul_(0.5)
    cf = tj.compile(halve)
    for i, set_to_none in enumerate((True, False, True)):
        lin.zero_grad(set_to_none=set_to_none)
        lin(tj.ones(4, 3) * (i + 1)).sum().backward()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cf(list(lin.parameters()))
        np.testing.assert_array_equal(lin.bias.grad.numpy(), [2.0, 2.0])
    assert cf.cache_stats()["compiles"] == 0
    with pytest.raises(TraceError, match=r"reading \.grad at .*test_side_effects.py"):
        tj.compile(lambda: lin.weight.grad * 2, fullgraph=True)()


@pytest.mark.parametrize("fullgraph", [False, True])
def test_setting_data_of_the_same_shape_is_a_captured_write(fullgraph):
    """A momentum encoder's ``p_k.data = p_k.data * m + p_q.data * (1 - m)`` in a compiled
    forward: the new values are written into p_k's memory on every call, no eager fallback."""
    def momentum(q, k):
        for pq, pk in zip(q.parameters(), k.parameters()):
            pk.data = pk.data * 0.9 + pq.data * 0.1
        return k(tj.ones(1, 3)).sum()
    q, k, k2 = (nn.Linear(3, 2) for _ in range(3))
    k2.load_state_dict(k.state_dict())
    cf = tj.compile(momentum, fullgraph=fullgraph)
    w = k.weight
    for _ in range(3):
        np.testing.assert_allclose(cf(q, k).item(), momentum(q, k2).item(), rtol=1e-6)
        np.testing.assert_allclose(k.weight.detach().numpy(), k2.weight.detach().numpy(), rtol=1e-6)
    assert k.weight is w and k.weight.requires_grad and k.weight.grad_fn is None
    assert cf.cache_stats()["compiles"] == 1 and cf.cache_stats()["eager_fallbacks"] == 0


def test_requires_grad_on_an_argument_takes_effect_on_every_call():
    torch = pytest.importorskip("torch")

    def f(lib, a):
        a.requires_grad_()
        return a * 2

    fn = tj.compile(lambda a: f(tj, a))
    for _ in range(3):
        want_in = torch.ones(3)
        want = f(torch, want_in)
        x = tj.ones(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # the graph-break warning
            y = fn(x)
        assert x.requires_grad == want_in.requires_grad is True
        assert y.requires_grad == want.requires_grad is True
        y.sum().backward()
        assert x.grad.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(TraceError, match="requires_grad_"):
        tj.compile(lambda a: f(tj, a), fullgraph=True)(tj.ones(3))


def test_requires_grad_unchanged_on_an_argument_stays_in_the_graph():
    x = tj.ones(3, requires_grad=True)
    y = tj.compile(lambda a: a.requires_grad_() * 2, fullgraph=True)(x)   # no change: fine
    assert y.requires_grad


@pytest.mark.parametrize("make", [lambda lib: lib.ones(3).requires_grad_(),
                                  lambda lib: lib.ones(3, requires_grad=True)])
def test_a_tensor_made_to_require_grad_inside_gets_its_graph(make):
    torch = pytest.importorskip("torch")

    def f(lib, a):
        w = make(lib)
        return (w * a).sum(), w

    want, want_w = f(torch, torch.arange(3.))
    want.backward()
    fn = tj.compile(lambda a: f(tj, a))
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # the graph-break warning
            got, w = fn(tj.arange(3.))
        assert got.requires_grad == w.requires_grad == want.requires_grad is True
        got.backward()
        assert w.grad.tolist() == want_w.grad.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(TraceError, match="made inside a compiled function"):
        tj.compile(lambda a: f(tj, a), fullgraph=True)(tj.ones(3))


def test_gradients_from_a_tensor_made_to_require_grad_inside_are_captured():
    # a physics loss on du/dx taken from a detached copy of the input (autograd.grad and
    # torch.func's transforms): the gradients are in the graph, the weights trained through them
    torch = pytest.importorskip("torch")
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)

    def f(lib, net, x):
        x = x.detach().requires_grad_()
        u = lib.tanh(net(x)).sum()
        (du,) = lib.autograd.grad(u, x, create_graph=True)
        hess = lib.func.hessian(lambda z: (z.sin() * z * z).sum())(x.detach()[0])
        return (du ** 2).mean() + lib.func.vmap(lib.func.grad(lambda z: z.pow(3).sum()))(x.detach()).sum() + hess.sum()

    ref = torch.nn.Linear(3, 1)
    net = tj.nn.Linear(3, 1)
    net.load_state_dict({k: tj.from_numpy(v.detach().numpy()) for k, v in ref.state_dict().items()})
    want = f(torch, ref, torch.from_numpy(a))
    want.backward()
    fn = tj.compile(lambda x: f(tj, net, x), fullgraph=True)
    for _ in range(2):
        net.zero_grad()
        got = fn(tj.from_numpy(a))
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        np.testing.assert_allclose(net.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-5)
    assert fn.cache_stats()["compiles"] == 1



def test_gradients_taken_inside_a_function_compiled_under_no_grad_are_captured():
    # an equation of motion from a learned energy's input gradient, evaluated under
    # no_grad (a rollout): the gradient is recorded in the graph and nothing leaves
    # requiring grad, so one graph serves, as torch.compile's
    torch = pytest.importorskip("torch")
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)

    def f(lib, net, x):
        with lib.enable_grad():
            z = x.detach().requires_grad_()
            (dz,) = lib.autograd.grad(lib.tanh(net(z)).sum(), z)
        return x + 0.1 * dz

    ref = torch.nn.Linear(3, 1)
    net = tj.nn.Linear(3, 1)
    net.load_state_dict({k: tj.from_numpy(v.detach().numpy()) for k, v in ref.state_dict().items()})
    with torch.no_grad():
        want = f(torch, ref, torch.from_numpy(a))
    fn = tj.compile(lambda x: f(tj, net, x), fullgraph=True)
    with tj.no_grad():
        got = fn(tj.from_numpy(a))
    assert not got.requires_grad and not want.requires_grad
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)

class KVCache:   # as transformers' DynamicCache: lists of tensors grown by update()
    def __init__(self):
        self.keys = []

    def update(self, k, i):
        if len(self.keys) <= i:
            self.keys.append(k)
        else:
            self.keys[i] = tj.cat([self.keys[i], k])
        return self.keys[i]


def _decode(x, cache=None):
    cache = KVCache() if cache is None else cache
    return cache.update(x * 2, 0).sum(), cache


def test_a_cache_object_made_or_updated_inside_runs_eagerly_and_stays_right():
    cf = tj.compile(_decode)
    (s0, cache), msgs = _quiet(cf, tj.ones(2))
    assert any("returns a KVCache holding tensors the graph computed" in m for m in msgs)
    s1, cache = cf(tj.ones(3), cache)
    s2, cache = cf(tj.ones(1), cache)
    assert [s0.item(), s1.item(), s2.item()] == [4.0, 10.0, 12.0]
    assert [k.shape[0] for k in cache.keys] == [6] and cache.keys[0].numpy().tolist() == [2.0] * 6
    assert cf.cache_stats()["eager_fallbacks"] == 1


def test_an_argument_object_updated_inside_is_put_back_before_eager_runs():
    def grow(x, cache):
        return cache.update(x + 1, 0).sum()

    cache = KVCache()
    cache.update(tj.zeros(2), 0)
    cf = tj.compile(grow)
    out, msgs = _quiet(cf, tj.ones(2), cache)
    assert any("KVCache" in m for m in msgs)
    assert out.item() == 4.0 and cache.keys[0].numpy().tolist() == [0, 0, 2, 2]
    with pytest.raises(TraceError, match="KVCache"):
        tj.compile(grow, fullgraph=True)(tj.ones(2), cache)
    assert cache.keys[0].numpy().tolist() == [0, 0, 2, 2]   # (the refused capture changed nothing)


def _retain(x, state):
    # fairseq's incremental_state: a dict argument the step reads, fills and counts in
    h = state["prev"] * 0.5 + x if "prev" in state else x
    state["prev"] = h
    state["step"] += 1
    return h * state["step"]


def test_a_dict_argument_filled_inside_changes_on_every_call_compiled():
    cf = tj.compile(_retain, fullgraph=True)
    want, got = {"step": 0}, {"step": 0}
    for i in range(5):
        x = tj.ones(3) * (i + 1)
        ref, out = _retain(x, want), cf(x, got)
        np.testing.assert_allclose(out.numpy(), ref.numpy())
        assert type(got["step"]) is int and got["step"] == i + 1
        np.testing.assert_allclose(got["prev"].numpy(), want["prev"].numpy())
    # no key, then a key, then the count a runtime input
    assert cf.cache_stats()["compiles"] == 3


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = nn.Linear(2, 2)

    def forward(self, x, cache):
        k = self.key(x)   # its hook gives the cache's keys, grown by this step's
        return k.sum(0) + (len(cache) if cache else 0)


def test_a_hook_growing_a_dict_passed_in_that_its_closure_names_compiled():
    # Whisper's key/value cache: the forward hooks' closure names the dict the decoder is passed
    def run(fwd, dec):
        cache = {}

        def save(module, _, out):
            cache[module] = out if module not in cache else tj.cat([cache[module], out])
            return cache[module]
        handle = dec.key.register_forward_hook(save)
        outs = [fwd(tj.ones(1, 2) * i, cache) for i in range(1, 5)]
        handle.remove()
        return outs, cache[dec.key]
    dec = _Decoder()
    cf = tj.compile(dec)
    (want, want_cache), ((got, got_cache), msgs) = run(dec, dec), _quiet(run, cf, dec)
    assert not msgs and cf.cache_stats()["eager_fallbacks"] == 0
    for a, b in zip(got + [got_cache], want + [want_cache]):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)


def _grow(x, caches, mem):
    caches.append(x * 2)
    mem[0]["kept"], mem[1][:] = x, [x.sum()]
    del mem[0]["old"]
    return caches[0].sum()


def test_lists_and_dicts_in_arguments_get_appends_items_and_deletions():
    cf = tj.compile(_grow, fullgraph=True)
    x = tj.ones(2)
    caches, inner, mem = [tj.zeros(1)], [7], ({"old": 1}, [])
    mem[1].append(inner)
    out = cf(x, caches, mem)
    assert out.item() == 0.0 and len(caches) == 2 and caches[1].numpy().tolist() == [2.0, 2.0]
    assert mem[0] == {"kept": x} and mem[0]["kept"] is x   # the call's own tensor, as eagerly
    assert len(mem[1]) == 1 and mem[1][0].item() == 2.0


class _Activations:
    """A plain object a module keeps, which its forward fills (a store of activations)."""


class StoresOnAnObject(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.store = _Activations()

    def forward(self, x):
        y = self.lin(x)
        self.store.last = y
        return y.sum()


def test_a_tensor_stored_on_a_plain_object_attribute_is_each_calls_not_a_tracer():
    m = StoresOnAnObject()
    cf = tj.compile(m)
    for i in range(3):
        x = tj.ones(1, 2) * i
        out, msgs = _quiet(cf, x)
        assert type(m.store.last) is tj.Tensor
        np.testing.assert_allclose(m.store.last.detach().numpy(), m.lin(x).detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(out.item(), m.lin(x).sum().item(), rtol=1e-6)
        if i == 0:
            assert any("`StoresOnAnObject.store`" in s for s in msgs)
    with pytest.raises(TraceError, match="StoresOnAnObject.store"):
        tj.compile(StoresOnAnObject(), fullgraph=True)(tj.ones(1, 2))


class GridCache(nn.Module):
    """YOLO's Detect: grids made at the first call of each size, kept in a list attribute."""
    def __init__(self):
        super().__init__()
        self.grid = [tj.empty(0), tj.empty(0)]

    def forward(self, xs):
        out = []
        for i, x in enumerate(xs):
            ny, nx = x.shape[-2:]
            if self.grid[i].shape[:2] != x.shape[-2:]:
                yv, xv = tj.meshgrid(tj.arange(ny), tj.arange(nx), indexing="ij")
                self.grid[i] = tj.stack((xv, yv), 2).float() - 0.5
            out.append(x.sigmoid()[..., None] * 2 + self.grid[i])
        return out


def test_tensors_set_into_a_module_list_attribute_are_stored_per_call():
    """A cache list a forward fills (``self.grid[i] = ...``) stays compiled: each call stores
    its tensors into the list, and the call after the first, which finds them, captures once
    more (the list changed) and reads them, as torch.compile does."""
    xs = [tj.full((1, 3, 4), 0.3), tj.full((1, 2, 2), -0.2)]
    want, m = GridCache()(xs), GridCache()
    c = tj.compile(m, fullgraph=True)
    for _ in range(3):
        got = c(xs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
    assert type(m.grid[1]) is tj.Tensor and tuple(m.grid[1].shape) == (2, 2, 2)
    assert c.cache_stats()["compiles"] == 2


class ListState(nn.Module):
    """A state kept in a list attribute and replaced on every call."""
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.state = [tj.zeros(2, 3)]

    def forward(self, x):
        self.state[0] = tj.tanh(self.lin(x) + self.state[0]).detach()
        return self.state[0].sum()


def test_a_list_attribute_written_on_every_call_runs_eagerly_at_once():
    """Only first fills of a module's list (None or empty entries) are stored: a state
    replaced on every call would capture again on every call, so it runs eagerly."""
    m, ref = ListState(), ListState()
    ref.load_state_dict(m.state_dict())
    c = tj.compile(m)
    for _ in range(4):
        got, _ = _quiet(c, tj.ones(2, 3))
        want = ref(tj.ones(2, 3))
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    stats = c.cache_stats()
    assert stats["compiles"] == 0 and stats["eager_fallbacks"] == 1
