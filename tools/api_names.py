"""PyTorch's public names per namespace, as tools/api_coverage.py measures them.

``python tools/api_names.py`` (needs PyTorch) writes tools/data/pytorch_api.json: for each
namespace the names a program can reach there, each with its kind (function, class,
module layer, dtype, ...). The rules, per namespace:

- ``torch``: ``torch.__all__`` without the C++ types of the TorchScript front end (classes
  defined in ``torch._C`` other than the tensor-like ones programs use), plus the dtypes,
  the memory formats, a few public functions missing from ``__all__`` and the submodules
  programs reach through ``torch.`` (``torch.cuda``, ``torch.nn``, ...);
- ``torch.Tensor``: every attribute of the class without a leading underscore;
- ``torch.nn``: the ``Module`` subclasses (layers, losses, containers) and the parameter
  and buffer classes;
- ``torch.nn.functional``: the functions PyTorch defines there (not typing helpers,
  imported modules or ``__torch_function__`` plumbing);
- the others: their ``__all__`` where they have one, else their public functions and
  classes; ``torch.distributions`` keeps the distributions, ``kl_divergence`` and
  ``register_kl`` (not the transforms and constraints).
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data", "pytorch_api.json")

NAMESPACES = ["torch", "torch.Tensor", "torch.nn", "torch.nn.functional", "torch.nn.init",
              "torch.nn.utils", "torch.nn.utils.rnn", "torch.optim", "torch.optim.lr_scheduler",
              "torch.utils.data", "torch.distributions", "torch.autograd", "torch.linalg",
              "torch.fft", "torch.special"]
_TORCH_EXTRA = ["set_default_dtype", "set_grad_enabled", "from_dlpack", "broadcast_shapes", "unique",
                "channels_last", "channels_last_3d", "contiguous_format", "preserve_format", "strided",
                "Size", "Generator", "device", "dtype", "layout", "memory_format", "finfo", "iinfo"]
_TORCH_SUBMODULES = ["accelerator", "amp", "autograd", "backends", "cuda", "distributed", "distributions",
                     "fft", "hub", "jit", "linalg", "mps", "multiprocessing", "nn", "onnx", "optim",
                     "profiler", "random", "special", "testing", "utils", "compiler", "func", "cpu"]
_KEEP_C_CLASSES = {"Tensor", "Size", "Generator", "device", "dtype", "layout", "memory_format",
                   "finfo", "iinfo", "Stream", "Event"}
_F_PLUMBING = {"boolean_dispatch", "handle_torch_function", "has_torch_function",
               "has_torch_function_unary", "has_torch_function_variadic", "assert_int_or_pair"}


def _kind(obj) -> str:
    import torch
    if isinstance(obj, torch.dtype):
        return "dtype"
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        if issubclass(obj, torch.nn.Module):
            return "layer"
        return "class"
    if isinstance(obj, property) or type(obj).__name__ in ("getset_descriptor", "member_descriptor"):
        return "property"
    if callable(obj):
        return "function"
    return "constant"


def _public(mod) -> list:
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in dir(mod) if not n.startswith("_")]
    return [n for n in names if hasattr(mod, n)]


def names_of(ns: str) -> dict:
    import torch
    out = {}
    if ns == "torch":
        for n in list(torch.__all__) + _TORCH_EXTRA:
            obj = getattr(torch, n, None)
            if obj is None and n != "newaxis":
                continue
            if inspect.isclass(obj) and obj.__module__.startswith("torch._C") and n not in _KEEP_C_CLASSES:
                continue
            out[n] = _kind(obj)
        for n in _TORCH_SUBMODULES:
            out[n] = "module"
        return out
    if ns == "torch.Tensor":
        return {n: _kind(getattr(torch.Tensor, n)) for n in dir(torch.Tensor) if not n.startswith("_")}
    mod = importlib.import_module(ns)
    if ns == "torch.nn":
        for n in dir(mod):
            obj = getattr(mod, n)
            if not n.startswith("_") and inspect.isclass(obj) and (
                    issubclass(obj, (torch.nn.Module, torch.Tensor))):
                out[n] = _kind(obj)
        return out
    if ns == "torch.nn.functional":
        for n in dir(mod):
            obj = getattr(mod, n)
            if (n.startswith("_") or n in _F_PLUMBING or inspect.ismodule(obj) or inspect.isclass(obj)
                    or not callable(obj) or "torch" not in (getattr(obj, "__module__", "") or "")):
                continue
            out[n] = "function"
        return out
    for n in _public(mod):
        obj = getattr(mod, n)
        if inspect.ismodule(obj) and ns not in ("torch.optim", "torch.nn.utils"):
            continue
        if ns == "torch.distributions" and not (
                n in ("kl_divergence", "register_kl") or (
                    inspect.isclass(obj) and issubclass(obj, torch.distributions.Distribution))):
            continue
        out[n] = _kind(obj)
    return out


def main() -> int:
    import torch
    data = {"torch_version": torch.__version__.split("+")[0],
            "namespaces": {ns: dict(sorted(names_of(ns).items())) for ns in NAMESPACES}}
    with open(OUT, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print({ns: len(v) for ns, v in data["namespaces"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
