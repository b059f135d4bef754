"""no_grad / enable_grad / set_grad_enabled / inference_mode as context managers and decorators."""
from __future__ import annotations

import threading

import pytest

import tracejit as tj


def _records(x):
    return (x * 2).requires_grad


def test_no_grad_context():
    x = tj.ones(2, requires_grad=True)
    with tj.no_grad():
        assert not tj.is_grad_enabled()
        y = x * 2
        assert not y.requires_grad and y.grad_fn is None
    assert tj.is_grad_enabled() and _records(x)


def test_no_grad_restores_on_exception():
    with pytest.raises(ValueError):
        with tj.no_grad():
            raise ValueError("boom")
    assert tj.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = tj.ones(2, requires_grad=True)
    with tj.no_grad():
        with tj.enable_grad():
            assert _records(x)
        assert not _records(x)


@pytest.mark.parametrize("deco", [tj.no_grad(), tj.no_grad, tj.set_grad_enabled(False),
                                  tj.inference_mode(), tj.inference_mode],
                         ids=["no_grad()", "no_grad", "set_grad_enabled(False)", "inference_mode()",
                              "inference_mode"])
def test_decorators_disable(deco):
    assert tj.is_grad_enabled()  # building the decorator must not switch the mode

    @deco
    def f(x):
        assert not tj.is_grad_enabled()
        return x * 2

    x = tj.ones(2, requires_grad=True)
    assert not f(x).requires_grad
    assert tj.is_grad_enabled()
    assert f.__name__ == "f"


@pytest.mark.parametrize("deco", [tj.enable_grad(), tj.enable_grad, tj.set_grad_enabled(True)])
def test_decorators_enable(deco):
    @deco
    def f(x):
        return x * 2

    x = tj.ones(2, requires_grad=True)
    with tj.no_grad():
        assert f(x).requires_grad
        assert not tj.is_grad_enabled()


def test_set_grad_enabled_as_function_and_context():
    x = tj.ones(2, requires_grad=True)
    tj.set_grad_enabled(False)
    try:
        assert not _records(x)
    finally:
        tj.set_grad_enabled(True)
    assert _records(x)
    with tj.set_grad_enabled(False):
        assert not _records(x)
    assert _records(x)
    with pytest.raises(TypeError):
        tj.set_grad_enabled("no")


def test_inference_mode_false_keeps_grad():
    x = tj.ones(2, requires_grad=True)
    with tj.inference_mode(False):
        assert _records(x)


def test_grad_mode_is_thread_local():
    x = tj.ones(2, requires_grad=True)
    seen = []

    def worker():
        seen.append(_records(x))

    with tj.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen == [True]


def test_backward_restores_grad_mode():
    x = tj.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    assert tj.is_grad_enabled()
    y = (x * 3).sum()
    with tj.no_grad():
        y.backward()  # a graph built earlier can be run under no_grad
        assert not tj.is_grad_enabled()
    assert tj.is_grad_enabled()
    assert x.grad.tolist() == [5.0, 5.0]


def test_grad_mode_off_in_another_thread_leaves_this_one_recording():
    # The per-op check reads a process-wide list of threads with grad mode off before
    # the thread-local flag: another thread's no_grad must not stop this one recording,
    # and this thread's no_grad must stop it however many other threads record.
    from tracejit.autograd.grad_mode import OFF
    x = tj.ones(2, requires_grad=True)
    start = len(OFF)
    inside, release, seen = threading.Event(), threading.Event(), []

    def worker():
        with tj.no_grad():
            seen.append(_records(x))
            inside.set()
            release.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    assert inside.wait(10)
    assert len(OFF) == start + 1 and _records(x)
    with tj.no_grad():
        assert len(OFF) == start + 2 and not _records(x)
    release.set()
    t.join()
    assert seen == [False] and len(OFF) == start and _records(x)
    with tj.set_grad_enabled(False):
        assert not _records(x)
    assert len(OFF) == start and _records(x)


def test_is_inference_mode_enabled_follows_the_context_and_the_decorator():
    assert not tj.is_inference_mode_enabled()
    with tj.inference_mode():
        assert tj.is_inference_mode_enabled() and not tj.is_grad_enabled()
        with tj.inference_mode(False):
            assert not tj.is_inference_mode_enabled() and tj.is_grad_enabled()
        assert tj.is_inference_mode_enabled()

    @tj.inference_mode
    def inside():
        return tj.is_inference_mode_enabled()
    assert inside() and not tj.is_inference_mode_enabled()


