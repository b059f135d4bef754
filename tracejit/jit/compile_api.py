"""``tracejit.compile``: ``torch.compile``'s signature and meaning over `trace`.

What torch.compile's arguments become here:

- ``mode``: ``None``/``"default"`` and ``"reduce-overhead"`` run the first calls on tier 0
  (the IR interpreter) while the kernels compile in the background, then switch; a
  compiled call is already a generated guard and one plan call, so there is no further
  overhead to reduce (no CUDA graphs). ``"max-autotune"`` and
  ``"max-autotune-no-cudagraphs"`` compile every kernel before the first call returns
  (``compile="sync"``): compiled speed from the first call, the wait at the first call.
  There is no autotuning search.
- ``backend``: ``None``, ``"inductor"`` and ``"numba"`` compile to kernels; ``"eager"``,
  ``"aot_eager"`` and ``"interpret"`` capture and run the graph on the reference
  interpreter (the ops' eager implementations), as torch's debugging backends do; a name
  registered with ``tracejit.jit.backend.register`` selects that backend.
- ``dynamic``: as torch's: ``None`` makes the dims that change between calls symbolic,
  ``True`` makes every dim symbolic from the first capture, ``False`` never does.
- ``fullgraph``: a capture is always one whole graph. ``False`` (the default, as torch's):
  a function that cannot be captured (a Python ``if`` on a tensor's value, ``.item()``, a
  boolean-mask index) runs eagerly from then on, with one warning that names the cause;
  ``True``: that raises the `TraceError` instead.
- ``options``: tracejit's own switches: ``recompile_limit`` (int), ``check`` (bool: run
  eagerly beside and compare), ``capture`` (``"trace"``, or ``"script"``: if/while/for on
  tensors become graph control flow), ``compile`` (``"background"``/``"sync"``).
- ``disable=True`` returns the model unchanged.

A module gives a `CompiledModule` (an ``nn.Module``; see compiled_module.py);
``Module.compile(**same arguments)`` compiles a module in place.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import ArgumentError   # (a bad value: torch's RuntimeError, and a ValueError)

__all__ = ["compile", "compile_settings", "MODES", "BACKENDS", "OPTIONS"]

# torch.compile's modes -> the compile= option of trace (None: the default, background)
MODES = {None: None, "default": None, "reduce-overhead": None, "max-autotune": "sync",
         "max-autotune-no-cudagraphs": "sync"}
# torch.compile's backend names (and tracejit's) -> the compiler= option of trace
BACKENDS = {None: "numba", "inductor": "numba", "numba": "numba", "eager": "interpret",
            "aot_eager": "interpret", "interpret": "interpret"}
# options= keys -> the values each accepts (a type, or the allowed values)
OPTIONS = {"recompile_limit": int, "check": bool, "capture": ("trace", "script"),
           "compile": ("background", "sync")}


# Inductor's option names scripts pass in options= (torch._inductor.config's settings)
_INDUCTOR_OPTIONS = {"max_autotune", "max_autotune_gemm", "max_autotune_pointwise", "epilogue_fusion",
                     "shape_padding", "coordinate_descent_tuning", "freezing", "layout_optimization",
                     "aggressive_fusion", "cpp_wrapper", "fx_graph_cache", "benchmark_kernel", "debug",
                     "force_same_precision", "split_reductions", "conv_1x1_as_mm", "keep_output_stride",
                     "memory_planning", "static_weight_shapes", "verbose_progress", "dce", "unroll_reductions_threshold",
                     "group_fusion", "pattern_matcher", "reorder_for_locality", "size_asserts", "fallback_random"}


def _inductor_option(key: str) -> bool:
    return key in _INDUCTOR_OPTIONS or key.split(".", 1)[0] in ("triton", "trace", "cpp", "cuda", "aot_inductor")


def _choices(table) -> str:
    return ", ".join(repr(k) for k in table if k is not None)


def compile_settings(*, mode: Optional[str] = None, dynamic: Optional[bool] = None, fullgraph: bool = False,
                     backend: Any = None, options: Optional[dict] = None) -> tuple:
    """(capture mode "trace"/"script", keyword arguments of `CompiledFunction`) for
    torch.compile's arguments; a bad value raises before anything is compiled."""
    from . import backend as _backend
    if mode is not None and not isinstance(mode, str) or mode not in MODES:
        raise ArgumentError(f"tracejit.compile: unknown mode {mode!r}; choose one of {_choices(MODES)} (or None)")
    if callable(backend):
        raise ArgumentError(f"tracejit.compile: backend must be a name, got the callable {backend!r}; "
                         f"custom graph compilers register a tracejit.jit.backend.Compiler and pass "
                         f"its name")
    registered = sorted(_backend._registered)
    if backend is not None and not isinstance(backend, str) or (backend not in BACKENDS
                                                                 and backend not in registered):
        names = _choices(BACKENDS) + "".join(f", {n!r}" for n in registered if n not in BACKENDS)
        raise ArgumentError(f"tracejit.compile: unknown backend {backend!r}; choose one of {names} (or None)")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"tracejit.compile: dynamic must be None, True or False, got {dynamic!r}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"tracejit.compile: fullgraph must be True or False, got {fullgraph!r}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"tracejit.compile: options must be a dict, got {type(options).__name__}")
    if mode is not None and options:
        raise ArgumentError("tracejit.compile: pass mode or options, not both (as torch.compile)")
    opts = dict(options or {})
    for key in [k for k in opts if k not in OPTIONS and _inductor_option(k)]:
        import warnings
        from ..errors import user_stacklevel
        warnings.warn(f"tracejit.compile: {key!r} is an Inductor option; it has no meaning here and is ignored",
                      UserWarning, stacklevel=user_stacklevel())
        del opts[key]
    for key, value in opts.items():
        allowed = OPTIONS.get(key)
        if allowed is None:
            raise ArgumentError(f"tracejit.compile: unknown option {key!r}; the options are "
                             f"{', '.join(map(repr, OPTIONS))}")
        ok = (isinstance(value, allowed) and not (allowed is int and isinstance(value, bool))
              if isinstance(allowed, type) else value in allowed)
        if not ok or (key == "recompile_limit" and value < 1):
            want = (f"a {allowed.__name__}" + (" >= 1" if key == "recompile_limit" else "")
                    if isinstance(allowed, type) else "one of " + ", ".join(map(repr, allowed)))
            raise ArgumentError(f"tracejit.compile: option {key!r} must be {want}, got {value!r}")
    kw = {"dynamic": dynamic, "compiler": BACKENDS.get(backend, backend), "compile": MODES[mode],
          "fullgraph": fullgraph, "side_effects": True}
    kw.update({key: opts[key] for key in ("compile", "recompile_limit", "check") if key in opts})
    return opts.get("capture", "trace"), kw


def compile(model: Optional[Callable] = None, *, fullgraph: bool = False, dynamic: Optional[bool] = None,
            backend: Any = None, mode: Optional[str] = None, options: Optional[dict] = None,
            disable: bool = False):
    """Compile a function or an ``nn.Module`` (``torch.compile``; see the module docstring
    for what each argument means here). Without `model`, a decorator with these settings:
    ``@tracejit.compile`` and ``@tracejit.compile(mode="max-autotune")`` both work."""
    capture, kw = compile_settings(mode=mode, dynamic=dynamic, fullgraph=fullgraph, backend=backend,
                                   options=options)
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options, disable=disable)
    if not callable(model):
        raise TypeError(f"tracejit.compile expects a function or an nn.Module, got {type(model).__name__}")
    if disable:
        return model
    from . import _decorate
    return _decorate(capture, model, kw)
