"""The LSTM and GRU layers' numba kernels (tracejit/compiler/cpu/kernels/lstm_kernels.py) against the layer
primitives' numpy forms (ops/lstm_prim.py, ops/gru_prim.py, TRACEJIT_EAGER_KERNELS=0): the LSTM's
whole-loop kernels (GEMMs on packed weights, the GEMM template's panels,
compiler/cpu/gemm/template_panels.py), the GRU's likewise; forward, and backward with the
cotangent of h only (eager) or of h and c (the compiled VJP), both directions, float32 and
float64, saturated gates."""
import numpy as np
import pytest

from tracejit.ops import gru_prim, lstm_prim
from tracejit.compiler.cpu.kernels import recurrent_layers
from tracejit.compiler.cpu.kernels import lstm_kernels
from tracejit.compiler.cpu.kernels import loader as native

pytest.importorskip("numba", reason="the kernels are numba code")


@pytest.fixture(autouse=True)
def _sync(monkeypatch):
    monkeypatch.setenv("TRACEJIT_COMPILE", "sync")   # load the kernels at their first call


def _run(monkeypatch, kernels, fn, *a, **kw):
    """fn's result with the kernels on ("layer": the whole-loop kernels where they load) or
    off (False: the numpy forms)."""
    if kernels:
        monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)
    else:
        monkeypatch.setenv("TRACEJIT_EAGER_KERNELS", "0")
    return fn(np, *a, **kw)


def _loaded(dtype: str, layer: str = "") -> None:
    """Assert the whole-loop kernels load for the LSTM (`layer` "") or GRU ("gru_")."""
    for name in ("forward_layer", "backward_layer"):
        assert getattr(lstm_kernels, layer + name)(dtype) is not None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("full", [False, True], ids=["dh", "dh,dc"])
