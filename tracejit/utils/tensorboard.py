"""``tracejit.utils.tensorboard.SummaryWriter``: TensorBoard event files, as torch.utils.tensorboard.

Built on the optional ``tensorboard`` package (``pip install tracejit[tensorboard]``),
which is imported only when a writer is created: importing tracejit never needs it, and
a missing package gives an ImportError that says what to install. The files are written
by tensorboard's own ``EventFileWriter``, so ``tensorboard --logdir runs`` reads them.
"""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from typing import Any

import numpy as np

__all__ = ["SummaryWriter"]


def _tb():
    """tensorboard's event writer and protos, or an ImportError saying how to get them."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as e:
        raise ImportError("tracejit.utils.tensorboard.SummaryWriter needs the optional 'tensorboard' "
                          "package: pip install 'tracejit[tensorboard]' (or pip install tensorboard)") from e
    return EventFileWriter, Event, Summary, HistogramProto


def _to_numpy(value) -> np.ndarray:
    from ..tensor import Tensor
    if isinstance(value, Tensor):
        return np.asarray(value.detach().cpu()._data)
    return np.asarray(value)


def _scalar(value) -> float:
    a = _to_numpy(value)
    if a.size != 1:
        raise ValueError(f"add_scalar: expected a single number, got an array of shape {a.shape}")
    return float(a.reshape(()))


class SummaryWriter:
    """Writes scalars and histograms to an event file in ``log_dir`` (default ``runs/DATETIME_HOST``)."""

    def __init__(self, log_dir: str | None = None, comment: str = "", purge_step: int | None = None,
                 max_queue: int = 10, flush_secs: int = 120, filename_suffix: str = ""):
        self._EventFileWriter, self._Event, self._Summary, self._HistogramProto = _tb()
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self.purge_step = purge_step
        self._max_queue, self._flush_secs, self._suffix = max_queue, flush_secs, filename_suffix
        self._writer = self._EventFileWriter(self.log_dir, max_queue, flush_secs, filename_suffix)
        self._sub_writers: dict[str, Any] = {}   # add_scalars: one event file per series
        if purge_step is not None:
            # Tell TensorBoard to drop events at or after purge_step from a previous run.
            self._writer.add_event(self._Event(step=purge_step, file_version="brain.Event:2",
                                               wall_time=time.time()))
            from tensorboard.compat.proto.event_pb2 import SessionLog
            self._writer.add_event(self._Event(step=purge_step, wall_time=time.time(),
                                               session_log=SessionLog(status=SessionLog.START)))

    def get_logdir(self) -> str:
        return self.log_dir

    def _add(self, writer, value, global_step, walltime) -> None:
        event = self._Event(summary=self._Summary(value=[value]),
                            wall_time=time.time() if walltime is None else float(walltime))
        if global_step is not None:
            event.step = int(global_step)
        writer.add_event(event)

    def add_scalar(self, tag: str, scalar_value, global_step: int | None = None,
                   walltime: float | None = None, new_style: bool = False) -> None:
        """One point of the curve ``tag`` (scalar_value: a number, 1-element Tensor or array)."""
        value = self._Summary.Value(tag=tag, simple_value=_scalar(scalar_value))
        self._add(self._writer, value, global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step: int | None = None,
                    walltime: float | None = None) -> None:
        """Several curves in one chart: as PyTorch, each series goes to ``log_dir/main_tag_tag``."""
        for tag, v in tag_scalar_dict.items():
            sub = os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{tag}")
            w = self._sub_writers.get(sub)
            if w is None:
                w = self._sub_writers[sub] = self._EventFileWriter(sub, self._max_queue, self._flush_secs,
                                                                   self._suffix)
            self._add(w, self._Summary.Value(tag=main_tag, simple_value=_scalar(v)), global_step, walltime)

    def add_histogram(self, tag: str, values, global_step: int | None = None, bins: Any = "tensorflow",
                      walltime: float | None = None, max_bins: int | None = None) -> None:
        """A histogram of ``values``. ``bins`` is anything numpy.histogram takes; 'tensorflow'
        (PyTorch's default name) uses numpy's 'auto' edges here."""
        a = _to_numpy(values).astype(np.float64).reshape(-1)
        if a.size == 0:
            raise ValueError(f"add_histogram: the input of {tag!r} has no values")
        counts, edges = np.histogram(a, bins="auto" if bins == "tensorflow" else bins)
        if max_bins is not None and len(counts) > max_bins:
            counts, edges = np.histogram(a, bins=max_bins)   # at most max_bins equal-width buckets
        hist = self._HistogramProto(min=float(a.min()), max=float(a.max()), num=int(a.size),
                                    sum=float(a.sum()), sum_squares=float(np.dot(a, a)),
                                    bucket_limit=[float(x) for x in edges[1:]],
                                    bucket=[float(c) for c in counts])
        self._add(self._writer, self._Summary.Value(tag=tag, histo=hist), global_step, walltime)

    def flush(self) -> None:
        self._writer.flush()
        for w in self._sub_writers.values():
            w.flush()

    def close(self) -> None:
        self._writer.close()
        for w in self._sub_writers.values():
            w.close()
        self._sub_writers.clear()

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
