"""``as_voidptr``: an int64 address as a numba ``void*``, for ``carray`` in the GIL-free
share entries of generated kernels (compiler/cshares.py). A module of its own: it imports
numba, which code generation must not need."""
from __future__ import annotations

from numba import types
from numba.extending import intrinsic

__all__ = ["as_voidptr"]


@intrinsic
def as_voidptr(typingctx, addr):
    """An int64 address as a ``void*``."""
    sig = types.voidptr(addr)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))
    return sig, codegen
