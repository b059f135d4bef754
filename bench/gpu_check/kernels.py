"""The steps about fused kernels: GELU bandwidth against a device copy, and launch cost.

``gelu``: the GELU chain ``a = x*y + z; 0.5*a*(1 + tanh(c*(a + k*a**3)))`` (the bench's,
`bench.impls.torchlike.gelu_chain`) on float32 arrays of 256 MB each (64M elements):

- the device-to-device copy (``copyto``, one read and one write) gives the bandwidth bound;
- the one fused kernel `codegen_cuda` renders for the chain, called directly: 3 reads and
  1 write, so its effective bandwidth is ``16 n / t`` bytes per second;
- ``tracejit.trace`` of the chain on CUDA tensors, forward only, then forward and
  backward (``autograd.grad`` for a cotangent): the least traffic of forward and backward
  is 11 arrays (x, y, z read and the output written; x, y, z and the cotangent read and
  three gradients written).

Each is checked against the chain and its derivative in float64 numpy on a slice, and
each gets the target ">= 85% of the copy bandwidth". Under the simulator the same
kernel runs on 4096 host elements, and forward and backward run as the joint graph
through `codegen_cuda.run_graph`; values are checked, no bandwidth is judged.

``launch``: the host cost of launching that fused kernel (4 array arguments: x, y, z,
out) on 1024 elements, in microseconds per launch, the median of 25 rounds of 200
launches; beside it numba's own dispatch of the same kernel with the arguments already
converted, a ``tracejit.trace`` call on CUDA tensors, and one cupy kernel (``add``) for
scale, and each part of the direct launch on its own (``part_*_us``). Target: <= 10 µs
per tracejit launch.
"""
from __future__ import annotations

import numpy as np

from ..impls.torchlike import gelu_chain
from ..workloads import GELU_C, GELU_K
from .record import Clock, Record, gpu_reason, host_us_per_call, simulated

GPU_ELEMENTS = 64 * 2**20   # 256 MB per float32 array
SIM_ELEMENTS = 4096
FRACTION = 0.85
LAUNCH_US = 10.0


def _chain_graph(n: int):
    """The traced graph of the GELU chain on (n,) float32 and its one fused group."""
    import tracejit as tj
    from tracejit.compiler.fusion import Group, partition
    from tracejit.jit.passes import optimize
    from tracejit.jit.tracer import TraceContext
    from tracejit.ops.registry import Aval

    ctx = TraceContext()
    with ctx:
        ts = [ctx.new_input(Aval((n,), tj.float32), name) for name in "xyz"]
        res = gelu_chain(tj)(*ts)
    graph = optimize(ctx.graph([ctx.atom(res)]))
    groups = [i for i in partition(graph) if isinstance(i, Group)]
    if len(groups) != 1 or len(partition(graph)) != 1:
        raise AssertionError(f"the GELU chain is not one fused group: {partition(graph)}")
    return graph, groups[0]


def _fused_kernel(n: int):
    from tracejit.compiler import codegen_cuda
    graph, group = _chain_graph(n)
    return graph, codegen_cuda.load(codegen_cuda.generate(group, ("flat", "flat", "flat")))


def _inputs(n: int, xp):
    rng = np.random.default_rng(0)
    if xp is np:
        return [rng.standard_normal(n, dtype=np.float32) for _ in range(4)]
    xp.random.seed(0)
    return [xp.random.standard_normal(n, dtype=xp.float32) for _ in range(4)]


def _host(a, k: int) -> np.ndarray:
    """The first `k` elements of `a` on the host, as float64."""
    a = a[:k]
    a = a.get() if hasattr(a, "get") else np.asarray(a)
    return a.astype(np.float64)


def reference(x, y, z, g):
    """The chain and its gradients w.r.t. x, y, z for cotangent g, in float64."""
    a = x * y + z
    t = np.tanh(GELU_C * (a + GELU_K * a ** 3))
    d = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * GELU_C * (1 + 3 * GELU_K * a * a)
    return 0.5 * a * (1 + t), (g * d * y, g * d * x, g * d)


def _check(rec: Record, what: str, got: list, inputs: list, k: int = 65536) -> bool:
    """Compare `got` (the output, or the three gradients) with `reference` on a slice:
    float32 work against float64, within 1e-5 + 1e-4 |expected|."""
    x, y, z, g = (_host(a, k) for a in inputs)
    out, grads = reference(x, y, z, g)
    expect = [out] if len(got) == 1 else list(grads)
    ok, worst = True, 0.0
    for a, e in zip(got, expect):
        diff = np.abs(_host(a, k) - e)
        worst = max(worst, float(np.max(diff, initial=0.0)))
        ok = ok and bool(np.all(diff <= 1e-5 + 1e-4 * np.abs(e)))
    rec.figure(f"{what}_max_abs_err", worst)
    return ok


