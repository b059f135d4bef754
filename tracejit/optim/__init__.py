"""``tracejit.optim``: optimizers (SGD, Adam, AdamW) and learning-rate schedules, like ``torch.optim``."""
from __future__ import annotations

from . import lr_scheduler  # noqa: F401
from .adam import FUSED_MIN, Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD
from .adadelta import Adadelta  # noqa: E402
from .adagrad import Adagrad  # noqa: E402
from .lbfgs import LBFGS  # noqa: E402
from .rmsprop import RMSprop  # noqa: E402
from .adam_variants import ASGD, Adamax, NAdam, RAdam, Rprop  # noqa: E402

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "FUSED_MIN", "lr_scheduler"]
__all__ += ["RMSprop", "Adagrad", "Adadelta", "LBFGS", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop"]
from . import swa_utils  # noqa: E402,F401
__all__ += ["swa_utils"]
from .factored import Adafactor, Muon, SparseAdam  # noqa: E402
__all__ += ["Adafactor", "Muon", "SparseAdam"]


def _path_modules() -> None:
    """``from torch.optim.adamw import AdamW`` and the other one-optimizer module paths of
    PyTorch whose classes live together here."""
    from .._path_modules import path_module
    for sub, name in (("adamw", "AdamW"), ("adamax", "Adamax"), ("nadam", "NAdam"), ("radam", "RAdam"),
                      ("asgd", "ASGD"), ("rprop", "Rprop"), ("adafactor", "Adafactor"), ("sparse_adam", "SparseAdam")):
        globals()[sub] = path_module(f"{__name__}.{sub}", f"``torch.optim.{sub}``", {name: globals()[name]})


_path_modules()
