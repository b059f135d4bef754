"""No module of the ops package shadows an op: importing ``tracejit.ops.<name>`` sets the
package attribute ``<name>`` to the module, so a module named like an op would turn
``tracejit.ops.<op>`` and the Tensor method that forwards to it into a module."""
import importlib
import pkgutil
import types

import tracejit as tj
import tracejit.ops as ops
from tracejit.tensor_operators import _FORWARDED


def test_no_ops_module_is_named_like_an_op_or_a_tensor_method():
    for info in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"tracejit.ops.{info.name}")
    names = set(_FORWARDED) | set(getattr(ops, "__all__", ()))
    shadowed = sorted(n for n in names if isinstance(getattr(ops, n, None), types.ModuleType))
    assert shadowed == []


def test_unbind_method_after_everything_is_imported():
    import tracejit.jit  # noqa: F401  (imports the scan helpers)
    x = tj.tensor([[1.0, 2.0], [3.0, 4.0]])
    a, b = x.unbind(1)
    assert a.tolist() == [1.0, 3.0] and b.tolist() == [2.0, 4.0]
    assert [t.tolist() for t in tj.Tensor.unbind(x, 0)] == [[1.0, 2.0], [3.0, 4.0]]
