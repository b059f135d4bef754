"""Tiny sample calls of a PyTorch name and its tracejit namesake, compared.

`probe(ns, name, torch_obj, tj_obj)` finds a call PyTorch accepts among a few generic
argument lists (tensors of a few shapes, a dim, a size), makes the same call in tracejit
with the same values, and compares the results: tensors by shape, dtype and values
(float32 tolerance), numbers and tuples by value; a result PyTorch draws at random (it
changes with the seed) by shape and dtype only. Layers are built with the same
constructor arguments, given PyTorch's weights by state_dict name and run on the same
input; losses on an (input, target) pair; optimizers and schedulers for a few steps on
one parameter. A name whose every generic call PyTorch refuses, or that is not safe to
call blindly (it sets global state, touches files or devices), gets no sample.

The outcome is ``"matches"``, ``"differs: <why>"`` or ``"no sample"``. Needs PyTorch.
"""
from __future__ import annotations

import contextlib
import re
import signal
import warnings

import numpy as np

# names not called blindly: global switches, I/O, devices, compilers, process control
_UNSAFE = re.compile(r"^(set_|use_|enable_|disable_|_|seed|manual_seed|initial_seed|save|load|"
                     r"compile|export|cuda|cpu|mps|xpu|ipu|hpu|mtia|jit|distributed|profiler|backends|"
                     r"multiprocessing|hub|onnx|testing|fork|wait|accelerator|amp|cond|while_loop|"
                     r"vmap|func|library|sym_|typename|promote_types|register|from_file|"
                     r"share_memory|pin_memory|record_stream|storage|untyped_storage|data_ptr|"
                     r"backward|register_hook|retain_grad|resize|map_|apply_|module_load|__)")
_RNG = np.random.default_rng(0)
# results of uninitialized memory: compared by shape and dtype only, like random draws
_UNINITIALIZED = re.compile(r"^(new_)?empty(_like|_strided)?$")


def _arrays():
    r = np.random.default_rng(0)
    sq = r.uniform(-0.5, 0.5, (4, 4))
    return {
        "x": r.uniform(0.1, 0.9, (3, 4)).astype(np.float32),
        "y": r.uniform(0.1, 0.9, (3, 4)).astype(np.float32),
        "v": r.uniform(0.1, 0.9, (5,)).astype(np.float32),
        "sq": (np.eye(4) * 2 + (sq + sq.T) / 2).astype(np.float32),
        "i": np.array([[0, 2, 1, 3], [1, 0, 3, 2], [2, 3, 0, 1]], dtype=np.int64),
        "b": r.random((3, 4)) > 0.5,
        "x4": r.uniform(-1, 1, (2, 4, 5, 5)).astype(np.float32),
        "x3": r.uniform(-1, 1, (2, 4, 5)).astype(np.float32),
        "x5": r.uniform(-1, 1, (2, 4, 3, 3, 3)).astype(np.float32),
        "x2": r.uniform(-1, 1, (2, 4)).astype(np.float32),
        "p2": r.uniform(0.1, 0.9, (2, 4)).astype(np.float32),
        "t2": (r.random((2, 4)) > 0.5).astype(np.float32),
        "c2": np.array([1, 3], dtype=np.int64),
        "pm": np.array([[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, 1.0, -1.0]], dtype=np.float32),
        "ix": np.array([[1, 0, 3, 2], [2, 2, 0, 1]], dtype=np.int64),
    }


A = _arrays()
# argument lists tried in order; strings name arrays of `A` (made into tensors per call)
FUNCTION_ARGS = [("x",), ("x", "y"), ("x", 1), ("x", 0), ("sq",), ("sq", "sq"), ("v",), ("v", "v"),
                 ("x", "y", "y"), ("i",), ("b",), ("x", "i"), ("x", 1, "i"), ("x", [1, 0]), ((3, 4),),
                 (3, 4), (3,), (5, 0.5), ("x", 2.0), ("x4", 2), ("x4",), ("x3",), ("x2", "c2"),
                 ("p2", "t2"), ("x", 0.5), ("x", 1, True), ()]
METHOD_ARGS = [(), ("y",), (1,), (0,), ("x",), (-1,), ((4, 3),), (4, 3), (1, 0), (2.0,), ("i",),
               (1, "i"), (0, "i", "y"), ("b", 0.5), (0, 1, 2)]
LAYER_CTOR = [(), (4,), (4, 4), (4, 4, 3), (4, 2), (2,), (4, 4, 4), (1,), (0.5,), (3, 2)]
LAYER_INPUTS = [("x2",), ("x3",), ("x4",), ("x5",), ("ix",), ("p2", "t2"), ("x2", "c2"),
                ("x2", "x2", "pm"), ("x2", "x2"), ("x3", "x3")]
DIST_ARGS = [("p2",), ("x2", "p2"), ("p2", "x2"), ("x2",), ("p2", "p2"), ("x2", "p2", "x2")]


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    def fire(*_):
        raise _Timeout()
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _make(lib, args):
    """The argument list for `lib` (torch or tracejit): named arrays become tensors."""
    out = []
    for a in args:
        if isinstance(a, str) and a in A:
            out.append(lib.tensor(A[a].copy()))
        else:
            out.append(a)
    return out


