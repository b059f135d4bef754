"""PyTorch's one-optimizer module paths (``from torch.optim.adamw import AdamW``)."""
import tracejit as tj


def test_one_optimizer_module_paths():
    from tracejit.optim.adamw import AdamW
    from tracejit.optim.radam import RAdam
    from tracejit.optim.sparse_adam import SparseAdam
    assert AdamW is tj.optim.AdamW and RAdam is tj.optim.RAdam and SparseAdam is tj.optim.SparseAdam
