"""DataPipes (``torch.utils.data.datapipes``): iterable (`IterDataPipe`) and map-style
(`MapDataPipe`) datasets chained by functional names (``dp.map(f).filter(g).batch(8)``),
the decorators that register and check them, and the built-in pipes of ``.iter`` and
``.map``. PyTorch has deprecated them in favour of plain datasets; programs written
against them (the torchtext-era tutorials) run unchanged."""
from . import datapipe, iter, map  # noqa: A004, F401  (PyTorch's submodule names)
from .datapipe import (DataChunk, DFIterDataPipe, IterDataPipe, MapDataPipe, argument_validation,
                       functional_datapipe, guaranteed_datapipes_determinism, non_deterministic,
                       runtime_validation, runtime_validation_disabled)

__all__ = ["DataChunk", "DFIterDataPipe", "IterDataPipe", "MapDataPipe", "argument_validation",
           "functional_datapipe", "guaranteed_datapipes_determinism", "non_deterministic",
           "runtime_validation", "runtime_validation_disabled"]
