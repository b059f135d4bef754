"""tracejit.utils.data laid out as torch.utils.data: the names programs import from each
submodule exist there and are the package's; the samplers and datasets added with the
layout behave as PyTorch documents them."""
import numpy as np
import pytest

import tracejit as tj
import tracejit.utils.data as tud

_PATHS = {
    "dataloader": ["DataLoader", "default_collate", "default_convert", "get_worker_info"],
    "dataset": ["Dataset", "IterableDataset", "TensorDataset", "StackDataset", "Subset",
                "ConcatDataset", "ChainDataset", "random_split"],
    "sampler": ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
                "WeightedRandomSampler", "BatchSampler"],
    "distributed": ["DistributedSampler"],
    "_utils.collate": ["default_collate"],
}


@pytest.mark.parametrize("module", sorted(_PATHS))
def test_submodules_hold_the_names_programs_import(module):
    import importlib
    mod = importlib.import_module(f"tracejit.utils.data.{module}")
    for name in _PATHS[module]:
        assert getattr(mod, name) is getattr(tud, name), f"{module}.{name}"


def test_weighted_random_sampler_follows_the_weights():
    tj.manual_seed(0)
    draws = list(tud.WeightedRandomSampler([0.0, 1.0, 3.0, 0.0], 4000))
    counts = np.bincount(draws, minlength=4)
    assert counts[0] == counts[3] == 0
    assert abs(counts[2] / 4000 - 0.75) < 0.03
    once = list(tud.WeightedRandomSampler([1.0, 1.0, 1.0], 3, replacement=False))
    assert sorted(once) == [0, 1, 2]
    with pytest.raises(ValueError, match="num_samples"):
        tud.WeightedRandomSampler([1.0], 0)


def test_stack_and_chain_datasets():
    a, b = tud.TensorDataset(tj.arange(3)), [10, 11, 12]
    item = tud.StackDataset(a, b)[1]
    assert int(item[0][0]) == 1 and item[1] == 11
    s = tud.StackDataset(x=b, y=[0, 1, 2])
    assert s[2] == {"x": 12, "y": 2} and len(s) == 3
    with pytest.raises(ValueError, match="size mismatch"):
        tud.StackDataset(b, [1])

    class Stream(tud.IterableDataset):
        def __init__(self, items):
            self.items = items

        def __iter__(self):
            return iter(self.items)
    assert list(tud.ChainDataset([Stream([1, 2]), Stream([3])])) == [1, 2, 3]
