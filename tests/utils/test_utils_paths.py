"""The older paths of tracejit.utils: model_zoo.load_url and hooks.RemovableHandle."""
import numpy as np

import tracejit as tj
from tracejit.utils.hooks import RemovableHandle
from tracejit.utils.model_zoo import load_url


def test_model_zoo_load_url_is_the_hub_loader(tmp_path):
    path = str(tmp_path / "m.pth")
    tj.save({"w": tj.arange(3.0)}, path)
    np.testing.assert_array_equal(load_url(path)["w"].numpy(), [0.0, 1.0, 2.0])


def test_hook_handles_are_removable_handles():
    h = tj.nn.Linear(2, 2).register_forward_hook(lambda m, i, o: None)
    assert isinstance(h, RemovableHandle)
    from tracejit.nn.modules.conv import _ConvNd
    assert isinstance(tj.nn.Conv2d(1, 1, 1), _ConvNd)