def _plain(v, torch):
    """A result as plain Python/numpy data for comparison (tensors as (dtype, array))."""
    import tracejit as tj
    if getattr(v, "is_sparse", False):     # a sparse result compares as its dense values
        v = v.to_dense()
    if isinstance(v, (torch.Tensor, tj.Tensor)):
        dt = str(v.dtype).split(".")[-1]
        if dt == "bfloat16" or getattr(v, "is_complex", lambda: False)():   # (either library's)
            return ("tensor", dt, tuple(v.shape), None)
        return ("tensor", dt, tuple(v.shape), v.detach().cpu().numpy())
    if isinstance(v, (torch.dtype, tj.dtypes.DType)):
        return ("dtype", str(v).split(".")[-1])
    if isinstance(v, (tuple, list)):
        return tuple(_plain(e, torch) for e in v)
    if isinstance(v, (bool, int, float, str, type(None))):
        return v
    if isinstance(v, np.ndarray):
        return ("tensor", str(v.dtype), v.shape, v)
    return ("object", type(v).__name__)


def _compare(a, b, loose: bool = False) -> str | None:
    """None when `a` (PyTorch's) and `b` (tracejit's) agree, else why not."""
    if isinstance(a, tuple) and a[:1] == ("tensor",):
        if not (isinstance(b, tuple) and b[:1] == ("tensor",)):
            return f"a tensor against {type(b).__name__}"
        if a[2] != b[2]:
            return f"shape {b[2]} (PyTorch {a[2]})"
        if a[1] != b[1]:
            return f"dtype {b[1]} (PyTorch {a[1]})"
        if loose or a[3] is None or b[3] is None:
            return None
        x, y = np.asarray(a[3]), np.asarray(b[3])
        if x.dtype.kind in "fc":
            ok = np.allclose(x, y, rtol=1e-4, atol=1e-5, equal_nan=True)
        else:
            ok = np.array_equal(x, y)
        return None if ok else "values differ"
    if isinstance(a, tuple) and a[:1] == ("object",):
        return None if isinstance(b, tuple) and b[:1] == ("object",) else f"returns {b!r}"
    if isinstance(a, tuple):
        if not isinstance(b, tuple) or len(a) != len(b):
            return f"{len(b) if isinstance(b, tuple) else type(b).__name__} results (PyTorch {len(a)})"
        for x, y in zip(a, b):
            why = _compare(x, y, loose)
            if why:
                return why
        return None
    if isinstance(a, float) and isinstance(b, (int, float)):
        return None if (loose or np.isclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True)) else "values differ"
    if loose and type(a) is type(b):
        return None
    return None if a == b else f"{b!r} (PyTorch {a!r})"


def _run(lib, fn, seed=0):
    lib.manual_seed(seed)
    with _time_limit(2.0):
        return fn(lib)


def _paired(torch, tj, call, loose=False) -> str:
    """Run `call(lib)` in both; "matches" / "differs: ..."; raises when PyTorch refuses."""
    import tracejit
    got_t = _plain(_run(torch, call, 0), torch)
    random = _compare(got_t, _plain(_run(torch, call, 1), torch)) is not None
    try:
        got_j = _plain(_run(tracejit, call, 0), torch)
    except _Timeout:
        return "differs: no result in 2 s"
    except Exception as e:  # noqa: BLE001
        return f"differs: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    why = _compare(got_t, got_j, loose=loose or random)
    return "matches" if why is None else f"differs: {why}"


def _first_accepted(torch, tj, candidates, build, loose=False):
    """The outcome for the first candidate PyTorch accepts, or "no sample"."""
    for args in candidates:
        call = build(args)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _run(torch, call)
        except Exception:  # noqa: BLE001  (PyTorch refused these arguments: try the next)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _paired(torch, tj, call, loose=loose)
    return "no sample"


def _function(ns, name):
    def build(args):
        def call(lib):
            mod = _namespace(lib, ns)
            return getattr(mod, name)(*_make(lib, args))
        return call
    return build


def _method(name):
    def build(args):
        def call(lib):
            x = lib.tensor(A["x"].copy())
            attr = getattr(x, name)
            return attr(*_make(lib, args)) if callable(attr) else attr
        return call
    return build


def _layer(name):
    def build(spec):
        ctor, inputs = spec

        def call(lib):
            import tracejit
            mod = getattr(lib.nn, name)(*ctor)
            lazy = name.startswith("Lazy")
            if lazy:   # the first call infers the input size
                mod(*_make(lib, inputs))
            if lib is tracejit:
                import torch
                torch.manual_seed(0)
                ref = getattr(torch.nn, name)(*ctor)
                if lazy:
                    ref(*_make(torch, inputs))
                state = {k: tracejit.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()}
                mod.load_state_dict(state)
            return mod(*_make(lib, inputs))
        return call
    return build


