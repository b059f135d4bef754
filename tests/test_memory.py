"""tracejit.memory: the allocator tuning applied at import, and its opt-out."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracejit as tj
from tracejit import memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tuning is Linux-only")

_PROBE = textwrap.dedent("""
    import resource, numpy as np
    import tracejit as tj
    from tracejit.memory import allocator_tuned
    a = np.ones(100_000, np.float32)  # warm up the heap
    del a
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        (tj.ones(100_000) * 2.0).sum()   # 400 KB temporaries, freed at once
    print(allocator_tuned(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
""")


def _probe(env_extra):
    import os
    # No eager native kernel is loaded in the probe: loading one from the disk cache (a
    # thread, at the first op that asks for it: a GEMM template configuration's)
    # frees a buffer larger than the temporaries, which raises glibc's dynamic mmap threshold
    # above them, so the untuned process reused its heap too whenever that load came first
    # (the fresh-clone CI, 333 faults; 8,100-8,200 without the load)
    env = dict(os.environ, TRACEJIT_EAGER_KERNELS="0", **env_extra)
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout.split()
    return out[0] == "True", int(out[1])


def test_tuned_at_import_and_idempotent():
    assert memory.allocator_tuned() is True
    assert memory.tune_allocator() is True


def test_freed_arrays_are_reused_without_page_faults():
    tuned, faults = _probe({"TRACEJIT_MALLOC_TUNING": "1"})
    assert tuned
    assert faults < 500, faults           # the first pass maps the heap; unmapped: ~100 per temporary


def test_opt_out_leaves_the_allocator_alone():
    tuned, faults = _probe({"TRACEJIT_MALLOC_TUNING": "0"})
    assert not tuned
    assert faults > 2000, faults          # what the tuning saves (glibc default thresholds)


# ---------------------------------------------------------------- placed kernel outputs
def _addr(a) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("slots", [1, 2, 3, 5])
def test_placed_outputs_sit_on_lines_apart_from_the_operand(slots):
    n = memory.ALIGN_MIN // 4
    for shift in (0, 4, 16, 52, 1000):          # the operand anywhere in its page
        raw = np.empty(n + 1024, np.float32)
        ref = raw[shift:shift + n]
        outs = [memory.placed_empty((n,), np.float32, ref, m, slots) for m in range(slots)]
        offs = [_addr(a) % memory.PAGE for a in outs]
        assert all(o % memory.LINE == 0 for o in offs), offs
        for m, o in enumerate(offs):   # (m + 1) / (slots + 1) of a page past the operand
            want = (_addr(ref) + memory.PAGE * (m + 1) // (slots + 1)) % memory.PAGE
            assert 0 <= (want - o) % memory.PAGE < memory.LINE, (m, o, want)
        for a in outs:
            assert a.shape == (n,) and a.dtype == np.float32 and a.flags.c_contiguous
            assert a.flags.writeable and memory.sole_padded_view(a)
            a[:] = 7.0                  # the whole view is usable memory
            assert a[0] == a[-1] == 7.0
        assert len({_addr(a) // memory.PAGE for a in outs}) == slots   # distinct buffers


def test_small_or_unreferenced_placements_are_plain_arrays():
    small = memory.placed_empty((3, 5), np.float64)
    assert small.shape == (3, 5) and small.dtype == np.float64 and small.base is None
    big = memory.placed_empty((memory.ALIGN_MIN // 8, 2), np.float32)     # no operand: offset 0 + half a page
    assert big.shape == (memory.ALIGN_MIN // 8, 2) and big.flags.c_contiguous
    assert _addr(big) % memory.PAGE == memory.PAGE // 2


def test_a_second_view_makes_the_buffer_shared():
    a = memory.placed_empty((memory.ALIGN_MIN // 4,), np.float32)
    assert memory.sole_padded_view(a)
    b = a[::2]                                  # any other view holds the buffer too
    assert not memory.sole_padded_view(a)
    del b
    assert memory.sole_padded_view(a)
    c = np.empty(memory.ALIGN_MIN // 4, np.float32)
    assert not memory.sole_padded_view(c)       # owns its memory: no buffer at all
    part = np.empty(memory.ALIGN_MIN, np.uint8)[: memory.ALIGN_MIN // 2].view(np.float32)
    assert not memory.sole_padded_view(part)    # a view of a buffer twice its size


def test_compiled_loss_gradients_are_placed_and_taken_without_a_copy():
    n = memory.ALIGN_MIN // 4
    r = np.random.default_rng(0)
    xs = [tj.tensor(r.standard_normal(n).astype(np.float32), requires_grad=True) for _ in range(2)]

    @tj.script
    def loss(x, y):
        return (x * y + x).sum()

    addrs = []
    for _ in range(3):
        for t in xs:
            t.grad = None
        loss(*xs).backward()
        for t in xs:
            g = t.grad.numpy()
            assert _addr(g) % memory.LINE == 0          # the kernel's placed output itself
            assert memory.sole_padded_view(g)           # taken, not copied into a fresh array
        addrs.append([_addr(t.grad.numpy()) for t in xs])
        g = None                    # (holding a gradient's array keeps its slot from reusing it)
        np.testing.assert_allclose(xs[0].grad.numpy(), xs[1].detach().numpy() + 1.0, rtol=1e-6)
        np.testing.assert_allclose(xs[1].grad.numpy(), xs[0].detach().numpy(), rtol=1e-6)
    assert addrs[1] == addrs[2]     # .grad set to None: the plan's output slots write them again
    xs[0].grad.add_(1.0)                                 # in place, still its own memory
    np.testing.assert_allclose(xs[0].grad.numpy(), xs[1].detach().numpy() + 2.0, rtol=1e-6)


# ---------------------------------------------------------------- output slots
def test_output_slot_reuses_its_array_only_when_nothing_holds_it_or_its_memory():
    n = memory.ALIGN_MIN // 4
    ref = np.empty(n, np.float32)
    slot = memory.OutputSlot(1, 3)
    dt = np.dtype(np.float32)
    a = slot.take((n,), dt, ref)
    want = (_addr(ref) + memory.PAGE * 2 // 4) % memory.PAGE   # placed as placed_empty places it
    assert 0 <= (want - _addr(a) % memory.PAGE) % memory.PAGE < memory.LINE
    assert memory.sole_padded_view(a) and memory.kept_refs(a) == 1
    a[:] = 1.0
    b = slot.take((n,), dt, ref)                # `a` is alive: another buffer
    assert not np.shares_memory(a, b) and (a == 1.0).all()
    assert memory.kept_refs(a) == 0 and memory.kept_refs(b) == 1   # the slot keeps the last one
    assert memory.sole_padded_view(a) and memory.sole_padded_view(b)
    del a
    view = b[::2]                                # only a view of b is left: b's memory is held
    del b
    c = slot.take((n,), dt, ref)
    assert not np.shares_memory(view, c)
    del view
    c_addr = _addr(c)
    del c
    assert _addr(slot.take((n,), dt, ref)) == c_addr     # nothing holds it: the same array
    d = slot.take((n,), dt, ref)
    assert _addr(d) == c_addr
    assert not np.shares_memory(slot.take((n,), dt, ref), d)     # d alive: not handed out twice
    other = np.empty(n + 4096, np.float32)[3:n + 3]        # another operand: placed for it
    e = slot.take((n,), dt, other)
    want = (_addr(other) + memory.PAGE * 2 // 4) % memory.PAGE
    assert 0 <= (want - _addr(e) % memory.PAGE) % memory.PAGE < memory.LINE
    f_shape = slot.take((n // 2, 2), dt, ref)     # another shape: an array of its own
    assert not np.shares_memory(e, f_shape) and f_shape.shape == (n // 2, 2)
    small = memory.OutputSlot().take((3, 4), np.dtype(np.float64), ref)
    assert small.base is None and small.shape == (3, 4) and memory.kept_refs(small) == 0


def test_a_reshape_of_a_kept_output_still_owns_its_memory():
    n = memory.ALIGN_MIN // 4
    slot = memory.OutputSlot()
    dt = np.dtype(np.float32)
    a = slot.take((n,), dt)
    w = a.reshape(2, -1)          # what a plan returns for a reshape of the kernel's output
    del a                         # the slot keeps `a`: no sharer of w's memory
    assert memory.sole_padded_view(w)
    v = w[::2]
    assert not memory.sole_padded_view(w)           # a real second view
    del v
    assert memory.sole_padded_view(w)
    b = slot.take((n,), dt)                          # w holds the buffer: not handed out
    assert not np.shares_memory(b, w)
    del b
    kept = slot.take((n,), dt)                       # (b dropped: the kept one again)
    w2 = kept.reshape(4, -1)
    assert not memory.sole_padded_view(kept)         # the kept array itself, with w2 alive


def test_free_kept_only_for_a_kept_array_nobody_else_holds(monkeypatch):
    # (called as autograd calls it: on a local, the caller's one reference)
    n = memory.ALIGN_MIN // 4
    monkeypatch.setattr(memory, "KEEP_MAX", memory._kept_bytes[0] + 4 * memory.ALIGN_MIN)
    slot = memory.OutputSlot()
    dt = np.dtype(np.float32)
    a = slot.take((n,), dt)
    assert memory.kept_refs(a) == 1 and memory.free_kept(a)   # the slot and this local only
    other = a
    assert not memory.free_kept(a)                        # a second reference
    del other
    v = a[1:]
    assert not memory.free_kept(a)                        # a view holds its memory
    del v
    a.flags.writeable = False
    assert not memory.free_kept(a)
    a.flags.writeable = True
    assert memory.free_kept(a)
    b = slot.take((n,), dt)                               # a alive: b is the kept one now
    assert not memory.free_kept(a) and memory.free_kept(b)   # a: placed, no longer kept
    c = np.empty(n, np.float32)
    assert not memory.free_kept(c)                        # never a slot's


def test_output_slots_keep_at_most_keep_max_bytes(monkeypatch):
    n = memory.ALIGN_MIN // 4
    monkeypatch.setattr(memory, "KEEP_MAX", memory._kept_bytes[0] + memory.ALIGN_MIN)
    dt = np.dtype(np.float32)
    one, two = memory.OutputSlot(), memory.OutputSlot()
    a = one.take((n,), dt)
    b = two.take((n,), dt)                 # no room left: b is its caller's alone
    assert memory.kept_refs(a) == 1 and memory.kept_refs(b) == 0
    del one                                # a slot that goes frees its room
    assert memory.kept_refs(a) == 0
    c = two.take((n,), dt)
    assert memory.kept_refs(c) == 1 and not np.shares_memory(b, c)


def test_output_slot_reuse_in_a_compiled_call():
    n = memory.ALIGN_MIN // 4
    x = tj.tensor(np.arange(n, dtype=np.float32))

    @tj.script
    def f(x):
        return x * 2.0 + 1.0

    out = f(x)
    kept = _addr(out.numpy())
    out2 = f(x)                                 # out alive: a new buffer, out unchanged
    assert _addr(out2.numpy()) != kept
    np.testing.assert_array_equal(out.numpy(), out2.numpy())
    del out
    k2 = _addr(out2.numpy())
    del out2
    out3 = f(x)                                 # dropped: its buffer is written again
    assert _addr(out3.numpy()) == k2
    np.testing.assert_array_equal(out3.numpy()[:4], [1.0, 3.0, 5.0, 7.0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 1000, 300_001])
def test_line_empty_starts_on_a_cache_line_at_any_size(dtype, n):
    a = memory.line_empty((n,), dtype)
    assert memory.sole_padded_view(a)            # autograd may take it as its own
    assert a.ctypes.data % 64 == 0
    assert a.shape == (n,) and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
    a[:] = 7                                           # the whole length is ours to write
    assert (a == 7).all()