def gelu(rec: Record) -> None:
    sim = simulated()
    why = None if sim else gpu_reason()
    if why is not None:
        rec.finish("failed", why)
        return
    n = SIM_ELEMENTS if sim else GPU_ELEMENTS
    rec.figure("elements", n)
    rec.figure("mb_per_array", n * 4 / 2**20)
    clock = Clock()
    xp = np if sim else clock.cp
    reps = 1 if sim else 20
    rounds = 1 if sim else 5
    x, y, z, g = inputs = _inputs(n, xp)
    out = xp.empty_like(x)

    copy_s = clock.per_call(lambda: xp.copyto(out, x), reps, rounds)
    copy_bw = 2 * n * 4 / copy_s
    rec.figure("copy_ms", copy_s * 1e3)
    rec.figure("copy_gbs", copy_bw / 1e9)
    bad = []

    def judge(key: str, seconds: float, arrays: int) -> None:
        frac = arrays * n * 4 / seconds / copy_bw
        rec.figure(f"{key}_ms", seconds * 1e3)
        rec.figure(f"{key}_fraction_of_copy", frac)
        rule = f">= {FRACTION:.0%} of the copy bandwidth"
        if sim:
            rec.target(f"{key}_fraction_of_copy", rule, None, None, "not applicable under the simulator")
        else:
            rec.target(f"{key}_fraction_of_copy", rule, frac, frac >= FRACTION)

    graph, kernel = _fused_kernel(n)
    kernel(x, y, z, out, n)
    if not _check(rec, "kernel_fwd", [out], inputs):
        bad.append("the fused kernel's forward values")
    judge("kernel_fwd", clock.per_call(lambda: kernel(x, y, z, out, n), reps, rounds), 4)

    if sim:
        _simulated_backward(rec, graph, inputs, bad)
    else:
        _traced(rec, inputs, clock, judge, bad)
    if bad:
        rec.finish("failed", "wrong values: " + ", ".join(bad))
    else:
        rec.finish("passed", "simulator: values only, no bandwidth" if sim else None)


def _simulated_backward(rec: Record, graph, inputs: list, bad: list) -> None:
    """Forward and backward as one joint graph through the CUDA kernels (host arrays)."""
    from tracejit.compiler import codegen_cuda
    from tracejit.compiler.fusion import Group, partition
    from tracejit.jit.autodiff import joint
    from tracejit.jit.passes import optimize

    jg = optimize(joint(graph, [True, True, True]))
    rec.figure("backward_groups", sum(isinstance(i, Group) for i in partition(jg)))
    grads = codegen_cuda.run_graph(jg, *inputs)
    if not _check(rec, "joint_bwd", list(grads), inputs):
        bad.append("the joint graph's gradients")


def _traced(rec: Record, inputs: list, clock: Clock, judge, bad: list) -> None:
    """``tracejit.trace`` of the chain on CUDA tensors: forward, then forward + backward."""
    import tracejit as tj
    f = tj.trace(gelu_chain(tj))
    try:
        plain = [tj.as_tensor(a, device="cuda") for a in inputs[:3]]
        out = f(*plain)
        if not _check(rec, "trace_fwd", [out._data], inputs):
            bad.append("tracejit.trace forward values")
        judge("trace_fwd", clock.per_call(lambda: f(*plain), 20, 5), 4)
    except Exception as e:  # noqa: BLE001 - reported; the backward is tried anyway
        bad.append(f"tracejit.trace forward raised {type(e).__name__}: {e}")
    try:
        diff = [tj.as_tensor(a, device="cuda").requires_grad_() for a in inputs[:3]]
        cot = tj.as_tensor(inputs[3], device="cuda")

        def fwd_bwd():
            return tj.autograd.grad(f(*diff), diff, cot)
        grads = fwd_bwd()
        if not _check(rec, "trace_fwd_bwd", [t._data for t in grads], inputs):
            bad.append("tracejit.trace gradients")
        judge("trace_fwd_bwd", clock.per_call(fwd_bwd, 10, 5), 11)
    except Exception as e:  # noqa: BLE001
        bad.append(f"tracejit.trace forward+backward raised {type(e).__name__}: {e}")


