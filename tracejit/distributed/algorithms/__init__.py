"""``tracejit.distributed.algorithms``: training algorithms over the process group (the join context)."""
from __future__ import annotations

from .join import Join, Joinable, JoinHook

__all__ = ["Join", "Joinable", "JoinHook"]
