"""``tracejit.utils.data``: datasets, samplers, ``DataLoader`` and collation, laid out as
``torch.utils.data`` is (``.dataset``, ``.sampler``, ``.dataloader``, ``.distributed``), so
``from tracejit.utils.data.dataloader import default_collate`` works where programs write it.

With ``num_workers=0`` loading happens in the calling process; with ``num_workers > 0``
worker processes load and collate the batches the parent's sampler chose, so the batches
and their order are those of ``num_workers=0`` (see `_workers`). Shuffling draws from
tracejit's global generator, so ``tracejit.manual_seed`` makes the order reproducible.
"""
from . import _utils, dataset, sampler, dataloader, distributed  # noqa: F401
from . import datapipes  # noqa: E402,F401
from .dataloader import _DatasetKind  # noqa: E402,F401  (PyTorch's private name, imported by libraries)
from .datapipes.datapipe import (DataChunk, DFIterDataPipe, IterDataPipe, MapDataPipe,  # noqa: E402,F401
                                 argument_validation, functional_datapipe, guaranteed_datapipes_determinism,
                                 non_deterministic, runtime_validation, runtime_validation_disabled)

__all__ = []
for _m in (dataset, sampler, dataloader, distributed):   # their public names are tracejit.utils.data's
    globals().update((name, getattr(_m, name)) for name in _m.__all__)
    __all__ += _m.__all__
del _m
__all__ += datapipes.__all__
