"""Random tensors from one global generator, seeded by ``manual_seed``.

``rand``/``randn``/``randint`` are primitives: inside a traced function they record
an op that draws fresh numbers on every call, rather than freezing one sample. Given
``generator=`` (a `tracejit.Generator`), an eager call draws from that generator's
stream instead (`drawing_from`); a traced one cannot, and says so.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import bf16 as _bf16
from .. import dtypes as _dt
from ..device import as_device
from ..formats import check_layout
from .creation import _bind_creation, _size, like
from .eager import refuse_effect
from .registry import Aval, batch_shape, defprim
from ..errors import ArgumentError

__all__ = ["manual_seed", "seed", "drawing_from", "rand", "randn", "randint", "randperm", "rand_like", "randn_like",
           "bernoulli", "get_rng_state", "set_rng_state", "global_rng", "initial_seed"]

_gen = np.random.default_rng(0)
_cuda_seed = [0]


def manual_seed(seed):
    """Seed every generator (CPU, and CUDA through cupy when it is in use); returns the
    default generator, as PyTorch does. Seeds are PyTorch's: ints in [-2**63, 2**64),
    negatives taken modulo 2**64."""
    global _gen
    from ..generator import default_generator, seed_value
    s = seed_value(seed)
    refuse_effect("manual_seed reseeds the generators")
    _gen = np.random.default_rng(s)
    _cuda_seed[0] = s
    import sys
    _device = sys.modules["tracejit.device"]  # the module (tracejit.device is also the class)
    if _device._cupy is not None:
        _device._cupy.random.seed(s % 2 ** 32)
    return default_generator


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2 ** 63))
    manual_seed(s)
    return s


def global_rng() -> np.random.Generator:
    """The numpy stream the random ops draw from now (the global one, or `drawing_from`'s)."""
    return _gen


def initial_seed() -> int:
    """The seed the global generator was last seeded with (``manual_seed``)."""
    return _cuda_seed[0]


def __getattr__(name: str):
    # ``torch.random.default_generator``; generator.py imports this module
    if name == "default_generator":
        from ..generator import default_generator
        return default_generator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def drawing_from(generator, op: str):
    """Within: the random primitives draw from `generator`'s stream (None: the global
    generator). `op` names the caller in errors."""
    global _gen
    from ..generator import default_generator
    if generator is None or generator is default_generator:
        yield
        return
    rng = getattr(generator, "_rng", None)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"{op}: generator must be a tracejit.Generator, got {type(generator).__name__}")
    from .registry import trace_state
    if trace_state.tracer is not None:
        from ..errors import TraceError
        raise TraceError(f"{op}: generator= draws from a Generator object, which a compiled function "
                         f"cannot capture; draw outside it, or use the global generator "
                         f"(tracejit.manual_seed)")
    saved, _gen = _gen, rng
    try:
        yield
    finally:
        _gen = saved


def get_rng_state():
    """The global generator's state as a uint8 tensor (``set_rng_state`` takes it back)."""
    from ..generator import pack_state
    return pack_state(_gen)


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True, _caller: str = "fork_rng", _devices_kw: str = "devices",
             device_type: str = "cuda"):
    """``torch.random.fork_rng``: draws inside the block leave the default generator as it
    was before it (a ``manual_seed`` inside included). Only the CPU generator is forked."""
    global _gen
    if not enabled:
        yield
        return
    saved, state = _gen, _gen.bit_generator.state
    try:
        yield
    finally:
        saved.bit_generator.state = state
        _gen = saved


def set_rng_state(state) -> None:
    from ..generator import unpack_state
    refuse_effect("set_rng_state sets the generator's state")
    _gen.bit_generator.state = unpack_state(state)


def _draw(xp, kind, shape, dtype, low=0, high=1):
    if dtype is _dt.bfloat16:   # drawn in float32, rounded to bf16 words
        return _bf16.to_bfloat16(_draw(xp, kind, shape, _dt.float32, low, high))
    if kind == "perm":
        return (_gen if xp is np else xp.random).permutation(shape[0]).astype(dtype.np)
    if kind == "int":
        return (_gen.integers if xp is np else xp.random.randint)(low, high, shape).astype(dtype.np)
    if xp is not np:  # pragma: no cover - GPU only
        draw = xp.random.random if kind == "uniform" else xp.random.standard_normal
        return draw(shape).astype(dtype.np)
    draw = _gen.random if kind == "uniform" else _gen.standard_normal
    wide = np.float64 if dtype.np == np.float64 else np.float32
    return draw(shape, dtype=wide).astype(dtype.np, copy=False)


def _random_prim(name, kind, **extra):
    return defprim(name, lambda xp, shape, dtype, device: _draw(xp, kind, shape, dtype),
                   lambda shape, dtype, device: Aval(shape, dtype, device), kind="random",
                   extra=extra)