@pytest.mark.parametrize("H", [4, 9], ids=["4H=16", "4H=36"])   # the kernels' tiles of 16 rows, and a rest
@pytest.mark.parametrize("N", [3, 61])   # 61: the packed GEMM's vector tiles and register transposes too
def test_kernels_equal_the_numpy_forms(monkeypatch, dtype, reverse, full, H, N):
    _loaded(dtype)
    r = np.random.default_rng(5)
    L = 5
    scale = 4.0                     # pre-activations of a few units: some gates near 0 or 1
    a = lambda *s: (r.standard_normal(s) * scale).astype(dtype)   # noqa: E731
    I = 19                          # the x_t transposes' register blocks, and a rest
    x, wx, w, b, h0, c0 = a(L, N, I), a(4 * H, I) * 0.1, a(4 * H, H) * 0.3, a(4 * H), a(H, N), a(H, N)
    b[0] = 200.0                    # saturated: sigmoid exactly 1, no overflow
    b[H] = -200.0
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    zk = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0, reverse=reverse)
    zn = _run(monkeypatch, False, lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0, reverse=reverse)
    assert np.isfinite(zk).all()
    np.testing.assert_allclose(zk, zn, **tol)
    d_y = a(L, 2 * H if full else H, N)
    args = (d_y, a(H, N), a(H, N), x, wx, w, b, h0, c0, zn)
    rk = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    rn = _run(monkeypatch, False, lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    np.testing.assert_allclose(rk, rn, rtol=tol["rtol"], atol=tol["atol"] * np.abs(rn).max())


def test_strided_operands_are_taken(monkeypatch):
    """Views (a transposed state, a strided cotangent) go through the kernels too."""
    _loaded("float64")
    r = np.random.default_rng(6)
    L, N, H = 3, 2, 3
    x = r.standard_normal((N, L, 5)).transpose(1, 0, 2)
    wx = r.standard_normal((4 * H, 5))
    w = r.standard_normal((4 * H, H))
    b = r.standard_normal(4 * H)
    h0 = r.standard_normal((N, H)).T
    c0 = r.standard_normal((N, H)).T
    zk = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0)
    zn = _run(monkeypatch, False, lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0)
    np.testing.assert_allclose(zk, zn, rtol=1e-12, atol=1e-13)
    d_y = r.standard_normal((L, N, H)).transpose(0, 2, 1)
    args = (d_y, r.standard_normal((N, H)).T, r.standard_normal((H, N)), x, wx, w, b, h0, c0, zn)
    np.testing.assert_allclose(_run(monkeypatch, "layer", lstm_prim.LSTM_LAYER_BACKWARD.run, *args),
                               _run(monkeypatch, False, lstm_prim.LSTM_LAYER_BACKWARD.run, *args),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("full", [False, True], ids=["dh", "dh,dc"])
@pytest.mark.parametrize("H,count", [(32, 2), (48, 2), (48, 3), (64, 4)],
                         ids=["16+16 units", "16+32 units", "3x16 units", "4x16 units"])
@pytest.mark.parametrize("N", [3, 61])
def test_split_loops_equal_one_thread_and_the_numpy_forms(monkeypatch, dtype, reverse, full, H, count, N):
    """The whole-loop kernels split into `count` shares by hidden units
    (compiler/cpu/kernels/loop_split.py; more shares than this machine's cores run too), both
    ways: the same bits as on one thread (each share sums its rows in the same order), and
    the numpy forms' values."""
    from tracejit.compiler.cpu.kernels import loop_split
    _loaded(dtype)
    r = np.random.default_rng(9)
    L = 6
    a = lambda *s: (r.standard_normal(s) * 2.0).astype(dtype)   # noqa: E731
    x, wx, w, b, h0, c0 = a(L, N, 19), a(4 * H, 19) * 0.2, a(4 * H, H) * 0.2, a(4 * H), a(H, N), a(H, N)
    d_y = a(L, 2 * H if full else H, N)
    seen = []

    def run(count):
        def threads(hidden, quantum=loop_split.QUANTUM, work=0):
            seen.append(count)
            return count
        with monkeypatch.context() as m:
            m.setattr(loop_split, "threads", threads)
            z = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0, reverse=reverse)
            args = (d_y, np.zeros((H, N), dtype), np.ones((H, N), dtype), x, wx, w, b, h0, c0, z)
            return z, _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)

    z1, r1 = run(1)
    z2, r2 = run(count)
    assert seen == [1, 1, count, count]
    np.testing.assert_array_equal(z2, z1)
    tol = dict(rtol=5e-5, atol=5e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(r2, r1)
    np.testing.assert_allclose(z2, _run(monkeypatch, False, lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0,
                                        reverse=reverse), **tol)
    args = (d_y, np.zeros((H, N), dtype), np.ones((H, N), dtype), x, wx, w, b, h0, c0, z1)
    rn = _run(monkeypatch, False, lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    np.testing.assert_allclose(r2, rn, rtol=tol["rtol"], atol=tol["atol"] * np.abs(rn).max())



@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("H", [16, 48], ids=["one 16-column tile", "32+16 columns"])
@pytest.mark.parametrize("L", [1, 7])
@pytest.mark.parametrize("nth", [1, 2])
def test_weight_grad_inside_the_backward_loop(monkeypatch, dtype, reverse, H, L, nth):
    """With H a multiple of 16 the whole-loop backward adds each step's dg h_prev^T into d W
    itself (recurrent_layers.WEIGHT_GRAD_IN_LOOP; no GEMM after the loop: `hidden_weight_grad` is not
    called): d W as the GEMM after the loop gives it and the numpy forms', to rounding; the
    rest of the result the same bits."""
    from tracejit.compiler.cpu.kernels import loop_split
    monkeypatch.setattr(loop_split, "threads", lambda hidden, quantum=loop_split.QUANTUM, work=0: nth)
    _loaded(dtype)
    r = np.random.default_rng(11)
    N = 5
    a = lambda *s: (r.standard_normal(s) * 2.0).astype(dtype)   # noqa: E731
    x, wx, w, b, h0, c0 = a(L, N, 19), a(4 * H, 19) * 0.2, a(4 * H, H) * 0.2, a(4 * H), a(H, N), a(H, N)
    z = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0, reverse=reverse)
    args = (a(L, H, N), a(H, N), a(H, N), x, wx, w, b, h0, c0, z)
    gemms = []
    real = lstm_prim.hidden_weight_grad
    monkeypatch.setattr(lstm_prim, "hidden_weight_grad", lambda *a_: gemms.append(1) or real(*a_))
    inside = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    assert gemms == []
    monkeypatch.setenv("TRACEJIT_LSTM_WEIGHT_GRAD_IN_LOOP", "0")
    after = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    assert gemms == [1]
    rn = _run(monkeypatch, False, lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    k = 4 * H * H
    np.testing.assert_array_equal(inside[k:], after[k:])
    tol = dict(rtol=5e-5, atol=5e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    for ref in (after, rn):
        np.testing.assert_allclose(inside[:k], ref[:k], rtol=tol["rtol"], atol=tol["atol"] * np.abs(ref[:k]).max())
    assert np.abs(inside[:k]).max() > 0


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("late", ["never", "half way"])
def test_late_threads_shares_are_taken_over_with_the_same_bits(monkeypatch, late, count):
    """Shares whose threads do not begin a step (descheduled) are done by share 0's thread
    (compiler/cpu/kernels/loop_split.py `next_half`), from then on without waiting; a thread
    that comes back joins at the current step. The results are the same bits as on one
    thread either way. "never": shares 1.. start after share 0 has finished the whole call,
    so every one of their shares is taken (L + 1 units each way: the forward's first lays
    out step 0's input part, the backward's last multiplies); "half way": they start once
    share 0 has claimed step L // 2."""
    import threading
    import time

    from tracejit.compiler.cpu.kernels import loop_split
    # the backward split too (its d W after the loop), not d W alongside a one-thread loop
    dtype, H, N, L = "float32", 48, 5, 40
    r = np.random.default_rng(3)
    a = lambda *s: (r.standard_normal(s) * 2.0).astype(dtype)   # noqa: E731
    x, wx, w, b, h0, c0 = a(L, N, 19), a(4 * H, 19) * 0.2, a(4 * H, H) * 0.2, a(4 * H), a(H, N), a(H, N)
    d_y = a(L, H, N)

    def delayed(get):
        def kernel_for(dt):
            real = get(dt)
            finished = threading.Event()

            def kernel(*args):
                q, sync = args[-3], args[-1]
                if q >= 1 and late == "never":
                    assert finished.wait(60)
                elif q >= 1:
                    while sync[loop_split.CLAIM] < L // 2 and not finished.is_set():
                        time.sleep(1e-4)
                real(*args)
                if q == 0:
                    finished.set()
            return kernel
        return kernel_for

    def run(count, slow):
        with monkeypatch.context() as m:
            m.setattr(loop_split, "threads", lambda hidden, quantum=loop_split.QUANTUM, work=0: count)
            if slow:
                m.setattr(lstm_kernels, "forward_layer", delayed(lstm_kernels.forward_layer))
                m.setattr(lstm_kernels, "backward_layer", delayed(lstm_kernels.backward_layer))
            z = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0)
            args = (d_y, np.zeros((H, N), dtype), np.ones((H, N), dtype), x, wx, w, b, h0, c0, z)
            return z, _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER_BACKWARD.run, *args)

    _loaded(dtype)
    z1, r1 = run(1, False)
    before = dict(loop_split.counts)
    z2, r2 = run(count, True)
    np.testing.assert_array_equal(z2, z1)
    np.testing.assert_array_equal(r2, r1)
    assert loop_split.counts["split"] == before["split"] + 2
    taken = loop_split.counts["taken"] - before["taken"]
    if late == "never":
        assert taken == (count - 1) * ((L + 1) + (L + 1))
    else:                     # steps 0 .. L // 2 - 2 of each loop ended before the others began
        assert taken >= (count - 1) * 2 * (L // 2 - 1)


def _recording(real, name, calls):
    def get(dtype):
        found = real(dtype)
        if found is not None:
            calls.append(name)
        return found
    return get


@pytest.mark.parametrize("reverse", [False, True])
def test_whole_loop_kernels_run_and_take_one_step(monkeypatch, reverse):
    """The layer ops call the whole-loop kernels when they load, and a
    sequence of one step (no h_{t-1} from Z: only h0) matches the numpy form."""
    _loaded("float32")
    calls = []
    for name in ("forward_layer", "backward_layer"):
        real = getattr(lstm_kernels, name)
        monkeypatch.setattr(lstm_kernels, name, _recording(real, name, calls))
    r = np.random.default_rng(8)
    H, N = 5, 4
    a = lambda *s: r.standard_normal(s).astype("float32")   # noqa: E731
    x, wx, w, b, h0, c0 = a(1, N, 3), a(4 * H, 3), a(4 * H, H), a(4 * H), a(H, N), a(H, N)
    zk = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0, reverse=reverse)
    zn = _run(monkeypatch, False, lstm_prim.LSTM_LAYER.run, x, wx, w, b, h0, c0, reverse=reverse)
    np.testing.assert_allclose(zk, zn, rtol=2e-5, atol=2e-6)
    args = (a(1, H, N), a(H, N), a(H, N), x, wx, w, b, h0, c0, zn)
    rk = _run(monkeypatch, "layer", lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    rn = _run(monkeypatch, False, lstm_prim.LSTM_LAYER_BACKWARD.run, *args, reverse=reverse)
    np.testing.assert_allclose(rk, rn, rtol=2e-5, atol=2e-6 * np.abs(rn).max())
    assert calls == ["forward_layer", "backward_layer"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("H", [4, 7], ids=["3H=12", "3H=21"])   # the transposes' tiles of 16 rows, and a rest
@pytest.mark.parametrize("N", [3, 61])   # 61: the packed GEMM's vector tiles and register transposes too
def test_gru_kernels_equal_the_numpy_forms(monkeypatch, dtype, reverse, H, N):
    _loaded(dtype, "gru_")
    r = np.random.default_rng(7)
    L = 5
    a = lambda *s: (r.standard_normal(s) * 3.0).astype(dtype)   # noqa: E731
    gi, w, b = a(L, N, 3 * H), a(3 * H, H) * 0.3, a(3 * H)
    h0 = a(N, H).T                       # a transposed view, as the layer passes it
    gi[0, 0, 0] = 200.0
    # float32: the kernel's GEMM sums in another order than numpy's BLAS, and the gates of
    # this scale (pre-activations of ~10) amplify a last-bit difference over the steps
    tol = dict(rtol=5e-5, atol=2e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    zk = _run(monkeypatch, "layer", gru_prim.GRU_LAYER.run, gi, w, b, h0, reverse=reverse)
    zn = _run(monkeypatch, False, gru_prim.GRU_LAYER.run, gi, w, b, h0, reverse=reverse)
    assert np.isfinite(zk).all()
    np.testing.assert_allclose(zk, zn, **tol)
    args = (a(L, H, N), a(H, N), gi, w, b, h0, zn)
    rk = _run(monkeypatch, "layer", gru_prim.GRU_LAYER_BACKWARD.run, *args, reverse=reverse)
    rn = _run(monkeypatch, False, gru_prim.GRU_LAYER_BACKWARD.run, *args, reverse=reverse)
    np.testing.assert_allclose(rk, rn, rtol=tol["rtol"], atol=tol["atol"] * np.abs(rn).max())


@pytest.mark.parametrize("cell", ["", "gru_"])
def test_the_numpy_form_runs_while_the_whole_loop_kernel_is_on_its_way(monkeypatch, cell):
    """Background mode: while the whole-loop kernel is on its way, the layer's CPU
    implementation declines (the numpy form runs this call); the kernel is queued at rank
    STEADY (a compiled step runs it at every call)."""
    monkeypatch.setenv("TRACEJIT_COMPILE", "background")
    monkeypatch.delenv("TRACEJIT_EAGER_KERNELS", raising=False)
    monkeypatch.setattr(native, "_kernels", {})          # none asked for in this process
    monkeypatch.setattr(native, "_GO_AFTER_S", 1e9)      # no loader thread: stays on its way
    r = np.random.default_rng(9)
    a = lambda *s: r.standard_normal(s).astype("float32")   # noqa: E731
    H, N, L = 3, 2, 4
    if cell:
        got = recurrent_layers.gru_layer(a(L, N, 3 * H), a(3 * H, H), a(3 * H), a(H, N))
    else:
        got = recurrent_layers.lstm_layer(a(L, N, 5), a(4 * H, 5), a(4 * H, H), a(4 * H), a(H, N), a(H, N))
    assert got is None
    assert native._kernels[("lstm", f"{cell}forward_layer_packed", "float32")].steady


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_whole_loop_kernels_call_one_shared_product(dtype, monkeypatch):
    """The LSTM's and the GRU's whole-loop kernels (both ways) call the one `panel_product`
    of the GEMM template's panel module (compiler/cpu/gemm/template_panels.py) by its address (not a
    copy of the product inlined in each loop): the same compiled function for all four, its
    address what they pass."""
    from tracejit.compiler import diskcache
    from tracejit.compiler.cpu.runtime.voidptr import native_address
    from tracejit.compiler.cpu.gemm import template_panels
    from tracejit.compiler.cpu.kernels import register_transpose
    # The four loaded afresh here (from the disk cache): an earlier test that cleared the
    # in-memory module cache leaves loop kernels it loaded holding the product module of
    # their time, while product_module now loads another (same source, same code).
    monkeypatch.setattr(native, "_kernels", {})
    diskcache.clear_memory_cache()
    shared = template_panels.panel_module(dtype, template_panels.source_digest(template_panels.panel_source(dtype)))
    transposes = register_transpose.transpose_module(
        dtype, template_panels.source_digest(register_transpose.transpose_source(dtype)))
    product = shared.panel_product
    packs = (shared.panel_pack, shared.panel_pack_t)
    for name in ("forward_layer", "backward_layer", "gru_forward_layer", "gru_backward_layer"):
        kernel = getattr(lstm_kernels, name)(dtype)
        assert kernel is not None, name
        module = kernel.__globals__
        assert module["panel_product"] is product, name
        # the weights' packs too: the shared module's, by address (not inlined in each loop)
        assert (module["panel_pack"], module["panel_pack_t"]) == packs, name
        # and the register transposes (`panel_transpose`); the LSTM's loops also the split
        # loop's meeting (its module: `next_half`, `wait_turn`), not inlined either
        assert module["panel_transpose"] is transposes.panel_transpose, name
        assert module["row_product"] is shared.row_product, name
        fns = (product,) + packs + (transposes.panel_transpose,)
        if not name.startswith("gru"):
            meeting = diskcache.load_module(lstm_kernels.meeting_module_source(), name_hint="lstm_meeting")
            assert (module["meet_next_half"], module["meet_wait_turn"]) == (meeting.meet_next_half,
                                                                           meeting.meet_wait_turn), name
            fns += (meeting.meet_next_half, meeting.meet_wait_turn)
        fns += (shared.row_product,)
        assert list(module["_FNS"]) == [native_address(f) for f in fns], name


def test_loops_start_from_thread_state_and_allocate_nothing():
    """The LSTM loops' Python `kernel` makes each thread's scratch and meeting state
    (lstm_kernels.MEET_STATE), not the numba loop (np.empty / np.zeros there made a compile
    worker compile numba's implementations of them): the state must be what loop_split's
    `thread_state()` starts a thread with (both from loop_split.THREAD_START), and the
    loops' text must allocate nothing."""
    from numba import njit
    from tracejit.compiler.cpu.kernels import loop_split
    ns = {"np": np}
    exec("import numpy as np\n" + loop_split.meeting_source(), ns)
    thread_state = ns["thread_state"]

    @njit
    def start():
        return thread_state()
    assert list(start()) + [0] == list(lstm_kernels.MEET_STATE) == [0, 0, 1, 0]
    for template in (lstm_kernels._FORWARD_LAYER, lstm_kernels._BACKWARD_LAYER):
        src = lstm_kernels._source(template, "float32")
        loop_text = src[src.index("\ndef loop("):src.index("\ndef kernel(")]
        assert "np.empty" not in loop_text and "np.zeros" not in loop_text
        assert "thread_state()" not in loop_text
        assert "np.array((0, 0, 1, 0), np.int64)" in src[src.index("\ndef kernel("):]
