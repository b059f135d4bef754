"""``tracejit.utils``: helpers outside the core (``tracejit.utils.data`` and
``tracejit.utils.checkpoint``, like ``torch.utils.data`` and ``torch.utils.checkpoint``; ``_pytree``,
``benchmark``;
``model_zoo.load_url``, ``hooks.RemovableHandle`` and ``dlpack`` where code finds them)."""
from .. import hub as _hub
from .._path_modules import path_module as _path_module
from ..nn.module import RemovableHandle as _RemovableHandle
from . import _pytree, benchmark, checkpoint, data  # noqa: F401

model_zoo = _path_module(__name__ + ".model_zoo", "``torch.utils.model_zoo``: the hub's checkpoint loader.",
                         {"load_url": _hub.load_state_dict_from_url})


class _Capsule:
    """A host DLPack capsule (``to_dlpack``'s) as the object ``from_dlpack`` reads."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self) -> tuple:
        return (1, 0)   # (kDLCPU)


def _from_dlpack(ext):
    from ..ops.creation import from_dlpack
    return from_dlpack(_Capsule(ext) if type(ext).__name__ == "PyCapsule" else ext)


dlpack = _path_module(__name__ + ".dlpack", "``torch.utils.dlpack``: tensors to and from DLPack capsules.",
                      {"from_dlpack": _from_dlpack, "to_dlpack": lambda tensor: tensor.__dlpack__()})
hooks = _path_module(__name__ + ".hooks", "``torch.utils.hooks``: the handle a hook registration returns.",
                     {"RemovableHandle": _RemovableHandle})
