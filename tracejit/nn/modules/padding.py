"""``tracejit.nn.modules.padding``: where ``torch.nn.modules.padding`` keeps these layers."""
from __future__ import annotations

from ...nn import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d,
                   ConstantPad3d, ReflectionPad1d, ReflectionPad2d, ReflectionPad3d,
                   ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, ZeroPad1d,
                   ZeroPad2d, ZeroPad3d)  # noqa: F401

__all__ = ["CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d"]