@pytest.mark.parametrize("switch", [lambda: tj.enable_grad(), lambda: tj.set_grad_enabled(True)],
                         ids=["enable_grad", "set_grad_enabled"])
def test_grad_switched_on_inside_inference_mode_records_nothing_as_torch(switch):
    torch = pytest.importorskip("torch")
    got = []
    for lib in (torch, tj):
        x = lib.ones(3, requires_grad=True)
        with lib.inference_mode():
            with (switch() if lib is tj else torch.enable_grad()):
                y = x * 2
        got.append((y.requires_grad, y.grad_fn is None))
    assert got[1] == got[0] == (False, True)
    assert tj.is_grad_enabled() and not tj.is_inference_mode_enabled()


def _generator_run(m, make):
    """What a generator decorated by `make(m)` sees inside and its caller outside."""
    x, out = m.ones(2, requires_grad=True), []

    @make(m)
    def gen(x):
        out.append(("in", m.is_grad_enabled(), m.is_inference_mode_enabled()))
        got = yield x * 2
        out.append(("sent", got, m.is_grad_enabled()))
        try:
            yield x * 3
        except ValueError:
            out.append(("thrown", m.is_grad_enabled()))
            yield 5
        return 7
    g = gen(x)
    out.append(("outside", m.is_grad_enabled(), next(g).requires_grad))
    with m.no_grad():
        out.append(("outside, no_grad", m.is_grad_enabled(), g.send("hi").requires_grad))
    out.append(("thrown in", g.throw(ValueError()), m.is_grad_enabled()))
    with pytest.raises(StopIteration) as stop:
        next(g)
    out.append(("returned", stop.value.value))
    g2 = gen(x)
    next(g2)
    g2.close()
    out.append(("closed", m.is_grad_enabled()))
    return out


@pytest.mark.parametrize("make", [lambda m: m.no_grad(), lambda m: m.no_grad, lambda m: m.inference_mode(),
                                  lambda m: m.set_grad_enabled(False), lambda m: m.inference_mode(False)])
def test_decorated_generators_hold_the_mode_only_inside_as_torch(make):
    torch = pytest.importorskip("torch")
    want = _generator_run(torch, make)
    torch.set_grad_enabled(True)
    got = _generator_run(tj, make)
    tj.set_grad_enabled(True)
    assert got == want


def test_enable_grad_decorated_generator_records_under_no_grad():
    @tj.enable_grad()
    def gen(x):
        yield x * 2
    with tj.no_grad():
        assert next(gen(tj.ones(1, requires_grad=True))).requires_grad


def _modes_in_inference_mode(lib):
    w = lib.ones(2, requires_grad=True)
    out = []
    with lib.inference_mode():
        out.append(lib.is_grad_enabled())
        with lib.enable_grad():
            out += [lib.is_grad_enabled(), (w * 2).requires_grad]   # on, yet nothing records
            with lib.no_grad():
                out.append(lib.is_grad_enabled())
            out.append(lib.is_grad_enabled())
            with lib.inference_mode(False):
                out += [lib.is_grad_enabled(), lib.is_inference_mode_enabled(), (w * 2).requires_grad]
                with lib.no_grad():
                    out.append(lib.is_grad_enabled())
            out += [lib.is_grad_enabled(), lib.is_inference_mode_enabled()]
        out.append(lib.is_grad_enabled())
        with lib.set_grad_enabled(True):
            out += [lib.is_grad_enabled(), (w * 2).requires_grad]
        out.append(lib.is_grad_enabled())
        lib.set_grad_enabled(True)
        out += [lib.is_grad_enabled(), lib.enable_grad()(lib.is_grad_enabled)(),
                lib.no_grad()(lib.is_grad_enabled)(), lib.is_grad_enabled()]
        lib.set_grad_enabled(False)
    out += [lib.is_grad_enabled(), (w * 2).requires_grad]
    with lib.no_grad():
        with lib.inference_mode():
            with lib.enable_grad():
                out.append(lib.is_grad_enabled())
        out.append(lib.is_grad_enabled())
        with lib.inference_mode(False):
            out.append(lib.is_grad_enabled())
    return out + [lib.is_grad_enabled()]


def test_grad_mode_switches_inside_inference_mode_report_as_torch():
    torch = pytest.importorskip("torch")
    assert _modes_in_inference_mode(tj) == _modes_in_inference_mode(torch)