UNIFORM = _random_prim("rand", "uniform", batch=batch_shape)
NORMAL = _random_prim("randn", "normal", batch=batch_shape)
RANDINT = defprim("randint", lambda xp, shape, low, high, dtype, device: _draw(xp, "int", shape, dtype, low, high),
                  lambda shape, low, high, dtype, device: Aval(shape, dtype, device), kind="random")
# (a primitive, so a compiled function draws a new permutation on every call)
RANDPERM = _random_prim("randperm", "perm")


def _float(dtype):
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()
    if not d.is_floating_point:
        raise TypeError(f"expected a floating dtype, got {d}")
    return d


def _floating_draw(prim, name: str, size, generator, dtype, device, requires_grad: bool,
                   part_scale: float):
    """`rand`/`randn`: floating draws of `prim`; a complex dtype's parts drawn as its real
    dtype's and scaled by `part_scale`."""
    if generator is not None:
        with drawing_from(generator, name):
            return _floating_draw(prim, name, size, None, dtype, device, requires_grad, part_scale)
    if dtype is not None and _dt.as_dtype(dtype).is_complex:
        from .complex_ops import view_as_complex
        parts = _floating_draw(prim, name, _size(size) + (2,), None, _dt.as_dtype(dtype).to_real(), device,
                               False, part_scale)
        return view_as_complex(parts if part_scale == 1.0 else parts * part_scale).requires_grad_(requires_grad)
    t = _bind_creation(prim, shape=_size(size), dtype=_float(dtype), device=as_device(device))
    if requires_grad:
        t.requires_grad = True
    return t


def rand(*dims, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False,
         layout=None, pin_memory: bool = False):
    check_layout(layout, "rand")
    # a complex dtype: both parts uniform on [0, 1)
    return _floating_draw(UNIFORM, "rand", _size(dims, size), generator, dtype, device, requires_grad, 1.0)


def randn(*dims, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False,
          layout=None, pin_memory: bool = False):
    check_layout(layout, "randn")
    # a complex dtype: parts drawn with variance 1/2 each
    return _floating_draw(NORMAL, "randn", _size(dims, size), generator, dtype, device, requires_grad, 0.5 ** 0.5)


def randint(low, high=None, size=(), *, generator=None, dtype=None, device=None, requires_grad: bool = False,
            layout=None, pin_memory: bool = False):
    """``randint(high, size)`` or ``randint(low, high, size)``, like PyTorch."""
    check_layout(layout, "randint")
    if requires_grad:
        raise RuntimeError("randint: only floating point tensors can require gradients")
    if isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ArgumentError(f"randint: high ({high}) must be greater than low ({low})")
    if generator is not None:
        with drawing_from(generator, "randint"):
            return randint(low, high, size, dtype=dtype, device=device)
    return _bind_creation(RANDINT, shape=_size(tuple(size) if not isinstance(size, int) else (size,)),
                          low=int(low), high=int(high), dtype=_dt.as_dtype(dtype or _dt.int64),
                          device=as_device(device))


def rand_like(a, *, dtype=None, device=None, memory_format=None, requires_grad: bool = False,
              layout=None, pin_memory: bool = False):
    kw = dict(dtype=dtype or a.dtype, device=device or a.device)
    return like(a, lambda shape: rand(shape, **kw), memory_format, layout, "rand_like", requires_grad)


def randn_like(a, *, dtype=None, device=None, memory_format=None, requires_grad: bool = False,
               layout=None, pin_memory: bool = False):
    kw = dict(dtype=dtype or a.dtype, device=device or a.device)
    return like(a, lambda shape: randn(shape, **kw), memory_format, layout, "randn_like", requires_grad)


def randperm(n: int, *, generator=None, dtype=None, device=None, requires_grad: bool = False,
             layout=None, pin_memory: bool = False):
    check_layout(layout, "randperm")
    if requires_grad:
        raise RuntimeError("randperm: only floating point tensors can require gradients")
    if n < 0:
        raise ArgumentError(f"randperm: n must be non-negative, got {n}")
    with drawing_from(generator, "randperm"):
        return _bind_creation(RANDPERM, shape=(n,), dtype=_dt.as_dtype(dtype or _dt.int64), device=as_device(device))


def bernoulli(input, p=None, *, generator=None):
    """1 with probability `input` (or the number `p` for every element), else 0, in input's dtype."""
    from .elementwise import cast, lt
    if generator is not None:
        with drawing_from(generator, "bernoulli"):
            return bernoulli(input, p)
    if p is not None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"bernoulli: p must be in [0, 1], got {p}")
        return cast(lt(rand_like(input, dtype=_float(None) if not input.dtype.is_floating_point else None), p),
                    input.dtype)
    return cast(lt(rand_like(input), input), input.dtype)
