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


def test_dlpack_round_trip_and_version():
    x = tj.arange(3.0)
    assert tj.utils.dlpack.from_dlpack(tj.utils.dlpack.to_dlpack(x)).tolist() == [0.0, 1.0, 2.0]
    from tracejit.version import cuda
    assert cuda is None and tj.version.__version__ == tj.__version__


def test_copy_takes_non_blocking():
    y = tj.zeros(2)
    assert y.copy_(tj.ones(2), non_blocking=True) is y and y.tolist() == [1.0, 1.0]
