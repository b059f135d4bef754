"""``torch.autograd.profiler``'s names: the legacy `profile` and `record_function`, over
tracejit.profiler (the same events, tables and chrome traces)."""
from __future__ import annotations

from ..profiler import EventList, FunctionEvent, profile as _profile, record_function

__all__ = ["profile", "record_function", "EventList", "FunctionEvent"]


class profile(_profile):
    """``torch.autograd.profiler.profile(enabled=True, *, use_cuda=False, record_shapes=False,
    ...)``: records while entered, no schedule."""

    def __init__(self, enabled: bool = True, *, use_cuda: bool = False, use_device=None,
                 record_shapes: bool = False, with_flops: bool = False, profile_memory: bool = False,
                 with_stack: bool = False, with_modules: bool = False, use_kineto: bool = False,
                 use_cpu: bool = True, experimental_config=None, acc_events: bool = False,
                 custom_trace_id_callback=None):
        super().__init__(record_shapes=record_shapes, enabled=enabled and use_cpu)

    @property
    def function_events(self) -> EventList:
        return self.events()