def _numba_dispatch(kernel, arrays, n: int, clock: Clock):
    """numba's own launch of the kernel: device views made once, the stream resolved once."""
    from numba import cuda

    from tracejit.compiler.cuda_launch import BLOCK
    if clock.cp is None:
        views, stream = [cuda.to_device(a) for a in arrays], 0
    else:
        views = [cuda.as_cuda_array(a) for a in arrays]
        ptr = clock.cp.cuda.get_current_stream().ptr
        stream = cuda.external_stream(ptr) if ptr else cuda.default_stream()
    grid = -(-n // BLOCK)
    return lambda: kernel.fn[grid, BLOCK, stream](*views, n)


def _cupy_add(x, y, out, clock: Clock):
    cp = clock.cp
    return None if cp is None else (lambda: cp.add(x, y, out=out))


def _trace_call(arrays):
    if simulated():
        return None
    import tracejit as tj
    f = tj.trace(gelu_chain(tj))
    ts = [tj.as_tensor(a, device="cuda") for a in arrays]
    return lambda: f(*ts)


def _launch_parts(kernel, arrays, n: int, timed) -> None:
    """Time each part of a direct launch (tracejit.compiler.cuda_direct) on its own: the
    stream lookup, the argument checks, the packing, the compiled kernel's lookup and
    cuda.core's launch (with numba's stream, and with a cuda.core stream made once)."""
    from tracejit.compiler import cuda_launch as cl
    d = kernel.direct
    if d is None:
        return
    spec = kernel.spec

    def checked():
        return [cl._direct_arg(a, f, c) for a, f, c in zip(arrays, spec.flatten, spec.contiguous)]
    args = checked() + [n]
    stream = cl._resolve_stream(None)
    params = d.pack(*args)
    cfg = d.config(cl._grid(n, spec.block), spec.block)
    fn = d.library.get_cufunc().kernel
    timed("part_stream_us", lambda: cl._resolve_stream(None))
    timed("part_checks_us", checked)
    timed("part_pack_us", lambda: d.pack(*args))
    timed("part_cufunc_us", lambda: d.library.get_cufunc().kernel)
    timed("part_core_launch_us", lambda: d._launch(stream, cfg, fn, *params))
    from cuda.core import Stream
    native = Stream.from_handle(int(stream.handle) if stream.handle else 0)
    timed("part_core_launch_native_stream_us", lambda: d._launch(native, cfg, fn, *params))


def launch(rec: Record) -> None:
    sim = simulated()
    why = None if sim else gpu_reason()
    if why is not None:
        rec.finish("failed", why)
        return
    n = 64 if sim else 1024
    reps, rounds = (3, 3) if sim else (200, 25)
    clock = Clock()
    xp = np if sim else clock.cp
    x, y, z, _ = inputs = _inputs(n, xp)
    out = xp.empty_like(x)
    _, kernel = _fused_kernel(n)
    rec.figure("elements", n)
    rec.figure("array_args", 4)

    def timed(key: str, fn) -> float:
        us = host_us_per_call(fn, reps, rounds, clock.sync)
        rec.figure(key, us)
        return us

    us = timed("tracejit_launch_us", lambda: kernel(x, y, z, out, n))
    if sim:
        rec.target("tracejit_launch_us", f"<= {LAUNCH_US:g} us per launch", None, None,
                   "not applicable under the simulator")
    else:
        rec.target("tracejit_launch_us", f"<= {LAUNCH_US:g} us per launch", us, us <= LAUNCH_US)
    kernel(x, y, z, out, n)
    clock.sync()
    ok = _check(rec, "launch", [out], inputs, k=n)
    for key, make in (("numba_dispatch_us", lambda: _numba_dispatch(kernel, (x, y, z, out), n, clock)),
                      ("cupy_add_us", lambda: _cupy_add(x, y, out, clock)),
                      ("trace_call_us", lambda: _trace_call((x, y, z)))):
        try:   # figures for scale: a failure here leaves the launch figure standing
            fn = make()
            if fn is None:
                rec.detail(key, "not measured: dry run, no cupy")
            else:
                timed(key, fn)
        except Exception as e:  # noqa: BLE001
            rec.detail(key, f"{type(e).__name__}: {e}")
    if not sim:
        try:   # where the launch's microseconds go: figures for scale, never a failure
            _launch_parts(kernel, (x, y, z, out), n, timed)
        except Exception as e:  # noqa: BLE001
            rec.detail("launch_parts", f"{type(e).__name__}: {e}")
    if ok:
        rec.finish("passed", "simulator: the timing loop ran, no launch cost judged" if sim else None)
    else:
        rec.finish("failed", "wrong values from the fused kernel")
