"""``tracejit.utils``: helpers outside the core (``tracejit.utils.data`` and
``tracejit.utils.checkpoint``, like ``torch.utils.data`` and ``torch.utils.checkpoint``;
``model_zoo.load_url`` and ``hooks.RemovableHandle`` where older code finds them)."""
from .. import hub as _hub
from .._path_modules import path_module as _path_module
from ..nn.module import RemovableHandle as _RemovableHandle
from . import checkpoint, data  # noqa: F401

model_zoo = _path_module(__name__ + ".model_zoo", "``torch.utils.model_zoo``: the hub's checkpoint loader.",
                         {"load_url": _hub.load_state_dict_from_url})
hooks = _path_module(__name__ + ".hooks", "``torch.utils.hooks``: the handle a hook registration returns.",
                     {"RemovableHandle": _RemovableHandle})