def _optimizer(ns, name):
    def build(args):
        def call(lib):
            p = lib.tensor(A["x"].copy(), requires_grad=True)
            opt = getattr(_namespace(lib, ns), name)([p], *args)
            for _ in range(3):
                opt.zero_grad()
                loss = ((p - 0.3) ** 2).sum()
                loss.backward()
                opt.step(lambda: ((p - 0.3) ** 2).sum()) if name == "LBFGS" else opt.step()
            return p
        return call
    return build


def _scheduler(name):
    def build(args):
        def call(lib):
            p = lib.tensor(A["x"].copy(), requires_grad=True)
            opt = lib.optim.SGD([p], lr=0.1)
            sched = getattr(lib.optim.lr_scheduler, name)(opt, *args)
            lrs = []
            for _ in range(4):
                opt.step()
                sched.step(1.0) if name == "ReduceLROnPlateau" else sched.step()
                lrs.append(opt.param_groups[0]["lr"])
            return lrs
        return call
    return build


def _distribution(name):
    def build(args):
        def call(lib):
            import torch
            # (torch.compile turns torch's argument validation off for the process: the
            # outcomes are those of both libraries' default, validation on)
            torch.distributions.Distribution.set_default_validate_args(True)
            d = getattr(lib.distributions, name)(*_make(lib, args))
            torch.manual_seed(0)
            ref = getattr(torch.distributions, name)(*_make(torch, args))
            value = ref.sample()
            v = lib.tensor(value.numpy()) if lib is not torch else value
            try:        # (families without a closed-form entropy raise, in both libraries)
                entropy = d.entropy()
            except NotImplementedError:
                entropy = "no entropy"
            return d.log_prob(v), entropy, tuple(d.batch_shape), tuple(d.sample().shape)
        return call
    return build


def _wrapping_distribution(name):
    """MixtureSameFamily and TransformedDistribution take distributions: a Normal over `p2`'s
    shape, mixed by a Categorical over its last dim, or pushed through a tanh."""
    def build(args):
        def call(lib):
            D = lib.distributions
            loc, scale = _make(lib, args)
            base = D.Normal(loc, scale)
            if name == "MixtureSameFamily":
                d = D.MixtureSameFamily(D.Categorical(logits=loc), base)
                value = lib.tensor(A["x2"][:, 0].copy())
            else:
                d = D.TransformedDistribution(base, [D.TanhTransform()])
                value = lib.tensor(np.tanh(A[args[0]].copy()) * 0.5)
            return d.log_prob(value), tuple(d.batch_shape), tuple(d.sample().shape)
        return call
    return build


def _namespace(lib, ns):
    if lib.__name__ == "torch":
        import importlib
        return lib.Tensor if ns == "torch.Tensor" else importlib.import_module(ns)
    import importlib
    if ns == "torch.Tensor":
        return lib.Tensor
    return importlib.import_module(ns.replace("torch", "tracejit", 1))


_WARMED: list = []


def _warm_up(torch, tj) -> None:
    """Run once, untimed, what the first optimizer step and distribution sample import
    (PyTorch's optimizers load torch._dynamo and sympy): a time limit that interrupts
    an import half way leaves the module broken for every later sample."""
    if _WARMED:
        return
    _WARMED.append(True)
    for lib in (torch, tj):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = lib.ones(2, requires_grad=True)
            opt = lib.optim.SGD([p], lr=0.1)
            p.sum().backward()
            opt.step()
            lib.optim.lr_scheduler.StepLR(opt, 1).step()
            lib.distributions.Normal(lib.zeros(2), lib.ones(2)).sample()


def probe(ns: str, name: str, torch_obj, kind: str) -> str:
    import inspect

    import torch

    import tracejit as tj
    _warm_up(torch, tj)
    if _UNSAFE.match(name) or kind in ("module", "dtype", "constant"):
        if kind == "dtype":
            return "matches"
        return "no sample"
    try:
        loose = bool(_UNINITIALIZED.match(name))
        if ns == "torch.Tensor":
            return _first_accepted(torch, tj, METHOD_ARGS, _method(name), loose)
        if ns == "torch.nn" and kind == "layer":
            return _first_accepted(torch, tj, [(c, i) for c in LAYER_CTOR for i in LAYER_INPUTS], _layer(name))
        if ns == "torch.optim" and inspect.isclass(torch_obj):
            return _first_accepted(torch, tj, [(), (0.1,)], _optimizer(ns, name))
        if ns == "torch.optim.lr_scheduler" and inspect.isclass(torch_obj):
            return _first_accepted(torch, tj, [(), (2,), (0.5,), (2, 0.5), (3,), ([1, 2],)], _scheduler(name))
        if ns == "torch.distributions" and name in ("MixtureSameFamily", "TransformedDistribution"):
            return _first_accepted(torch, tj, [("x2", "p2")], _wrapping_distribution(name))
        if ns == "torch.distributions" and inspect.isclass(torch_obj):
            return _first_accepted(torch, tj, DIST_ARGS, _distribution(name))
        if inspect.isclass(torch_obj):
            return "no sample"
        return _first_accepted(torch, tj, FUNCTION_ARGS, _function(ns, name), loose)
    except _Timeout:
        return "no sample"
